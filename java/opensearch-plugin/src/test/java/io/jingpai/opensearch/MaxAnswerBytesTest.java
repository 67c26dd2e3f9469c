package io.jingpai.opensearch;

import io.jingpai.core.Answers;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** A pipeline's max_answer_bytes (the answers' rules themselves: jingpai-core's RerankAnswersTest). */
class MaxAnswerBytesTest {
    @Test
    void theDefaultBoundIsTheGatewaysAndAPipelineMaySetIt() {
        Map<String, Object> config = new HashMap<>(Map.of("reranker_url", "http://127.0.0.1:1", "fields", List.of("title")));
        assertEquals(Answers.DEFAULT_MAX_BYTES, RerankSettings.read("t", new HashMap<>(config), List.of("127.0.0.1")).maxAnswerBytes());
        config.put("max_answer_bytes", 4096);
        assertEquals(4096, RerankSettings.read("t", config, List.of("127.0.0.1")).maxAnswerBytes());
    }
}
