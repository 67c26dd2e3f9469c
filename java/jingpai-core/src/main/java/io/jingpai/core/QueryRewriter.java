/*
 * jingpai: the gateway's query augmentation (jingpai/plugin/augment.py, QueryRewriter) in Java, on the query's
 * JSON form: every full-text clause on a text field becomes bool.should[original, segmented multi_match,
 * terms on the keywords field, keyword-weight clauses], minimum_should_match 1. tests/vectors/augment.json.
 */
package io.jingpai.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/** Widens the full-text clauses of queries against one jingpai index (same fields and boosts as the gateway). */
public final class QueryRewriter {
    public static final double SEG_BOOST = 0.2;
    public static final double KEYWORD_BOOST = 0.2;
    public static final double WEIGHT_BOOST = 0.0;

    static final List<String> FULL_TEXT_KINDS = Arrays.asList("match", "match_phrase", "multi_match", "query_string", "simple_query_string");
    static final Map<String, List<String>> COMPOUND_CHILDREN = Map.of(
        "bool", List.of("must", "should", "filter"),
        "dis_max", List.of("queries"),
        "constant_score", List.of("filter"),
        "boosting", List.of("positive"),
        "function_score", List.of("query"),
        "script_score", List.of("query"));

    private static final Pattern QS_FIELD_PREFIX = Pattern.compile("(?<![\\w.])[\\w.*]+:(?=\\S)", Pattern.UNICODE_CHARACTER_CLASS);
    private static final Pattern QS_SYNTAX = Pattern.compile("\\b(?:AND|OR|NOT)\\b|[\"()+\\-|!{}\\[\\]^~*?\\\\/&<>=:]",
        Pattern.UNICODE_CHARACTER_CLASS);
    private static final Pattern SPACES = Pattern.compile("\\s+", Pattern.UNICODE_CHARACTER_CLASS);

    /** The field roles of a jingpai index (the mapping's {@code _meta}, IndexMeta). */
    public static final class Meta {
        public final List<String> textFields;
        public final Map<String, String> segFields;
        public final String keywordsField;
        public final String weightsField;
        public final String weightEncoding;

        public Meta(List<String> textFields, Map<String, String> segFields, String keywordsField, String weightsField, String weightEncoding) {
            this.textFields = List.copyOf(textFields);
            Map<String, String> seg = new LinkedHashMap<>();
            if (segFields == null || segFields.isEmpty()) {
                for (String f : textFields) {
                    seg.put(f, "jingpai.seg." + f);
                }
            } else {
                seg.putAll(segFields);
            }
            this.segFields = seg;
            this.keywordsField = keywordsField == null ? "jingpai.keywords" : keywordsField;
            this.weightsField = weightsField == null ? "jingpai.kw" : weightsField;
            this.weightEncoding = weightEncoding == null ? "term_frequency" : weightEncoding;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Meta m && m.textFields.equals(textFields) && m.segFields.equals(segFields)
                && java.util.Objects.equals(m.keywordsField, keywordsField) && java.util.Objects.equals(m.weightsField, weightsField)
                && java.util.Objects.equals(m.weightEncoding, weightEncoding);
        }

        @Override
        public int hashCode() {
            return java.util.Objects.hash(textFields, segFields, keywordsField, weightsField, weightEncoding);
        }
    }

    /** One full-text clause: its kind, text and the text fields it targets. */
    public record Clause(String kind, String text, List<String> fields) {}

    /** What a rewrite found and did. */
    public static final class Result {
        public Object query;
        public final List<Clause> clauses = new ArrayList<>();
        public final List<Map.Entry<String, Double>> keywords = new ArrayList<>();
        public int augmented;

        /** the distinct clause texts in query order joined by a space (the text sent to the reranker) */
        public String queryText() {
            List<String> seen = new ArrayList<>();
            for (Clause c : clauses) {
                if (!seen.contains(c.text())) {
                    seen.add(c.text());
                }
            }
            return String.join(" ", seen);
        }
    }

    private final Meta meta;
    private final Segmenter segmenter;
    private final Map<String, Double> weights;
    private final int topK;
    private final double segBoost, keywordBoost, weightBoost;

    /**
     * @param weights the dictionary's word → best score ({@code null}: segmentation-only augmentation)
     */
    public QueryRewriter(Meta meta, Segmenter segmenter, Map<String, Double> weights, int topK, double segBoost, double keywordBoost,
                         double weightBoost) {
        this.meta = meta;
        this.segmenter = segmenter;
        this.weights = weights;
        this.topK = topK;
        this.segBoost = segBoost;
        this.keywordBoost = keywordBoost;
        this.weightBoost = weightBoost;
    }

    /** The dictionary keywords of a text with their weights (score × count), best first, ties in text order. */
    public List<Map.Entry<String, Double>> keywords(String text) {
        List<Map.Entry<String, Double>> out = new ArrayList<>();
        if (weights == null) {
            return out;
        }
        Map<String, Integer> counts = new LinkedHashMap<>();
        for (String token : segmenter.cut(text)) {
            if (weights.containsKey(token)) {
                counts.merge(token, 1, Integer::sum);
            }
        }
        for (Map.Entry<String, Integer> e : counts.entrySet()) {
            double s = weights.get(e.getKey()) * e.getValue();
            if (s > 0) {
                out.add(Map.entry(e.getKey(), s));
            }
        }
        out.sort((a, b) -> Double.compare(b.getValue(), a.getValue())); // List.sort is stable
        return out.size() > topK ? new ArrayList<>(out.subList(0, topK)) : out;
    }

    /** Rewrites {@code query} (a JSON map; not changed in place). */
    public Result rewrite(Object query) {
        Result result = new Result();
        Map<String, Double> seen = new LinkedHashMap<>();
        result.query = walk(query, (clause, kind, body) -> {
            result.clauses.add(clause);
            List<Map.Entry<String, Double>> keywords = new ArrayList<>();
            List<Object> added = augmentation(clause, keywords);
            for (Map.Entry<String, Double> kw : keywords) {
                seen.put(kw.getKey(), Math.max(kw.getValue(), seen.getOrDefault(kw.getKey(), 0.0)));
            }
            if (added.isEmpty()) {
                return null;
            }
            result.augmented++;
            List<Object> should = new ArrayList<>();
            should.add(Map.of(kind, deepCopy(body)));
            should.addAll(added);
            Map<String, Object> bool = new LinkedHashMap<>();
            bool.put("should", should);
            bool.put("minimum_should_match", 1);
            return Map.of("bool", bool);
        });
        result.keywords.addAll(seen.entrySet().stream().map(e -> Map.entry(e.getKey(), e.getValue())).toList());
        result.keywords.sort((a, b) -> Double.compare(b.getValue(), a.getValue()));
        return result;
    }

    /** All full-text clauses on the text fields in positive contexts, in document order. */
    public List<Clause> find(Object query) {
        List<Clause> found = new ArrayList<>();
        walk(query, (clause, kind, body) -> {
            found.add(clause);
            return null;
        });
        return found;
    }

    private List<Object> augmentation(Clause clause, List<Map.Entry<String, Double>> keywordsOut) {
        List<Object> added = new ArrayList<>();
        List<String> segFields = new ArrayList<>();
        for (String f : clause.fields()) {
            if (meta.segFields.containsKey(f)) {
                segFields.add(meta.segFields.get(f));
            }
        }
        List<String> tokens = new ArrayList<>();
        for (String t : segmenter.cut(clause.text())) {
            if (!t.strip().isEmpty()) {
                tokens.add(t);
            }
        }
        String segText = String.join(" ", tokens);
        if (!segFields.isEmpty() && !segText.isEmpty()) {
            added.add(Map.of("multi_match", ordered("query", segText, "fields", segFields, "boost", segBoost)));
        }
        List<Map.Entry<String, Double>> keywords = keywords(clause.text());
        keywordsOut.addAll(keywords);
        if (!keywords.isEmpty()) {
            List<String> words = keywords.stream().map(Map.Entry::getKey).toList();
            added.add(Map.of("terms", ordered(meta.keywordsField, words, "boost", keywordBoost)));
            if (weightBoost > 0 && meta.weightEncoding.equals("rank_features")) {
                double top = keywords.stream().mapToDouble(Map.Entry::getValue).max().orElse(0.0);
                if (top == 0.0) {
                    top = 1.0;
                }
                for (Map.Entry<String, Double> kw : keywords) {
                    added.add(Map.of("rank_feature", ordered("field", meta.weightsField + "." + encode(kw.getKey(), "rank_features"),
                        "boost", weightBoost * Math.max(kw.getValue() / top, 1e-3))));
                }
            } else if (weightBoost > 0) {
                List<String> encoded = words.stream().map(w -> encode(w, "term_frequency")).toList();
                added.add(Map.of("match", Map.of(meta.weightsField, ordered("query", String.join(" ", encoded), "boost", weightBoost))));
            }
        }
        return added;
    }

    private static String encode(String word, String encoding) {
        word = word.replace(" ", "_");
        return encoding.equals("rank_features") ? word.replace(".", "_") : word;
    }

    private static Map<String, Object> ordered(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            out.put((String) kv[i], kv[i + 1]);
        }
        return out;
    }

    @FunctionalInterface
    private interface Visit {
        Object visit(Clause clause, String kind, Object body);
    }

    @SuppressWarnings("unchecked")
    private Object walk(Object node, Visit visit) {
        if (!(node instanceof Map<?, ?> map) || map.size() != 1) {
            return node;
        }
        Map.Entry<String, Object> only = ((Map<String, Object>) map).entrySet().iterator().next();
        String kind = only.getKey();
        Object body = only.getValue();
        if (FULL_TEXT_KINDS.contains(kind)) {
            Clause clause = parse(kind, body);
            if (clause == null) {
                return node;
            }
            Object replacement = visit.visit(clause, kind, body);
            return replacement != null ? replacement : node;
        }
        List<String> children = COMPOUND_CHILDREN.get(kind);
        if (children == null || !(body instanceof Map<?, ?> bodyMap)) {
            return node;
        }
        Map<String, Object> newBody = new LinkedHashMap<>((Map<String, Object>) bodyMap);
        for (String key : children) {
            Object child = bodyMap.get(key);
            if (child instanceof List<?> list) {
                List<Object> walked = new ArrayList<>();
                for (Object c : list) {
                    walked.add(walk(c, visit));
                }
                newBody.put(key, walked);
            } else if (child instanceof Map<?, ?>) {
                newBody.put(key, walk(child, visit));
            }
        }
        return Map.of(kind, newBody);
    }

    /** The clause of one full-text query body, or null when it targets no text field (parse_full_text). */
    @SuppressWarnings("unchecked")
    Clause parse(String kind, Object body) {
        if (!(body instanceof Map<?, ?> map)) {
            return null;
        }
        Object text;
        List<String> targets;
        if (kind.equals("match") || kind.equals("match_phrase")) {
            List<String> names = new ArrayList<>();
            for (Object k : map.keySet()) {
                if (!k.equals("boost") && !k.equals("_name")) {
                    names.add((String) k);
                }
            }
            if (names.size() != 1) {
                return null;
            }
            Object value = map.get(names.get(0));
            text = value instanceof Map<?, ?> v ? v.get("query") : value;
            targets = targets(names);
        } else {
            text = map.get("query");
            Object patterns = map.get("fields");
            if (!kind.equals("multi_match") && isEmpty(patterns) && map.get("default_field") instanceof String df && !df.isEmpty()) {
                patterns = List.of(df);
            }
            // the engine writes an absent "fields" as []: the default field, all text fields (as None in Python)
            if (isEmpty(patterns)) {
                patterns = null;
            } else if (patterns instanceof String s) {
                patterns = List.of(s);
            }
            targets = targets((List<String>) patterns);
            if (text instanceof String s && !kind.equals("multi_match")) {
                text = cleanQueryString(s);
            }
        }
        if (!(text instanceof String s) || s.strip().isEmpty() || targets.isEmpty()) {
            return null;
        }
        return new Clause(kind, s.strip(), targets);
    }

    private static boolean isEmpty(Object patterns) {
        return patterns == null || (patterns instanceof List<?> l && l.isEmpty()) || (patterns instanceof String s && s.isEmpty());
    }

    private List<String> targets(List<String> patterns) {
        if (patterns == null) {
            return meta.textFields;
        }
        List<Pattern> globs = patterns.stream().map(p -> glob(p.split("\\^", 2)[0])).toList();
        return meta.textFields.stream().filter(f -> globs.stream().anyMatch(g -> g.matcher(f).matches())).toList();
    }

    /** fnmatch.fnmatchcase's pattern as a regex ({@code *}, {@code ?}, {@code [seq]}, {@code [!seq]}). */
    public static Pattern glob(String pattern) {
        StringBuilder re = new StringBuilder();
        int i = 0, n = pattern.length();
        while (i < n) {
            char c = pattern.charAt(i++);
            if (c == '*') {
                re.append(".*");
            } else if (c == '?') {
                re.append('.');
            } else if (c == '[' && pattern.indexOf(']', i + (i < n && pattern.charAt(i) == '!' ? 2 : 1)) > 0) {
                int j = pattern.indexOf(']', i + (i < n && pattern.charAt(i) == '!' ? 2 : 1));
                String seq = pattern.substring(i, j).replace("\\", "\\\\");
                re.append('[').append(seq.startsWith("!") ? "^" + seq.substring(1) : seq).append(']');
                i = j + 1;
            } else {
                re.append(Pattern.quote(String.valueOf(c)));
            }
        }
        return Pattern.compile(re.toString(), Pattern.DOTALL);
    }

    public static String cleanQueryString(String text) {
        String out = QS_SYNTAX.matcher(QS_FIELD_PREFIX.matcher(text).replaceAll(" ")).replaceAll(" ");
        return String.join(" ", Arrays.stream(SPACES.split(out.strip())).filter(s -> !s.isEmpty()).toList());
    }

    @SuppressWarnings("unchecked")
    static Object deepCopy(Object value) {
        if (value instanceof Map<?, ?> map) {
            Map<String, Object> out = new LinkedHashMap<>();
            map.forEach((k, v) -> out.put((String) k, deepCopy(v)));
            return out;
        }
        if (value instanceof List<?> list) {
            List<Object> out = new ArrayList<>();
            list.forEach(v -> out.add(deepCopy(v)));
            return out;
        }
        return value;
    }
}
