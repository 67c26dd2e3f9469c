/*
 * jingpai: the query phase's merge of a reranked search on the coordinating node, which keeps the engine's scores for the
 * rank-feature phase. The rank-feature phase hands its coordinator context only the docs its shards fetched, and a fetch
 * scores its docs only in a search sorted by a field with track_scores — which made both fetches of a reranked search
 * (the rank-feature one and the final one) build the query's weight and score their hits a second time. Here the shards'
 * top docs are merged as a plain search merges them (score, then shard, then doc: Lucene's TopDocs.merge order, the
 * engine's), cut to the search's rank window, and their scores kept by (shard index, doc) for JingpaiCoordinatorContext,
 * so no fetch scores anything.
 */
package io.jingpai.elasticsearch;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.lucene.search.ScoreDoc;
import org.elasticsearch.action.search.SearchPhaseController;
import org.elasticsearch.search.query.QuerySearchResult;
import org.elasticsearch.search.rank.context.QueryPhaseRankCoordinatorContext;
import org.elasticsearch.search.rank.feature.RankFeatureDoc;

/** One search's engine window: its docs in the engine's order and their query-phase scores. */
final class EngineWindow extends QueryPhaseRankCoordinatorContext {
    /** set once by the query phase's reduce, read by the rank-feature phase's coordinator context after its shard round */
    private volatile Map<Long, Float> scores;

    EngineWindow(int rankWindowSize) {
        super(rankWindowSize);
    }

    /**
     * The shards' top docs (not consumed by the reduce: a rank builder with a query-phase coordinator context keeps them
     * on the results), merged in the engine's order and cut to the window. The reduce's totals and max score are counted
     * from the same results before this, as in a plain search.
     */
    @Override
    public ScoreDoc[] rankQueryPhaseResults(List<QuerySearchResult> results, SearchPhaseController.TopDocsStats topDocsStats) {
        List<RankFeatureDoc> all = new ArrayList<>();
        for (QuerySearchResult result : results) {
            if (result.hasConsumedTopDocs() || result.topDocs() == null) {
                continue;
            }
            for (ScoreDoc doc : result.topDocs().topDocs.scoreDocs) {
                all.add(new RankFeatureDoc(doc.doc, doc.score, result.getShardIndex()));
            }
        }
        all.sort(JingpaiCoordinatorContext.ENGINE_ORDER);
        RankFeatureDoc[] top = all.subList(0, Math.min(rankWindowSize, all.size())).toArray(RankFeatureDoc[]::new);
        Map<Long, Float> kept = new HashMap<>(top.length * 2);
        for (RankFeatureDoc doc : top) {
            kept.put(key(doc.shardIndex, doc.doc), doc.score);
        }
        scores = kept;
        return top;
    }

    /** The query phase's score of {@code doc} on shard {@code shardIndex}; NaN when the window does not hold it. */
    float score(int shardIndex, int doc) {
        Map<Long, Float> kept = scores;
        Float score = kept == null ? null : kept.get(key(shardIndex, doc));
        return score == null ? Float.NaN : score;
    }

    private static long key(int shardIndex, int doc) {
        return ((long) shardIndex << 32) | (doc & 0xffffffffL);
    }
}
