package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** fusion.json and paging.json: the Java fusion and window rules give the gateway's results. */
class FusionTest {
    @Test
    void fusionVectors() throws Exception {
        List<?> cases = (List<?>) Vectors.read("fusion.json").get("cases");
        assertTrue(cases.size() >= 50, "expected the full fusion vector set");
        for (Object c : cases) {
            Map<?, ?> v = (Map<?, ?>) c;
            String name = v.get("name") + " " + v.get("fusion");
            double[] fused = Vectors.fusion(v.get("fusion")).fuse(Vectors.nullableDoubles(v.get("engine")), Vectors.doubles(v.get("model")));
            assertArrayEquals(Vectors.doubles(v.get("fused")), fused, Vectors.TOLERANCE, name);
            int[] order = ((List<?>) v.get("order")).stream().mapToInt(o -> ((Number) o).intValue()).toArray();
            double[] ranks = new double[fused.length];
            for (int i = 0; i < ranks.length; i++) {
                ranks[i] = i + 1;
            }
            assertArrayEquals(order, Fusion.fusedOrder(fused, ranks), name);
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void pagingVectors() throws Exception {
        for (Object c : (List<?>) Vectors.read("paging.json").get("cases")) {
            Map<String, Object> v = (Map<String, Object>) c;
            String name = (String) v.get("name");
            List<Map<String, Object>> hits = (List<Map<String, Object>>) v.get("input");
            int window = ((Number) v.get("window")).intValue();
            int docChars = ((Number) v.get("doc_chars")).intValue();
            List<String> texts = new ArrayList<>();
            for (int i = 0; i < Math.min(window, hits.size()); i++) {
                texts.add(Window.docText((Map<String, Object>) hits.get(i).get("_source"), List.of("title", "content"), docChars));
            }
            assertEquals(v.get("texts"), texts, name + ": texts sent to the reranker");
            Double[] engine = hits.stream().map(h -> ((Number) h.get("_score")).doubleValue()).toArray(Double[]::new);
            double[] fused = new double[Math.min(window, hits.size())];
            List<Window.Placed> page = Window.page(engine, Vectors.doubles(v.get("model_scores")), window, ((Number) v.get("from")).intValue(),
                ((Number) v.get("size")).intValue(), Vectors.fusion(v.get("fusion")), fused);
            List<Object> actual = new ArrayList<>();
            for (Window.Placed p : page) {
                Map<String, Object> hit = new LinkedHashMap<>();
                hit.put("_id", hits.get(p.input()).get("_id"));
                hit.put("_score", p.score());
                if (p.reranked()) {
                    Map<String, Object> info = new LinkedHashMap<>();
                    info.put("engine_score", engine[p.input()]);
                    info.put("engine_rank", p.engineRank());
                    info.put("model_score", p.modelScore());
                    hit.put("_jingpai", info);
                }
                actual.add(hit);
            }
            Vectors.assertJson(v.get("page"), actual, name);
            assertEquals(((Number) v.get("max_score")).doubleValue(), java.util.Arrays.stream(fused).max().getAsDouble(), Vectors.TOLERANCE);
        }
    }

    @Test
    void invalidFusionIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> new Fusion("sum", 0.5, 60));
        assertThrows(IllegalArgumentException.class, () -> new Fusion("linear", 1.5, 60));
        assertThrows(IllegalArgumentException.class, () -> new Fusion("rrf", 0.5, 0));
    }
}
