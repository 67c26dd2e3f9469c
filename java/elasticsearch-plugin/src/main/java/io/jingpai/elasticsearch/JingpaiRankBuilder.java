/*
 * jingpai: the rank builder of a reranked jingpai search. It travels to the shards inside the search's source (so it is a
 * named writeable): there it fetches the rerank fields of the hits the coordinator asks about (JingpaiShardContext); on
 * the coordinator it reranks the window (JingpaiCoordinatorContext). The query phase is the engine's own; its merge on the
 * coordinator (EngineWindow) keeps the window's engine scores for the rerank, so no fetch scores its docs again.
 */
package io.jingpai.elasticsearch;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import io.jingpai.core.Fusion;
import io.jingpai.core.RerankPlan;
import org.apache.lucene.search.Explanation;
import org.apache.lucene.search.Query;
import org.elasticsearch.TransportVersion;
import org.elasticsearch.TransportVersions;
import org.elasticsearch.client.internal.Client;
import org.elasticsearch.common.io.stream.StreamInput;
import org.elasticsearch.common.io.stream.StreamOutput;
import org.elasticsearch.search.rank.RankBuilder;
import org.elasticsearch.search.rank.RankDoc;
import org.elasticsearch.search.rank.context.QueryPhaseRankCoordinatorContext;
import org.elasticsearch.search.rank.context.QueryPhaseRankShardContext;
import org.elasticsearch.search.rank.context.RankFeaturePhaseRankCoordinatorContext;
import org.elasticsearch.search.rank.context.RankFeaturePhaseRankShardContext;
import org.elasticsearch.xcontent.XContentBuilder;

/** The settings, the plan and the augmentation's outcome of one reranked search. */
public final class JingpaiRankBuilder extends RankBuilder {
    public static final String NAME = "jingpai";

    private final RetrieverSettings settings;
    private final RerankPlan plan;
    private final Map<String, Object> augment;
    /**
     * the coordinator's merge of this search's query phase, whose scores its rank-feature coordinator context reads: both
     * contexts are built from the search's own builder (one per search: the retriever's rewrite makes it); not sent to
     * the shards
     */
    private final EngineWindow engineWindow;

    public JingpaiRankBuilder(int rankWindowSize, RetrieverSettings settings, RerankPlan plan, Map<String, Object> augment) {
        super(rankWindowSize);
        this.settings = settings;
        this.plan = plan;
        this.augment = augment;
        this.engineWindow = new EngineWindow(rankWindowSize);
    }

    public JingpaiRankBuilder(StreamInput in) throws IOException {
        super(in);
        settings = RetrieverSettings.readFrom(in);
        String mode = in.readString();
        int from = in.readVInt();
        int size = in.readVInt();
        int window = in.readVInt();
        String queryText = in.readString();
        List<String> fields = in.readStringCollectionAsList();
        Fusion fusion = new Fusion(in.readString(), in.readDouble(), in.readVInt());
        plan = new RerankPlan(mode, null, from, size, window, queryText, fields, fusion);
        augment = in.readGenericMap();
        engineWindow = new EngineWindow(rankWindowSize());
    }

    @Override
    protected void doWriteTo(StreamOutput out) throws IOException {
        settings.writeTo(out);
        out.writeString(plan.mode());
        out.writeVInt(plan.from());
        out.writeVInt(plan.size());
        out.writeVInt(plan.window());
        out.writeString(plan.queryText());
        out.writeStringCollection(plan.fields());
        out.writeString(plan.fusion().mode);
        out.writeDouble(plan.fusion().weight);
        out.writeVInt(plan.fusion().rrfK);
        out.writeGenericMap(augment);
    }

    @Override
    public String getWriteableName() {
        return NAME;
    }

    @Override
    public TransportVersion getMinimalSupportedVersion() {
        return TransportVersions.V_8_15_0;
    }

    @Override
    protected void doXContent(XContentBuilder builder, Params params) throws IOException {
        builder.field("window", plan.window());
        builder.field("fields", plan.fields());
        builder.field("fusion", plan.fusion().describe());
        builder.field("query", plan.queryText());
    }

    @Override
    public boolean isCompoundBuilder() {
        return false;
    }

    @Override
    public Explanation explainHit(Explanation baseExplanation, RankDoc scoreDoc, List<String> queryNames) {
        if (scoreDoc == null || !baseExplanation.isMatch()) {
            return baseExplanation;
        }
        return Explanation.match(scoreDoc.score, "jingpai: rank [" + scoreDoc.rank + "] after the rerank of the top " + plan.window()
            + " (fusion " + plan.fusion().mode + ")", baseExplanation);
    }

    @Override
    public QueryPhaseRankShardContext buildQueryPhaseShardContext(List<Query> queries, int from) {
        return null;
    }

    @Override
    public QueryPhaseRankCoordinatorContext buildQueryPhaseCoordinatorContext(int size, int from) {
        return engineWindow;
    }

    @Override
    public RankFeaturePhaseRankShardContext buildRankFeaturePhaseShardContext() {
        return new JingpaiShardContext(plan.fields(), settings.docChars());
    }

    @Override
    public RankFeaturePhaseRankCoordinatorContext buildRankFeaturePhaseCoordinatorContext(int size, int from, Client client) {
        return new JingpaiCoordinatorContext(size, from, rankWindowSize(), settings, plan, augment, engineWindow);
    }

    @Override
    protected boolean doEquals(RankBuilder other) {
        JingpaiRankBuilder that = (JingpaiRankBuilder) other;
        return settings.equals(that.settings) && plan.equals(that.plan) && augment.equals(that.augment);
    }

    @Override
    protected int doHashCode() {
        return Objects.hash(settings, plan, augment);
    }
}
