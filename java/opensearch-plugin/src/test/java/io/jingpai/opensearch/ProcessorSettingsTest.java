package io.jingpai.opensearch;

import io.jingpai.core.RerankSlots;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.opensearch.OpenSearchParseException;

/** jingpai_rerank's breaker settings (the breaker itself: jingpai-core's CircuitBreakerTest). */
class ProcessorSettingsTest {
    @Test
    void processorSettings() {
        RerankSettings defaults = read(Map.of());
        assertEquals(3, defaults.breakerFailures());
        assertEquals(10.0, defaults.breakerResetS());
        RerankSettings given = read(Map.of("breaker_failures", 5, "breaker_reset_s", 2.5));
        assertEquals(5, given.breakerFailures());
        assertEquals(2.5, given.breakerResetS());
        assertEquals(7, read(Map.of("breaker_failures", "7")).breakerFailures());
        for (Object bad : List.of(0, -1, 2.5, "many")) {
            OpenSearchParseException e = assertThrows(OpenSearchParseException.class, () -> read(Map.of("breaker_failures", bad)));
            assertTrue(e.getMessage().contains("[breaker_failures]") && e.getMessage().contains("integer >= 1"), e.getMessage());
        }
        for (Object bad : List.of(0, -3, "soon")) {
            OpenSearchParseException e = assertThrows(OpenSearchParseException.class, () -> read(Map.of("breaker_reset_s", bad)));
            assertTrue(e.getMessage().contains("[breaker_reset_s]") && e.getMessage().contains("> 0"), e.getMessage());
        }
    }

    private static RerankSettings read(Map<String, Object> extra) {
        Map<String, Object> config = new HashMap<>(Map.of("reranker_url", "http://127.0.0.1:1", "fields", List.of("title")));
        config.putAll(extra);
        return RerankSettings.read("t", config, List.of("127.0.0.1"));
    }


    @Test
    void rerankConcurrencyIsReadFromThePipeline() {
        Map<String, Object> config = new HashMap<>(Map.of("reranker_url", "http://127.0.0.1:1", "fields", List.of("title")));
        assertEquals(RerankSlots.DEFAULT_CONCURRENCY, RerankSettings.read("t", new HashMap<>(config), List.of("127.0.0.1"))
            .rerankConcurrency());
        config.put("rerank_concurrency", 2);
        assertEquals(2, RerankSettings.read("t", new HashMap<>(config), List.of("127.0.0.1")).rerankConcurrency());
        for (Object bad : List.of(0, 1.5, "many")) {
            config.put("rerank_concurrency", bad);
            OpenSearchParseException e = assertThrows(OpenSearchParseException.class,
                () -> RerankSettings.read("t", new HashMap<>(config), List.of("127.0.0.1")));
            assertTrue(e.getMessage().contains("rerank_concurrency") && e.getMessage().contains("integer >= 1"), e.getMessage());
        }
    }

    @Test
    void rerankKeywordsAreReadFromThePipeline() {
        assertEquals(null, read(Map.of()).rerankKeywords());
        RerankSettings given = read(Map.of("rerank_keywords", Map.of("field", "jingpai.rk", "dict_version", "ab92f406a575", "top_k", 20)));
        assertEquals(new io.jingpai.core.StoredKeywords("jingpai.rk", "ab92f406a575", 20), given.rerankKeywords());
        assertEquals("jingpai.rk", read(Map.of("rerank_keywords", Map.of("dict_version", "v1"))).rerankKeywords().field());
        for (Object bad : List.of("jingpai.rk", Map.of("field", "jingpai.rk"), Map.of("dict_version", "v1", "top_k", 0),
                                  Map.of("dict_version", "v1", "fields", "x"))) {
            OpenSearchParseException e = assertThrows(OpenSearchParseException.class, () -> read(Map.of("rerank_keywords", bad)));
            assertTrue(e.getMessage().contains("rerank_keywords"), e.getMessage());
        }
    }
}
