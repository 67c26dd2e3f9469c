package io.jingpai.opensearch;

import io.jingpai.core.Answers;
import io.jingpai.core.CircuitBreaker;
import io.jingpai.core.Fusion;
import io.jingpai.core.RerankSlots;
import io.jingpai.core.Overrides;
import io.jingpai.core.Vectors;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.junit.jupiter.api.Test;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.common.bytes.BytesArray;
import org.opensearch.core.common.bytes.BytesReference;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.search.SearchHit;
import org.opensearch.search.fetch.subphase.FetchSourceContext;

/** overrides.json: a search's ext.jingpai is read and planned as the gateway reads and plans it. */
class OverridesTest {
    @SuppressWarnings("unchecked")
    static RerankSettings settings(Map<String, Object> s) {
        return new RerankSettings("http://127.0.0.1:8081", ((Number) s.get("window")).intValue(),
            ((Number) s.get("max_window")).intValue(), (List<String>) s.get("fields"), 512, 3000, Vectors.fusion(s.get("fusion")),
            CircuitBreaker.DEFAULT_FAILURES, CircuitBreaker.DEFAULT_RESET_S, RerankSlots.DEFAULT_CONCURRENCY,
            Answers.DEFAULT_MAX_BYTES, null);
    }

    @Test
    @SuppressWarnings("unchecked")
    void overrideVectors() throws Exception {
        Map<String, Object> vectors = Vectors.read("overrides.json");
        RerankSettings settings = settings((Map<String, Object>) vectors.get("settings"));
        List<?> cases = (List<?>) vectors.get("cases");
        assertTrue(cases.size() >= 30, "expected the full override vector set");
        for (Object c : cases) {
            Map<String, Object> v = (Map<String, Object>) c;
            String name = (String) v.get("name");
            Map<String, Object> body = (Map<String, Object>) v.get("body");
            Map<String, Object> ext = body.containsKey("ext") ? (Map<String, Object>) ((Map<String, Object>) body.get("ext")).get("jingpai") : null;
            int from = ((Number) v.get("from")).intValue();
            int size = ((Number) v.get("size")).intValue();
            Map<String, Object> augment = Map.of();
            if (v.containsKey("error")) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> RerankProcessor.plan(settings,
                    Overrides.parse(ext), (String) v.get("shape_reason"), from, size, (String) v.get("query_text"), augment), name);
                if (e instanceof Overrides.Invalid invalid) {
                    assertEquals(v.get("error_field"), invalid.field, name + ": " + e.getMessage());
                    assertTrue(e.getMessage().startsWith("invalid ext.jingpai: " + invalid.field + ": "), e.getMessage());
                    assertTrue(e.getMessage().contains("; valid keys: " + String.join(", ", Overrides.KEYS)), e.getMessage());
                } else {
                    assertEquals("window", v.get("error_field"), name);
                    assertTrue(e.getMessage().contains("max_window"), e.getMessage());
                }
                continue;
            }
            RerankProcessor.Plan plan = RerankProcessor.plan(settings, ext == null ? Overrides.NONE : Overrides.parse(ext),
                (String) v.get("shape_reason"), from, size, (String) v.get("query_text"), augment);
            Map<String, Object> expected = (Map<String, Object>) v.get("plan");
            assertEquals(expected.get("mode"), plan.mode(), name);
            assertEquals(expected.get("reason"), plan.reason(), name);
            assertEquals(((Number) expected.get("window")).intValue(), plan.window(), name);
            Vectors.assertJson(expected.get("fusion"), plan.fusion().describe(), name + ".fusion");
            if (plan.reason() == null) {
                plan = plan.folded(fetch(body.get("_source")));
                Map<String, Object> source = (Map<String, Object>) expected.get("source");
                assertEquals(source.get("added"), plan.source().added(), name);
                assertEquals(source.get("drop"), plan.source().drop(), name);
                Object sent = source.get("engine_source");
                if (Objects.equals(sent, body.get("_source"))) {
                    assertNull(plan.source().fetch(), name + ": the search's own filter is sent");
                } else {
                    Map<String, Object> filter = sent instanceof List<?> l ? Map.of("includes", l) : (Map<String, Object>) sent;
                    assertEquals(filter.getOrDefault("includes", List.of()), List.of(plan.source().fetch().includes()), name);
                    assertEquals(filter.getOrDefault("excludes", List.of()), List.of(plan.source().fetch().excludes()), name);
                }
                assertEquals(expected.get("query_text"), plan.queryText(), name);
                assertEquals(expected.get("fields"), plan.fields(), name);
                assertEquals(0, ((Number) expected.get("engine_from")).intValue(), name);
                assertEquals(((Number) expected.get("engine_size")).intValue(), plan.engineSize(), name);
            } else {
                // not reranked: the request goes to the engine with the client's from/size
                assertEquals(body.get("from"), expected.get("engine_from"), name);
                assertEquals(body.get("size"), expected.get("engine_size"), name);
            }
        }
    }

    /** The search's _source as OpenSearch parses it ({@code null}: none given). */
    static FetchSourceContext fetch(Object source) throws Exception {
        if (source == null) {
            return null;
        }
        try (XContentBuilder b = JsonXContent.contentBuilder()) {
            b.value(source);
            try (XContentParser parser = JsonXContent.jsonXContent.createParser(NamedXContentRegistry.EMPTY,
                DeprecationHandler.THROW_UNSUPPORTED_OPERATION, BytesReference.bytes(b).streamInput())) {
                parser.nextToken();
                return FetchSourceContext.fromXContent(parser);
            }
        }
    }

    @Test
    void unfoldTakesOutWhatFoldingAdded() throws Exception {
        SourceFold fold = SourceFold.fold(fetch(List.of("id")), List.of("title", "meta.summary"));
        assertEquals(List.of("title", "meta.summary"), fold.added());
        SearchHit hit = new SearchHit(1, "d1", Map.of(), Map.of());
        hit.sourceRef(new BytesArray("{\"id\":\"d1\",\"title\":\"t\",\"meta\":{\"summary\":\"s\",\"lang\":\"zh\"}}"));
        fold.unfold(hit);
        assertEquals(Map.of("id", "d1", "meta", Map.of("lang", "zh")), hit.getSourceAsMap());
        SourceFold drop = SourceFold.fold(fetch(false), List.of("title"));
        drop.unfold(hit);
        assertFalse(hit.hasSource());
        assertTrue(SourceFold.matches("title", "t*e") && SourceFold.matches("title", "tit?e") && !SourceFold.matches("title", "t.tle"));
    }

    @Test
    void theFusionOverridesKeepWhatTheyDoNotName() {
        Fusion base = new Fusion("rrf", 0.3, 10);
        Map<String, Object> ext = new LinkedHashMap<>();
        ext.put("fusion_weight", 0.9);
        Fusion over = Overrides.parse(ext).over(base);
        assertEquals(List.of("rrf", 0.9, 10), List.of(over.mode, over.weight, over.rrfK));
        assertTrue(Overrides.NONE.over(base) == base);
        assertNull(Overrides.parse(Map.of()).mode());
    }

    @Test
    void messagesNameTheFieldTheValueAndTheValidKeys() {
        Overrides.Invalid e = assertThrows(Overrides.Invalid.class, () -> Overrides.parse(Map.of("mode", "fast")));
        assertEquals("invalid ext.jingpai: mode: expected one of off, augment, rerank (got 'fast'); valid keys: fusion, fusion_weight, "
            + "rrf_k, mode, window, fields, model, query, hybrid", e.getMessage());
        e = assertThrows(Overrides.Invalid.class, () -> Overrides.parse(Map.of("hybrid", Map.of("kk", 5))));
        assertTrue(e.getMessage().endsWith("; hybrid takes: enabled, fusion, weight, k, num_candidates, rrf_k, rerank_window"), e.getMessage());
    }
}
