package io.jingpai.opensearch;

import java.util.List;
import java.util.Map;
import java.util.function.Function;

import org.opensearch.common.settings.Setting;
import org.opensearch.plugins.Plugin;
import org.opensearch.plugins.SearchPipelinePlugin;
import org.opensearch.plugins.SearchPlugin;
import org.opensearch.search.pipeline.Processor;
import org.opensearch.search.pipeline.SearchRequestProcessor;
import org.opensearch.search.pipeline.SearchResponseProcessor;

/** jingpai's search-pipeline processors: jingpai_keywords (request) and jingpai_rerank (request + response). */
public class JingpaiPlugin extends Plugin implements SearchPipelinePlugin, SearchPlugin {
    /** the hosts a pipeline's reranker_url may name (opensearch.yml; "*": any) */
    public static final Setting<List<String>> ALLOWED_HOSTS = Setting.listSetting("jingpai.reranker.allowed_hosts",
        List.of("127.0.0.1", "localhost", "::1"), Function.identity(), Setting.Property.NodeScope);

    @Override
    public List<Setting<?>> getSettings() {
        return List.of(ALLOWED_HOSTS);
    }

    @Override
    public Map<String, Processor.Factory<SearchRequestProcessor>> getRequestProcessors(Parameters parameters) {
        List<String> hosts = ALLOWED_HOSTS.get(parameters.env.settings());
        return Map.of(KeywordsProcessor.TYPE, new KeywordsProcessor.Factory(parameters.env.configFile(), parameters.namedXContentRegistry),
            RerankProcessor.TYPE, new RerankProcessor.RequestFactory(hosts));
    }

    @Override
    public Map<String, Processor.Factory<SearchResponseProcessor>> getResponseProcessors(Parameters parameters) {
        return Map.of(RerankProcessor.TYPE, new RerankProcessor.ResponseFactory(ALLOWED_HOSTS.get(parameters.env.settings())));
    }

    @Override
    public List<SearchExtSpec<?>> getSearchExts() {
        return List.of(new SearchExtSpec<>(JingpaiExt.NAME, JingpaiExt::new, JingpaiExt::parse));
    }
}
