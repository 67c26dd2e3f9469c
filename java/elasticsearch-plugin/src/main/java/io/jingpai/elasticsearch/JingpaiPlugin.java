/*
 * jingpai inside Elasticsearch: the `jingpai` retriever (JingpaiRetrieverBuilder). It augments its inner retriever's
 * match / multi_match / query_string texts with the uploaded dictionary's keywords, asks the shards for the engine's
 * top hits, and reranks the window on the coordinating node in a rank-feature phase (JingpaiRankBuilder) by a
 * `jingpai serve` reranker, with the gateway's fusion, paging and fail-open rules. Free on the Basic licence: nothing
 * here is x-pack.
 */
package io.jingpai.elasticsearch;

import java.util.Collection;
import java.util.List;
import java.util.function.Function;

import org.elasticsearch.common.io.stream.NamedWriteableRegistry;
import org.elasticsearch.common.settings.Setting;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.SearchPlugin;
import org.elasticsearch.search.rank.RankBuilder;
import org.elasticsearch.threadpool.ThreadPool;

/** Registers the retriever, its rank builder (sent to the shards inside each search) and ext.jingpai. */
public class JingpaiPlugin extends Plugin implements SearchPlugin {
    /** the hosts a retriever's reranker_url may name (elasticsearch.yml; "*": any) */
    public static final Setting<List<String>> ALLOWED_HOSTS = Setting.listSetting("jingpai.reranker.allowed_hosts",
        List.of("127.0.0.1", "localhost", "::1"), Function.identity(), Setting.Property.NodeScope);

    /** the node's thread pool: the rerank's answer is handed back to a search thread, with the search's context */
    static volatile ThreadPool threadPool;
    static volatile List<String> allowedHosts = List.of("127.0.0.1", "localhost", "::1");

    @Override
    public List<Setting<?>> getSettings() {
        return List.of(ALLOWED_HOSTS);
    }

    @Override
    public Collection<?> createComponents(PluginServices services) {
        threadPool = services.threadPool();
        allowedHosts = ALLOWED_HOSTS.get(services.environment().settings());
        return List.of();
    }

    @Override
    public List<RetrieverSpec<?>> getRetrievers() {
        return List.of(new RetrieverSpec<>(JingpaiRetrieverBuilder.NAME, JingpaiRetrieverBuilder::fromXContent));
    }

    @Override
    public List<SearchExtSpec<?>> getSearchExts() {
        return List.of(new SearchExtSpec<>(JingpaiSearchExt.NAME, JingpaiSearchExt::new, JingpaiSearchExt::parse));
    }

    @Override
    public List<NamedWriteableRegistry.Entry> getNamedWriteables() {
        return List.of(new NamedWriteableRegistry.Entry(RankBuilder.class, JingpaiRankBuilder.NAME, JingpaiRankBuilder::new));
    }
}
