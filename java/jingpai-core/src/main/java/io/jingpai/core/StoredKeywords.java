/*
 * jingpai: keywords stored at index time (jingpai index --rerank-keywords; jingpai/indexer/rerank_keywords.py) sent to
 * a keyword reranker with the texts, as the gateway sends them (stored_keywords in jingpai/plugin/gateway/source.py).
 * tests/vectors/stored_keywords.json carries the gateway's digests and decisions; StoredKeywordsTest replays them.
 */
package io.jingpai.core;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How an index stored its rerank keywords ({@code _meta.jingpai.rerank_keywords}): the document field holding them,
 * the version of the dictionary that ranked them and how many were kept per document.
 */
public record StoredKeywords(String field, String dictVersion, int topK) {
    /** The digest tying stored keywords to their text: the first 16 hex digits of the SHA-1 of its UTF-8 bytes. */
    public static String digest(String text) {
        try {
            byte[] sha1 = MessageDigest.getInstance("SHA-1").digest(text.getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(sha1).substring(0, 16);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-1 is a required JDK algorithm", e);
        }
    }

    /**
     * The keywords stored in {@code source} at {@code field} when they are those of {@code text} (the text the reranker
     * gets: the stored digest is its digest); null when none are stored, they were found in another text (other rerank
     * fields, another cut), or they are not of the stored shape {@code {"sha1": …, "words": [strings]}}.
     */
    public static List<String> of(Map<String, Object> source, String field, String text) {
        Object stored = source == null ? null : Window.getPath(source, field);
        if (!(stored instanceof Map<?, ?> map) || !digest(text).equals(map.get("sha1"))) {
            return null;
        }
        if (!(map.get("words") instanceof List<?> words) || !words.stream().allMatch(w -> w instanceof String)) {
            return null;
        }
        return words.stream().map(String.class::cast).toList();
    }

    /**
     * The {@code keywords} object of a {@code /rerank} request for texts whose stored keywords are {@code words}
     * (parallel to the texts, null where unknown); null when none is known (nothing is sent).
     */
    public Map<String, Object> request(List<List<String>> words) {
        if (words.stream().allMatch(w -> w == null)) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("dictionary_version", dictVersion);
        out.put("top_k", topK);
        out.put("words", new ArrayList<>(words));
        return out;
    }
}
