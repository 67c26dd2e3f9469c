/*
 * jingpai: a search's own settings in its body's ext.jingpai, read as the gateway reads them (JingpaiExt of
 * jingpai/plugin/gateway/models.py): the same keys, the same checks, the same precedence over the plugin's settings
 * (an OpenSearch pipeline's, an Elasticsearch retriever's).
 * tests/vectors/overrides.json is written by the gateway's parse_search/plan_search and replayed by OverridesTest.
 */
package io.jingpai.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Function;


/**
 * The overrides of one search; {@code null} members keep the pipeline's value. {@code model} and {@code hybrid} are
 * accepted as the gateway accepts them and have no effect here (a pipeline has no kNN first stage).
 */
public record Overrides(String mode, Integer window, List<String> fields, String query, String fusion, Double fusionWeight, Integer rrfK) {
    /** the gateway's ext.jingpai keys, in its order */
    public static final List<String> KEYS = List.of("fusion", "fusion_weight", "rrf_k", "mode", "window", "fields", "model", "query", "hybrid");
    public static final List<String> HYBRID_KEYS = List.of("enabled", "fusion", "weight", "k", "num_candidates", "rrf_k", "rerank_window");
    public static final List<String> MODES = List.of("off", "augment", "rerank");
    public static final Overrides NONE = new Overrides(null, null, null, null, null, null, null);

    /** Raised for an invalid ext.jingpai; the search is answered HTTP 400 with this message. */
    public static final class Invalid extends IllegalArgumentException {
        public final String field;

        public Invalid(String field, String problem, Object got) {
            super("invalid ext.jingpai: " + field + ": " + problem + " (got " + repr(got) + "); valid keys: " + String.join(", ", KEYS)
                + (field.startsWith("hybrid") ? "; hybrid takes: " + String.join(", ", HYBRID_KEYS) : ""));
            this.field = field;
        }
    }

    /** What {@link #find} read from a search's ext sections: the overrides, and the sections that are not jingpai's. */
    public record Found<E>(Overrides overrides, List<E> others) {}

    /**
     * The overrides of a search's ext sections (an engine's SearchExtBuilders): {@code jingpaiInfo} gives the body of
     * the jingpai one and null for the others; none: {@link #NONE}.
     *
     * @throws Invalid the jingpai section is not the gateway's ext.jingpai
     */
    public static <E> Found<E> find(List<E> exts, Function<E, Map<String, Object>> jingpaiInfo) {
        Overrides overrides = NONE;
        List<E> others = new ArrayList<>();
        for (E ext : exts == null ? List.<E>of() : exts) {
            Map<String, Object> info = jingpaiInfo.apply(ext);
            if (info != null) {
                overrides = parse(info);
            } else {
                others.add(ext);
            }
        }
        return new Found<>(overrides, others);
    }

    /** The overrides of one ext.jingpai object. */
    public static Overrides parse(Map<String, Object> raw) {
        for (String key : raw.keySet()) {
            if (!KEYS.contains(key)) {
                throw new Invalid(key, "Extra inputs are not permitted", raw.get(key));
            }
        }
        String mode = string(raw, "mode");
        if (mode != null && !MODES.contains(mode)) {
            throw new Invalid("mode", "expected one of " + String.join(", ", MODES), mode);
        }
        Integer window = integer(raw, "window");
        List<String> fields = null;
        Object f = raw.get("fields");
        if (f != null) {
            if (!(f instanceof List<?> list) || list.isEmpty() || !list.stream().allMatch(v -> v instanceof String)) {
                throw new Invalid("fields", "expected a non-empty list of field names", f);
            }
            fields = list.stream().map(String.class::cast).toList();
        }
        string(raw, "model");
        String query = string(raw, "query");
        if (query != null && query.isEmpty()) {
            throw new Invalid("query", "expected a non-empty string", query);
        }
        String fusion = string(raw, "fusion");
        if (fusion != null && !List.of(Fusion.MODES).contains(fusion)) {
            throw new Invalid("fusion", "expected one of " + String.join(", ", Fusion.MODES), fusion);
        }
        Double weight = null;
        Object w = raw.get("fusion_weight");
        if (w != null) {
            double v = numberOrNaN(w);
            if (!(v >= 0 && v <= 1)) {
                throw new Invalid("fusion_weight", "expected a number in [0, 1] (the engine's weight)", w);
            }
            weight = v;
        }
        Integer rrfK = integer(raw, "rrf_k");
        Object h = raw.get("hybrid");
        if (h instanceof Map<?, ?> hybrid) {
            for (Object key : hybrid.keySet()) {
                if (!HYBRID_KEYS.contains(String.valueOf(key))) {
                    throw new Invalid("hybrid." + key, "Extra inputs are not permitted", hybrid.get(key));
                }
            }
        } else if (h != null && !(h instanceof Boolean)) {
            throw new Invalid("hybrid", "expected true, false or an object", h);
        }
        return new Overrides(mode, window, fields, query, fusion, weight, rrfK);
    }

    /** The pipeline's fusion with this search's fusion settings on top (FusionSpec.override). */
    public Fusion over(Fusion base) {
        if (fusion == null && fusionWeight == null && rrfK == null) {
            return base;
        }
        return new Fusion(fusion != null ? fusion : base.mode, fusionWeight != null ? fusionWeight : base.weight,
            rrfK != null ? rrfK : base.rrfK);
    }

    private static String string(Map<String, Object> raw, String key) {
        Object v = raw.get(key);
        if (v == null || v instanceof String) {
            return (String) v;
        }
        throw new Invalid(key, "expected a string", v);
    }

    /** an integer >= 1: a JSON integer, a whole number such as 5.0 or a numeric string, as the gateway's validation takes it */
    private static Integer integer(Map<String, Object> raw, String key) {
        Object v = raw.get(key);
        if (v == null) {
            return null;
        }
        double d = numberOrNaN(v);
        if (d == Math.rint(d) && d >= 1 && d <= Integer.MAX_VALUE) {
            return (int) d;
        }
        throw new Invalid(key, "expected an integer >= 1", v);
    }

    /** A setting's value as a number (a JSON number or a numeric string); NaN when it is neither (the caller names it). */
    public static double numberOrNaN(Object value) {
        if (value instanceof Number n) {
            return n.doubleValue();
        }
        if (value instanceof String str) {
            try {
                return Double.parseDouble(str.trim());
            } catch (NumberFormatException ignored) {
                return Double.NaN;
            }
        }
        return Double.NaN;
    }

    private static String repr(Object v) {
        return v instanceof String s ? "'" + s + "'" : String.valueOf(v);
    }
}
