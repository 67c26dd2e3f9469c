package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** stored_keywords.json: the digests and the stored keywords sent are the gateway's. */
class StoredKeywordsTest {
    @Test
    @SuppressWarnings("unchecked")
    void storedKeywordVectors() throws Exception {
        Map<String, Object> vectors = Vectors.read("stored_keywords.json");
        List<?> digests = (List<?>) vectors.get("digests");
        assertTrue(digests.size() >= 5, "expected the digest vectors");
        for (Object d : digests) {
            Map<?, ?> v = (Map<?, ?>) d;
            assertEquals(v.get("digest"), StoredKeywords.digest((String) v.get("text")), String.valueOf(v.get("text")));
        }
        List<?> cases = (List<?>) vectors.get("cases");
        assertTrue(cases.size() >= 8, "expected the stored keyword cases");
        for (Object c : cases) {
            Map<String, Object> v = (Map<String, Object>) c;
            List<String> words = StoredKeywords.of((Map<String, Object>) v.get("source"), (String) v.get("field"), (String) v.get("text"));
            assertEquals(v.get("words"), words, (String) v.get("name"));
        }
    }

    @Test
    void aRequestCarriesTheWordsOnlyWhenOneIsKnown() {
        StoredKeywords stored = new StoredKeywords("jingpai.rk", "ab92f406a575", 20);
        assertNull(stored.request(Arrays.asList(null, null)));
        Map<String, Object> body = stored.request(Arrays.asList(List.of("GDP"), null));
        assertEquals(List.of("dictionary_version", "top_k", "words"), List.copyOf(body.keySet()));
        assertEquals(Arrays.asList(List.of("GDP"), null), body.get("words"));
        assertEquals("{\"dictionary_version\":\"ab92f406a575\",\"top_k\":20,\"words\":[[\"GDP\"],null]}", Json.write(body));
    }
}
