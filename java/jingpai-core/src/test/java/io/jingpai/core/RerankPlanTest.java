package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * overrides.json: a search's ext.jingpai is read (Overrides) and planned (RerankPlan) as the gateway reads and plans it:
 * the mode, the reason, the window, the fusion, the query text, the fields and the hits asked of the engine. What is
 * engine-specific (the _source filter of OpenSearch's pipeline) is checked in the plugin's own OverridesTest.
 */
class RerankPlanTest {
    @Test
    @SuppressWarnings("unchecked")
    void overrideVectors() throws Exception {
        Map<String, Object> vectors = Vectors.read("overrides.json");
        Map<String, Object> s = (Map<String, Object>) vectors.get("settings");
        int window = ((Number) s.get("window")).intValue();
        int maxWindow = ((Number) s.get("max_window")).intValue();
        List<String> fields = (List<String>) s.get("fields");
        Fusion fusion = Vectors.fusion(s.get("fusion"));
        List<?> cases = (List<?>) vectors.get("cases");
        assertTrue(cases.size() >= 30, "expected the full override vector set");
        for (Object c : cases) {
            Map<String, Object> v = (Map<String, Object>) c;
            String name = (String) v.get("name");
            Map<String, Object> body = (Map<String, Object>) v.get("body");
            Map<String, Object> ext = body.containsKey("ext") ? (Map<String, Object>) ((Map<String, Object>) body.get("ext")).get("jingpai") : null;
            int from = ((Number) v.get("from")).intValue();
            int size = ((Number) v.get("size")).intValue();
            String shape = (String) v.get("shape_reason");
            String text = (String) v.get("query_text");
            if (v.containsKey("error")) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> RerankPlan.plan(window, maxWindow, fields, fusion, Overrides.parse(ext), shape, from, size, text, "the gateway's"), name);
                if (e instanceof Overrides.Invalid invalid) {
                    assertEquals(v.get("error_field"), invalid.field, name + ": " + e.getMessage());
                    assertTrue(e.getMessage().startsWith("invalid ext.jingpai: " + invalid.field + ": "), e.getMessage());
                    assertTrue(e.getMessage().contains("; valid keys: " + String.join(", ", Overrides.KEYS)), e.getMessage());
                } else {
                    assertEquals("window", v.get("error_field"), name);
                    assertEquals(v.get("error"), e.getMessage(), name);
                }
                continue;
            }
            RerankPlan plan = RerankPlan.plan(window, maxWindow, fields, fusion, ext == null ? Overrides.NONE : Overrides.parse(ext), shape, from,
                size, text, "the gateway's");
            Map<String, Object> expected = (Map<String, Object>) v.get("plan");
            assertEquals(expected.get("mode"), plan.mode(), name);
            assertEquals(expected.get("reason"), plan.reason(), name);
            assertEquals(((Number) expected.get("window")).intValue(), plan.window(), name);
            Vectors.assertJson(expected.get("fusion"), plan.fusion().describe(), name + ".fusion");
            if (plan.reason() == null) {
                assertEquals(expected.get("query_text"), plan.queryText(), name);
                if (!body.containsKey("_source")) { // a _source filter's excludes narrow them: the pipeline's SourceFold
                    assertEquals(expected.get("fields"), plan.fields(), name);
                }
                assertEquals(0, ((Number) expected.get("engine_from")).intValue(), name);
                assertEquals(((Number) expected.get("engine_size")).intValue(), plan.engineSize(), name);
            }
        }
    }
}
