/*
 * jingpai: request processor jingpai_keywords, the gateway's augmentation inside OpenSearch.
 */
package io.jingpai.opensearch;

import io.jingpai.core.QueryRewriter;
import io.jingpai.core.Segmenter;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.opensearch.action.search.SearchRequest;
import org.opensearch.common.xcontent.XContentHelper;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.common.bytes.BytesReference;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.ToXContent;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.query.AbstractQueryBuilder;
import org.opensearch.index.query.QueryBuilder;
import org.opensearch.ingest.ConfigurationUtils;
import org.opensearch.search.pipeline.AbstractProcessor;
import org.opensearch.search.pipeline.PipelineProcessingContext;
import org.opensearch.search.pipeline.Processor;
import org.opensearch.search.pipeline.SearchRequestProcessor;

/** Widens match / multi_match / query_string clauses with the dictionary's keywords, exactly as the gateway does. */
public final class KeywordsProcessor extends AbstractProcessor implements SearchRequestProcessor {
    public static final String TYPE = "jingpai_keywords";
    static final String ATTR_REWRITE = "jingpai.rewrite";

    private final QueryRewriter rewriter;
    private final NamedXContentRegistry registry;

    KeywordsProcessor(String tag, String description, boolean ignoreFailure, QueryRewriter rewriter, NamedXContentRegistry registry) {
        super(tag, description, ignoreFailure);
        this.rewriter = rewriter;
        this.registry = registry;
    }

    @Override
    public String getType() {
        return TYPE;
    }

    @Override
    public SearchRequest processRequest(SearchRequest request) throws Exception {
        return processRequest(request, new PipelineProcessingContext());
    }

    @Override
    public SearchRequest processRequest(SearchRequest request, PipelineProcessingContext context) throws Exception {
        // ext.jingpai.mode "off": the search goes to the engine as the client wrote it (the gateway's ?jingpai=off)
        if ("off".equals(JingpaiExt.overrides(request, context).mode()) || request.source() == null || request.source().query() == null) {
            return request;
        }
        QueryRewriter.Result result = rewriter.rewrite(toMap(request.source().query()));
        context.setAttribute(ATTR_REWRITE, result);
        if (result.augmented > 0) {
            request.source().query(parseQuery(result.query, registry));
        }
        return request;
    }

    /** The query's JSON form, e.g. {@code {"match": {"title": {"query": …, "operator": "OR", …}}}}. */
    static Object toMap(QueryBuilder query) throws IOException {
        try (XContentBuilder b = JsonXContent.contentBuilder()) {
            query.toXContent(b, ToXContent.EMPTY_PARAMS);
            return XContentHelper.convertToMap(BytesReference.bytes(b), true, b.contentType()).v2();
        }
    }

    static QueryBuilder parseQuery(Object query, NamedXContentRegistry registry) throws IOException {
        try (XContentBuilder b = JsonXContent.contentBuilder()) {
            b.value(query);
            try (XContentParser parser = JsonXContent.jsonXContent.createParser(registry, DeprecationHandler.THROW_UNSUPPORTED_OPERATION,
                BytesReference.bytes(b).streamInput())) {
                return AbstractQueryBuilder.parseInnerQueryBuilder(parser);
            }
        }
    }

    /** Builds the processor from a pipeline's config. */
    public static final class Factory implements Processor.Factory<SearchRequestProcessor> {
        private final Path configDir;
        private final NamedXContentRegistry registry;

        public Factory(Path configDir, NamedXContentRegistry registry) {
            this.configDir = configDir;
            this.registry = registry;
        }

        @Override
        public KeywordsProcessor create(Map<String, Processor.Factory<SearchRequestProcessor>> factories, String tag, String description,
                                        boolean ignoreFailure, Map<String, Object> config, Processor.PipelineContext pipelineContext) throws Exception {
            return new KeywordsProcessor(tag, description, ignoreFailure, rewriter(TYPE, tag, config, configDir), registry);
        }
    }

    /**
     * The rewriter a config describes: {@code text_fields}, {@code seg_fields}, {@code keywords_field}, {@code weights_field},
     * {@code weight_encoding}, {@code keywords_top_k}, {@code seg_boost}, {@code keyword_boost}, {@code weight_boost}, and the
     * dictionary: {@code dictionary} (inline: {@code base_total}, {@code base}, {@code weights}, {@code userdict}) or
     * {@code dictionary_dir} (a folder under the node's {@code config/jingpai/} holding {@code jieba_dict.txt},
     * {@code dictionary.tsv} and {@code userdict.txt}, as {@code jingpai dict build} and jieba write them).
     */
    @SuppressWarnings("unchecked")
    static QueryRewriter rewriter(String type, String tag, Map<String, Object> config, Path configDir) throws IOException {
        List<String> textFields = ConfigurationUtils.readList(type, tag, config, "text_fields");
        Map<String, String> segFields = ConfigurationUtils.readOptionalMap(type, tag, config, "seg_fields");
        QueryRewriter.Meta meta = new QueryRewriter.Meta(textFields, segFields,
            ConfigurationUtils.readOptionalStringProperty(type, tag, config, "keywords_field"),
            ConfigurationUtils.readOptionalStringProperty(type, tag, config, "weights_field"),
            ConfigurationUtils.readOptionalStringProperty(type, tag, config, "weight_encoding"));
        int topK = number(config.remove("keywords_top_k"), 10).intValue();
        double seg = number(config.remove("seg_boost"), QueryRewriter.SEG_BOOST).doubleValue();
        double kw = number(config.remove("keyword_boost"), QueryRewriter.KEYWORD_BOOST).doubleValue();
        double wb = number(config.remove("weight_boost"), QueryRewriter.WEIGHT_BOOST).doubleValue();
        Map<String, Object> inline = ConfigurationUtils.readOptionalMap(type, tag, config, "dictionary");
        String dir = ConfigurationUtils.readOptionalStringProperty(type, tag, config, "dictionary_dir");
        Segmenter segmenter;
        Map<String, Double> weights = new HashMap<>();
        if (inline != null) {
            // the base dictionary is shared by every processor with the same one (Segmenter.shared): not copied per pipeline
            Map<String, Number> base = (Map<String, Number>) inline.getOrDefault("base", Map.of());
            segmenter = new Segmenter(Segmenter.shared(base, number(inline.get("base_total"), 0).longValue()));
            ((Map<String, Object>) inline.getOrDefault("weights", Map.of())).forEach((w, s) -> weights.put(w, ((Number) s).doubleValue()));
            for (Object entry : (List<Object>) inline.getOrDefault("userdict", List.of())) {
                List<Object> pair = (List<Object>) entry;
                segmenter.addWord((String) pair.get(0), ((Number) pair.get(1)).longValue());
            }
        } else if (dir != null) {
            Path root = configDir.resolve("jingpai").normalize();
            Path folder = root.resolve(dir).normalize();
            if (!folder.startsWith(root)) {
                throw ConfigurationUtils.newConfigurationException(type, tag, "dictionary_dir", "must be a folder under config/jingpai");
            }
            try (BufferedReader r = Files.newBufferedReader(folder.resolve("jieba_dict.txt"), StandardCharsets.UTF_8)) {
                segmenter = Segmenter.read(r);
            }
            for (String line : Files.readAllLines(folder.resolve("dictionary.tsv"), StandardCharsets.UTF_8).stream().skip(1).toList()) {
                String[] parts = line.split("\t");
                if (parts.length == 4) {
                    weights.merge(parts[0], Double.parseDouble(parts[2]), Math::max);
                }
            }
            for (String line : Files.readAllLines(folder.resolve("userdict.txt"), StandardCharsets.UTF_8)) {
                String[] parts = line.split(" ");
                if (parts.length >= 2) {
                    segmenter.addWord(parts[0], Long.parseLong(parts[1]));
                }
            }
        } else {
            throw ConfigurationUtils.newConfigurationException(type, tag, "dictionary", "either [dictionary] or [dictionary_dir] is required");
        }
        return new QueryRewriter(meta, segmenter, weights.isEmpty() ? null : weights, topK, seg, kw, wb);
    }

    static Number number(Object value, Number fallback) {
        if (value == null) {
            return fallback;
        }
        return value instanceof Number n ? n : Double.valueOf(value.toString());
    }

    static List<String> strings(Object value) {
        List<String> out = new ArrayList<>();
        if (value instanceof List<?> l) {
            l.forEach(v -> out.add(String.valueOf(v)));
        } else if (value != null) {
            out.add(String.valueOf(value));
        }
        return out;
    }
}
