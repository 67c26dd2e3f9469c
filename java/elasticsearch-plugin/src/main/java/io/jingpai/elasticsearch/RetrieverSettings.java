/*
 * jingpai: what a `jingpai` retriever says besides its inner retriever: the reranker and its limits, the window, the
 * fusion, the fields sent to the reranker, and the keyword augmentation (the index's roles and the uploaded
 * dictionary). The names and defaults are the OpenSearch jingpai_rerank / jingpai_keywords processors' (the gateway's
 * defaults); `jingpai plugin retriever` writes them for an index.
 */
package io.jingpai.elasticsearch;

import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import io.jingpai.core.Answers;
import io.jingpai.core.CircuitBreaker;
import io.jingpai.core.Fusion;
import io.jingpai.core.Overrides;
import io.jingpai.core.QueryRewriter;
import io.jingpai.core.RerankSlots;
import org.elasticsearch.common.io.stream.StreamInput;
import org.elasticsearch.common.io.stream.StreamOutput;

/**
 * One retriever's settings.
 *
 * @param mode {@code rerank} (augment and rerank) or {@code augment} (augmentation alone: no reranker needed)
 * @param keywords the augmentation ({@code null}: none): the index's roles, boosts and the dictionary document
 */
public record RetrieverSettings(String mode, String url, int window, int maxWindow, List<String> fields, int docChars, int timeoutMs,
                                Fusion fusion, int breakerFailures, double breakerResetS, int rerankConcurrency, long maxAnswerBytes,
                                Keywords keywords) {
    public static final List<String> KEYS = List.of("retriever", "mode", "reranker_url", "rank_window_size", "max_window", "fields",
        "doc_chars", "timeout_ms", "fusion", "fusion_weight", "rrf_k", "breaker_failures", "breaker_reset_s", "rerank_concurrency",
        "max_answer_bytes", "keywords");
    public static final List<String> MODES = List.of("rerank", "augment");

    /** A setting that is wrong: the message names it, what was expected and the valid keys (HTTP 400). */
    public static final class Invalid extends IllegalArgumentException {
        Invalid(String key, String problem) {
            super("[jingpai] retriever: " + key + ": " + problem);
        }
    }

    /**
     * The keyword augmentation: the index's roles as its {@code _meta.jingpai} gives them (the gateway's QueryRewriter
     * reads the same), the gateway's boosts, and where the dictionary was uploaded ({@code index}/{@code id}, at
     * {@code version}: a changed dictionary is another version, loaded once per node).
     */
    public record Keywords(String index, String id, String version, QueryRewriter.Meta meta, int topK, double segBoost, double keywordBoost,
                           double weightBoost) {
        public static final List<String> KEYS = List.of("dictionary", "text_fields", "seg_fields", "keywords_field", "weights_field",
            "weight_encoding", "keywords_top_k", "seg_boost", "keyword_boost", "weight_boost");

        /** the dictionary document's cache key on this node */
        public String key() {
            return index + "/" + id + "@" + version;
        }

        @SuppressWarnings("unchecked")
        static Keywords read(Object raw) {
            if (!(raw instanceof Map<?, ?> m)) {
                throw new Invalid("keywords", "expected an object with " + String.join(", ", KEYS) + ", got " + raw);
            }
            Map<String, Object> map = (Map<String, Object>) m;
            for (String key : map.keySet()) {
                if (!KEYS.contains(key)) {
                    throw new Invalid("keywords." + key, "unknown setting; valid keys: " + String.join(", ", KEYS));
                }
            }
            if (!(map.get("dictionary") instanceof Map<?, ?> d) || !(d.get("index") instanceof String index) || !(d.get("id") instanceof String id)
                || !(d.get("version") instanceof String version)) {
                throw new Invalid("keywords.dictionary", "expected {\"index\": …, \"id\": …, \"version\": …} naming the document "
                    + "`jingpai plugin retriever` uploaded, got " + map.get("dictionary"));
            }
            List<String> textFields = strings(map.get("text_fields"), "keywords.text_fields");
            Object seg = map.getOrDefault("seg_fields", Map.of());
            if (!(seg instanceof Map<?, ?> segMap)) {
                throw new Invalid("keywords.seg_fields", "expected an object of field -> segmented field, got " + seg);
            }
            Map<String, String> segFields = new LinkedHashMap<>();
            segMap.forEach((k, v) -> segFields.put(String.valueOf(k), String.valueOf(v)));
            QueryRewriter.Meta meta = new QueryRewriter.Meta(textFields, segFields, optionalString(map, "keywords_field"),
                optionalString(map, "weights_field"), optionalString(map, "weight_encoding"));
            return new Keywords(index, id, version, meta, integer(map.get("keywords_top_k"), "keywords.keywords_top_k", 10, 1),
                number(map.get("seg_boost"), "keywords.seg_boost", QueryRewriter.SEG_BOOST),
                number(map.get("keyword_boost"), "keywords.keyword_boost", QueryRewriter.KEYWORD_BOOST),
                number(map.get("weight_boost"), "keywords.weight_boost", QueryRewriter.WEIGHT_BOOST));
        }
    }

    /** The settings of a retriever's body (less its {@code retriever}), checked; the reranker's host against {@code allowedHosts}. */
    public static RetrieverSettings read(Map<String, Object> body, List<String> allowedHosts) {
        for (String key : body.keySet()) {
            if (!KEYS.contains(key)) {
                throw new Invalid(key, "unknown setting; valid keys: " + String.join(", ", KEYS));
            }
        }
        String mode = optionalString(body, "mode");
        mode = mode == null ? "rerank" : mode;
        if (!MODES.contains(mode)) {
            throw new Invalid("mode", "expected one of " + String.join(", ", MODES) + ", got '" + mode + "'");
        }
        String url = optionalString(body, "reranker_url");
        if (url == null && mode.equals("rerank")) {
            throw new Invalid("reranker_url", "the `jingpai serve` URL is required to rerank (or set \"mode\": \"augment\")");
        }
        if (url != null) {
            String host;
            try {
                host = URI.create(url).getHost();
            } catch (IllegalArgumentException e) {
                throw new Invalid("reranker_url", "not a URL: " + url);
            }
            if (!allowedHosts.contains("*") && (host == null || !allowedHosts.contains(host))) {
                throw new Invalid("reranker_url", "host " + host + " is not in the node setting jingpai.reranker.allowed_hosts " + allowedHosts);
            }
        }
        int maxWindow = integer(body.get("max_window"), "max_window", 500, 1);
        int window = integer(body.get("rank_window_size"), "rank_window_size", 20, 1);
        if (window > maxWindow) {
            throw new Invalid("rank_window_size", "must be in [1, max_window " + maxWindow + "], got " + window);
        }
        List<String> fields = body.containsKey("fields") ? strings(body.get("fields"), "fields") : List.of();
        if (fields.isEmpty() && mode.equals("rerank")) {
            throw new Invalid("fields", "the document fields sent to the reranker are required");
        }
        String fusionMode = optionalString(body, "fusion");
        Fusion fusion;
        try {
            fusion = new Fusion(fusionMode == null ? "linear" : fusionMode, number(body.get("fusion_weight"), "fusion_weight", 0.5),
                integer(body.get("rrf_k"), "rrf_k", 60, 1));
        } catch (IllegalArgumentException e) {
            throw new Invalid("fusion", e.getMessage());
        }
        double resetS = number(body.get("breaker_reset_s"), "breaker_reset_s", CircuitBreaker.DEFAULT_RESET_S);
        if (!(resetS > 0) || Double.isInfinite(resetS)) {
            throw new Invalid("breaker_reset_s", "must be a number of seconds > 0 (how long an open circuit breaker waits before a probe "
                + "request), got " + body.get("breaker_reset_s"));
        }
        Keywords keywords = body.get("keywords") == null ? null : Keywords.read(body.get("keywords"));
        return new RetrieverSettings(mode, url, window, maxWindow, fields, integer(body.get("doc_chars"), "doc_chars", 512, 1),
            integer(body.get("timeout_ms"), "timeout_ms", 3000, 1), fusion,
            integer(body.get("breaker_failures"), "breaker_failures", CircuitBreaker.DEFAULT_FAILURES, 1), resetS,
            integer(body.get("rerank_concurrency"), "rerank_concurrency", RerankSlots.DEFAULT_CONCURRENCY, 1),
            integer(body.get("max_answer_bytes"), "max_answer_bytes", (int) Answers.DEFAULT_MAX_BYTES, 1), keywords);
    }

    /** The settings the retriever writes back (its toXContent), in {@link #KEYS}' order. */
    public Map<String, Object> describe() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("mode", mode);
        if (url != null) {
            out.put("reranker_url", url);
        }
        out.put("rank_window_size", window);
        out.put("max_window", maxWindow);
        out.put("fields", fields);
        out.put("doc_chars", docChars);
        out.put("timeout_ms", timeoutMs);
        out.put("fusion", fusion.mode);
        out.put("fusion_weight", fusion.weight);
        out.put("rrf_k", fusion.rrfK);
        out.put("breaker_failures", breakerFailures);
        out.put("breaker_reset_s", breakerResetS);
        out.put("rerank_concurrency", rerankConcurrency);
        out.put("max_answer_bytes", maxAnswerBytes);
        if (keywords != null) {
            Map<String, Object> k = new LinkedHashMap<>();
            k.put("dictionary", Map.of("index", keywords.index(), "id", keywords.id(), "version", keywords.version()));
            k.put("text_fields", keywords.meta().textFields);
            k.put("seg_fields", keywords.meta().segFields);
            k.put("keywords_field", keywords.meta().keywordsField);
            k.put("weights_field", keywords.meta().weightsField);
            k.put("weight_encoding", keywords.meta().weightEncoding);
            k.put("keywords_top_k", keywords.topK());
            k.put("seg_boost", keywords.segBoost());
            k.put("keyword_boost", keywords.keywordBoost());
            k.put("weight_boost", keywords.weightBoost());
            out.put("keywords", k);
        }
        return out;
    }

    private static String optionalString(Map<String, Object> map, String key) {
        Object v = map.get(key);
        if (v == null || v instanceof String) {
            return (String) v;
        }
        throw new Invalid(key, "expected a string, got " + v);
    }

    private static List<String> strings(Object value, String key) {
        if (value instanceof String s) {
            return List.of(s);
        }
        if (!(value instanceof List<?> list) || !list.stream().allMatch(v -> v instanceof String)) {
            throw new Invalid(key, "expected a list of field names, got " + value);
        }
        return new ArrayList<>(list.stream().map(String.class::cast).toList());
    }

    private static int integer(Object value, String key, int fallback, int min) {
        if (value == null) {
            return fallback;
        }
        double v = Overrides.numberOrNaN(value);
        if (!(v >= min) || v != Math.rint(v) || v > Integer.MAX_VALUE) {
            throw new Invalid(key, "must be an integer >= " + min + ", got " + value);
        }
        return (int) v;
    }

    private static double number(Object value, String key, double fallback) {
        if (value == null) {
            return fallback;
        }
        double v = Overrides.numberOrNaN(value);
        if (Double.isNaN(v)) {
            throw new Invalid(key, "must be a number, got " + value);
        }
        return v;
    }

    /** The settings on the wire (the rank builder carries them to the shards and back): as their JSON. */
    void writeTo(StreamOutput out) throws IOException {
        out.writeGenericMap(describe());
    }

    static RetrieverSettings readFrom(StreamInput in) throws IOException {
        return read(in.readGenericMap(), List.of("*"));
    }
}
