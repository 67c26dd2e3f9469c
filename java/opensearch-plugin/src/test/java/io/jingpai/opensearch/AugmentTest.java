package io.jingpai.opensearch;

import io.jingpai.core.QueryRewriter;
import io.jingpai.core.Segmenter;
import io.jingpai.core.Vectors;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.opensearch.common.settings.Settings;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.index.query.QueryBuilder;
import org.opensearch.search.SearchModule;

/** augment.json: segmentation, keywords and rewritten queries equal the gateway's QueryRewriter. */
class AugmentTest {
    @SuppressWarnings("unchecked")
    static Map<String, Object> dictionaryConfig(Map<String, Object> vectors) {
        Map<String, Object> seg = (Map<String, Object>) vectors.get("segmenter");
        Map<String, Object> dict = (Map<String, Object>) vectors.get("dictionary");
        Map<String, Object> inline = new HashMap<>();
        inline.put("base_total", seg.get("base_total"));
        inline.put("base", seg.get("base"));
        inline.put("weights", dict.get("weights"));
        inline.put("userdict", dict.get("userdict"));
        return inline;
    }

    @SuppressWarnings("unchecked")
    static QueryRewriter rewriter(Map<String, Object> vectors, Map<String, Object> config) throws Exception {
        Map<String, Object> meta = (Map<String, Object>) config.get("meta");
        Map<String, Object> processor = new HashMap<>((Map<String, Object>) config.get("settings"));
        processor.put("text_fields", meta.get("text_fields"));
        processor.put("seg_fields", meta.get("seg_fields"));
        processor.put("keywords_field", meta.get("keywords_field"));
        processor.put("weights_field", meta.get("weights_field"));
        processor.put("weight_encoding", meta.get("weight_encoding"));
        processor.put("dictionary", dictionaryConfig(vectors));
        QueryRewriter rewriter = KeywordsProcessor.rewriter(KeywordsProcessor.TYPE, "t", processor, null);
        assertEquals(Map.of(), processor, "every setting is read");
        return rewriter;
    }

    @Test
    @SuppressWarnings("unchecked")
    void segmentationVectors() throws Exception {
        Map<String, Object> vectors = Vectors.read("augment.json");
        Map<String, Object> seg = (Map<String, Object>) vectors.get("segmenter");
        Map<String, Long> base = new HashMap<>();
        ((Map<String, Object>) seg.get("base")).forEach((w, f) -> base.put(w, ((Number) f).longValue()));
        Segmenter segmenter = new Segmenter(base, ((Number) seg.get("base_total")).longValue());
        for (Object pair : (List<Object>) ((Map<String, Object>) vectors.get("dictionary")).get("userdict")) {
            segmenter.addWord((String) ((List<Object>) pair).get(0), ((Number) ((List<Object>) pair).get(1)).longValue());
        }
        ((Map<String, Object>) seg.get("tokens")).forEach((text, tokens) -> assertEquals(tokens, segmenter.cut(text), text));
    }

    @Test
    @SuppressWarnings("unchecked")
    void augmentationVectors() throws Exception {
        Map<String, Object> vectors = Vectors.read("augment.json");
        NamedXContentRegistry registry = new NamedXContentRegistry(new SearchModule(Settings.EMPTY, List.of()).getNamedXContents());
        int cases = 0;
        for (Object c : (List<Object>) vectors.get("configs")) {
            Map<String, Object> config = (Map<String, Object>) c;
            QueryRewriter rewriter = rewriter(vectors, config);
            for (Object k : (List<Object>) config.get("cases")) {
                Map<String, Object> v = (Map<String, Object>) k;
                String name = config.get("name") + " " + v.get("query");
                QueryRewriter.Result result = rewriter.rewrite(v.get("query"));
                Vectors.assertJson(v.get("expected"), result.query, name);
                assertEquals(((Number) v.get("augmented")).intValue(), result.augmented, name);
                assertEquals(v.get("query_text"), result.queryText(), name);
                List<Object> keywords = new ArrayList<>();
                result.keywords.forEach(e -> keywords.add(List.of(e.getKey(), e.getValue())));
                Vectors.assertJson(v.get("keywords"), keywords, name);
                // the rewritten query is one the engine parses, and a query that went through the engine's own
                // builders (its JSON written in full) is rewritten to the same clauses
                if ("rank_features".equals(((Map<String, Object>) config.get("meta")).get("weight_encoding"))) {
                    cases++;
                    continue; // rank_feature queries come from the mapper-extras module, not in the core registry
                }
                QueryBuilder parsed = KeywordsProcessor.parseQuery(result.query, registry);
                QueryBuilder original = KeywordsProcessor.parseQuery(v.get("query"), registry);
                QueryRewriter.Result viaEngine = rewriter.rewrite(KeywordsProcessor.toMap(original));
                assertEquals(result.augmented, viaEngine.augmented, name + " (through the engine's builders)");
                assertEquals(result.queryText(), viaEngine.queryText(), name + " (through the engine's builders)");
                assertEquals(parsed, KeywordsProcessor.parseQuery(KeywordsProcessor.toMap(parsed), registry), name);
                cases++;
            }
        }
        assertEquals(48, cases);
    }

    @Test
    void queryStringSyntaxIsRemoved() {
        assertEquals("中国 GDP 利率 股票", QueryRewriter.cleanQueryString("title:中国 AND (GDP OR 利率) -股票"));
        assertEquals(true, QueryRewriter.glob("ti*").matcher("title").matches());
    }
}
