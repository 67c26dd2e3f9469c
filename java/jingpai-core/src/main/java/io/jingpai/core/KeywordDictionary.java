/*
 * jingpai: the dictionary a plugin augments with, in its inline form (what `jingpai plugin pipeline` / `retriever`
 * upload): the segmenter's base dictionary (jieba's dict.txt as word -> frequency, with its total), the jingpai
 * dictionary's keyword weights and its user-dictionary words.
 */
package io.jingpai.core;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** A segmenter and keyword weights read from an inline dictionary object. */
public record KeywordDictionary(Segmenter segmenter, Map<String, Double> weights) {
    /**
     * The dictionary of {@code inline} ({@code base_total}, {@code base}, {@code weights}, {@code userdict}); the base
     * dictionary is shared by every dictionary with the same one (Segmenter.shared): not copied per search or pipeline.
     *
     * @throws IllegalArgumentException a member of the wrong shape, named
     */
    @SuppressWarnings("unchecked")
    public static KeywordDictionary inline(Map<String, Object> inline) {
        Object base = inline.getOrDefault("base", Map.of());
        Object total = inline.getOrDefault("base_total", 0);
        if (!(base instanceof Map<?, ?>) || !(total instanceof Number)) {
            throw new IllegalArgumentException("dictionary.base must be an object of word -> frequency and dictionary.base_total a number");
        }
        Segmenter segmenter = new Segmenter(Segmenter.shared((Map<String, Number>) base, ((Number) total).longValue()));
        Map<String, Double> weights = new HashMap<>();
        Object w = inline.getOrDefault("weights", Map.of());
        if (!(w instanceof Map<?, ?> wm)) {
            throw new IllegalArgumentException("dictionary.weights must be an object of keyword -> weight");
        }
        wm.forEach((k, v) -> weights.put(String.valueOf(k), ((Number) v).doubleValue()));
        Object u = inline.getOrDefault("userdict", List.of());
        if (!(u instanceof List<?> entries)) {
            throw new IllegalArgumentException("dictionary.userdict must be a list of [word, frequency] pairs");
        }
        for (Object entry : entries) {
            if (!(entry instanceof List<?> pair) || pair.size() < 2 || !(pair.get(1) instanceof Number f)) {
                throw new IllegalArgumentException("dictionary.userdict entries must be [word, frequency] pairs, got " + entry);
            }
            segmenter.addWord(String.valueOf(pair.get(0)), f.longValue());
        }
        return new KeywordDictionary(segmenter, weights);
    }
}
