package io.jingpai.elasticsearch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import io.jingpai.core.Answers;
import io.jingpai.core.CircuitBreaker;
import io.jingpai.core.RerankSlots;
import org.junit.jupiter.api.Test;

/** A retriever's settings: the processors' names and the gateway's defaults, each wrong one named with what was expected. */
class RetrieverSettingsTest {
    static final List<String> LOOPBACK = List.of("127.0.0.1", "localhost", "::1");

    static Map<String, Object> body(Object... kv) {
        Map<String, Object> out = new HashMap<>(Map.of("reranker_url", "http://127.0.0.1:8081", "fields", List.of("title", "content")));
        for (int i = 0; i < kv.length; i += 2) {
            out.put((String) kv[i], kv[i + 1]);
        }
        return out;
    }

    @Test
    void theDefaultsAreTheGateways() {
        RetrieverSettings s = RetrieverSettings.read(body(), LOOPBACK);
        assertEquals("rerank", s.mode());
        assertEquals(20, s.window());
        assertEquals(500, s.maxWindow());
        assertEquals(512, s.docChars());
        assertEquals(3000, s.timeoutMs());
        assertEquals("linear", s.fusion().mode);
        assertEquals(0.5, s.fusion().weight);
        assertEquals(60, s.fusion().rrfK);
        assertEquals(CircuitBreaker.DEFAULT_FAILURES, s.breakerFailures());
        assertEquals(RerankSlots.DEFAULT_CONCURRENCY, s.rerankConcurrency());
        assertEquals(Answers.DEFAULT_MAX_BYTES, s.maxAnswerBytes());
        assertNull(s.keywords());
        assertEquals(s, RetrieverSettings.read(new HashMap<>(s.describe()), LOOPBACK), "what it writes back reads the same");
    }

    @Test
    void augmentationAloneNeedsNoReranker() {
        RetrieverSettings s = RetrieverSettings.read(new HashMap<>(Map.of("mode", "augment", "keywords", Map.of("dictionary",
            Map.of("index", "jingpai-dictionaries", "id", "docs", "version", "v1"), "text_fields", List.of("title")))), LOOPBACK);
        assertEquals("augment", s.mode());
        assertEquals("jingpai-dictionaries/docs@v1", s.keywords().key());
        assertEquals(List.of("title"), s.keywords().meta().textFields);
        assertEquals(s, RetrieverSettings.read(new HashMap<>(s.describe()), LOOPBACK));
    }

    @Test
    void eachWrongSettingIsNamed() {
        Map<Map<String, Object>, String> cases = Map.of(
            body("widow", 10), "[jingpai] retriever: widow: unknown setting; valid keys: retriever, mode, reranker_url",
            body("reranker_url", "http://10.1.2.3:8081"), "[jingpai] retriever: reranker_url: host 10.1.2.3 is not in the node setting "
                + "jingpai.reranker.allowed_hosts [127.0.0.1, localhost, ::1]",
            body("rank_window_size", 0), "[jingpai] retriever: rank_window_size: must be an integer >= 1, got 0",
            body("rank_window_size", 600), "[jingpai] retriever: rank_window_size: must be in [1, max_window 500], got 600",
            body("fusion", "sum"), "[jingpai] retriever: fusion: fusion must be one of replace, linear, rrf, got 'sum'",
            body("fusion_weight", 1.5), "[jingpai] retriever: fusion: fusion_weight must be a number in [0, 1] (the engine's weight), got 1.5",
            body("fields", List.of()), "[jingpai] retriever: fields: the document fields sent to the reranker are required",
            body("mode", "fast"), "[jingpai] retriever: mode: expected one of rerank, augment, got 'fast'",
            body("keywords", Map.of("text_fields", List.of("title"))), "[jingpai] retriever: keywords.dictionary: expected");
        cases.forEach((settings, message) -> {
            RetrieverSettings.Invalid e = assertThrows(RetrieverSettings.Invalid.class, () -> RetrieverSettings.read(settings, LOOPBACK));
            assertEquals(message, e.getMessage().substring(0, Math.min(message.length(), e.getMessage().length())), e.getMessage());
        });
        Map<String, Object> noUrl = body();
        noUrl.remove("reranker_url");
        assertThrows(RetrieverSettings.Invalid.class, () -> RetrieverSettings.read(noUrl, LOOPBACK));
        assertEquals("http://10.1.2.3:8081", RetrieverSettings.read(body("reranker_url", "http://10.1.2.3:8081"), List.of("*")).url());
    }
}
