/*
 * jingpai: the dictionaries retrievers augment with, as `jingpai plugin retriever` uploads them: one document
 * {"version": …, "dictionary": {"base_total", "base", "weights", "userdict"}} (the OpenSearch pipeline's inline form) in
 * an index of the cluster. A node reads a version once, on the first search that names it, and keeps it.
 */
package io.jingpai.elasticsearch;

import java.util.LinkedHashMap;
import java.util.Map;

import io.jingpai.core.KeywordDictionary;
import io.jingpai.core.QueryRewriter;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.elasticsearch.action.ActionListener;
import org.elasticsearch.action.get.GetRequest;
import org.elasticsearch.client.internal.Client;

/** The node's loaded dictionaries, by index/id@version. */
final class Dictionaries {
    private static final Logger LOGGER = LogManager.getLogger(Dictionaries.class);
    /** a few versions at most (each holds a base dictionary, shared by content): the least recently used goes */
    private static final Map<String, KeywordDictionary> LOADED = new LinkedHashMap<>(8, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, KeywordDictionary> eldest) {
            return size() > 8;
        }
    };

    private Dictionaries() {}

    /** The rewriter of {@code keywords} if its dictionary is loaded on this node, else null. */
    static QueryRewriter cached(RetrieverSettings.Keywords keywords) {
        KeywordDictionary d;
        synchronized (LOADED) {
            d = LOADED.get(keywords.key());
        }
        return d == null ? null : rewriter(keywords, d);
    }

    static QueryRewriter rewriter(RetrieverSettings.Keywords keywords, KeywordDictionary d) {
        return new QueryRewriter(keywords.meta(), d.segmenter(), d.weights().isEmpty() ? null : d.weights(), keywords.topK(),
            keywords.segBoost(), keywords.keywordBoost(), keywords.weightBoost());
    }

    /** Reads the dictionary document of {@code keywords} with {@code client}; the listener learns when it is loaded (or why not). */
    @SuppressWarnings("unchecked")
    static void load(Client client, RetrieverSettings.Keywords keywords, ActionListener<Object> listener) {
        client.get(new GetRequest(keywords.index(), keywords.id()), ActionListener.wrap(resp -> {
            if (!resp.isExists()) {
                throw new IllegalArgumentException("[jingpai] retriever: the dictionary document " + keywords.index() + "/" + keywords.id()
                    + " does not exist; upload it with `jingpai plugin retriever --index … --dict …`");
            }
            Map<String, Object> source = resp.getSourceAsMap();
            Object version = source.get("version");
            if (!keywords.version().equals(version)) {
                throw new IllegalArgumentException("[jingpai] retriever: the dictionary document " + keywords.index() + "/" + keywords.id()
                    + " holds version " + version + ", the retriever names " + keywords.version()
                    + "; run `jingpai plugin retriever` again for the retriever of the uploaded dictionary");
            }
            if (!(source.get("dictionary") instanceof Map<?, ?> inline)) {
                throw new IllegalArgumentException("[jingpai] retriever: the dictionary document " + keywords.index() + "/" + keywords.id()
                    + " has no dictionary object");
            }
            KeywordDictionary d = KeywordDictionary.inline((Map<String, Object>) inline);
            synchronized (LOADED) {
                LOADED.put(keywords.key(), d);
            }
            LOGGER.info("jingpai: loaded dictionary {} ({} keyword weights)", keywords.key(), d.weights().size());
            listener.onResponse(null);
        }, listener::onFailure));
    }
}
