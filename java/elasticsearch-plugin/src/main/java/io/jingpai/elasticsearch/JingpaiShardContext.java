/*
 * jingpai: on each shard, the rerank fields of the hits the coordinator will rerank, joined as the gateway joins them
 * (Window.docText: fields by newlines, a list's values by spaces, cut to doc_chars). The fetch does not score its hits
 * (their score is NaN here): the coordinator takes the engine scores from the query phase (EngineWindow).
 */
package io.jingpai.elasticsearch;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import io.jingpai.core.Window;
import org.elasticsearch.common.document.DocumentField;
import org.elasticsearch.search.SearchHit;
import org.elasticsearch.search.SearchHits;
import org.elasticsearch.search.rank.RankShardResult;
import org.elasticsearch.search.rank.context.RankFeaturePhaseRankShardContext;
import org.elasticsearch.search.rank.feature.RankFeatureDoc;
import org.elasticsearch.search.rank.feature.RankFeatureShardResult;

/** One field is fetched by name; several by "*" (the phase fetches one field pattern), of which the named ones are read. */
final class JingpaiShardContext extends RankFeaturePhaseRankShardContext {
    private final List<String> fields;
    private final int docChars;

    JingpaiShardContext(List<String> fields, int docChars) {
        super(fields.size() == 1 ? fields.get(0) : "*");
        this.fields = fields;
        this.docChars = docChars;
    }

    @Override
    public RankShardResult buildRankFeatureShardResult(SearchHits hits, int shardId) {
        SearchHit[] all = hits.getHits();
        RankFeatureDoc[] docs = new RankFeatureDoc[all.length];
        for (int i = 0; i < all.length; i++) {
            SearchHit hit = all[i];
            docs[i] = new RankFeatureDoc(hit.docId(), hit.getScore(), shardId);
            Map<String, Object> source = new HashMap<>();
            for (String name : fields) {
                DocumentField field = hit.field(name);
                if (field != null && !field.getValues().isEmpty()) {
                    source.put(name, field.getValues());
                }
            }
            docs[i].featureData(Window.docText(source, fields, docChars));
        }
        return new RankFeatureShardResult(docs);
    }
}
