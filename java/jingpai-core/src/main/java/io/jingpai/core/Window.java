/*
 * jingpai: the gateway's finishing step (jingpai/plugin/gateway/finish.py) without HTTP: rerank the window, fuse,
 * keep hits past the window in the engine's order and score, cut the page. tests/vectors/paging.json.
 */
package io.jingpai.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** The window, paging and text rules of the gateway. */
public final class Window {
    private Window() {}

    /** One hit of the page: where it was in the engine's answer and its score now. */
    public record Placed(int input, double score, boolean reranked, int engineRank, double modelScore) {}

    /**
     * The page of a reranked answer.
     *
     * @param engine the engine's scores of all returned hits, best first (null entries: no score)
     * @param model the reranker's scores of the first {@code min(window, hits)} of them
     */
    public static List<Placed> page(Double[] engine, double[] model, int window, int from, int size, Fusion fusion, double[] fusedOut) {
        int w = Math.min(window, engine.length);
        Double[] windowScores = new Double[w];
        System.arraycopy(engine, 0, windowScores, 0, w);
        double[] fused = fusion.fuse(windowScores, model);
        if (fusedOut != null) {
            System.arraycopy(fused, 0, fusedOut, 0, w);
        }
        double[] ranks = new double[w];
        for (int i = 0; i < w; i++) {
            ranks[i] = i + 1;
        }
        int[] order = Fusion.fusedOrder(fused, ranks);
        List<Placed> all = new ArrayList<>();
        for (int i : order) {
            all.add(new Placed(i, fused[i], true, i + 1, model[i]));
        }
        for (int i = w; i < engine.length; i++) {
            all.add(new Placed(i, engine[i] == null ? Double.NaN : engine[i], false, i + 1, Double.NaN));
        }
        return slice(all, from, size);
    }

    public static <T> List<T> slice(List<T> all, int from, int size) {
        int start = Math.min(from, all.size());
        int end = (int) Math.min((long) from + size, all.size());
        return new ArrayList<>(all.subList(start, end));
    }

    /** The text of a hit the reranker scores: its fields joined by newlines, cut to {@code docChars} characters. */
    public static String docText(Map<String, Object> source, List<String> fields, int docChars) {
        List<String> parts = new ArrayList<>();
        if (source != null) {
            for (String name : fields) {
                Object value = getPath(source, name);
                if (value instanceof List<?> list) {
                    List<String> items = new ArrayList<>();
                    for (Object v : list) {
                        if (v != null) {
                            items.add(pyStr(v));
                        }
                    }
                    value = String.join(" ", items);
                }
                if (value != null && !"".equals(value)) {
                    parts.add(pyStr(value));
                }
            }
        }
        String text = String.join("\n", parts);
        int chars = text.codePointCount(0, text.length());
        return chars <= docChars ? text : text.substring(0, text.offsetByCodePoints(0, docChars));
    }

    private static String pyStr(Object v) {
        if (v instanceof Boolean b) {
            return b ? "True" : "False";
        }
        return String.valueOf(v);
    }

    @SuppressWarnings("unchecked")
    public static Object getPath(Map<String, Object> source, String path) {
        Object node = source;
        for (String part : path.split("\\.")) {
            if (!(node instanceof Map<?, ?> map) || !map.containsKey(part)) {
                return source.get(path);
            }
            node = ((Map<String, Object>) map).get(part);
        }
        return node;
    }
}
