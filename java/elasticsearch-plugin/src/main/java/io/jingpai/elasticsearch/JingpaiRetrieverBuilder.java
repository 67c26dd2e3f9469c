/*
 * jingpai: the `jingpai` retriever. On the coordinating node, in the search's rewrite:
 *   1. validate() reads the search's from, size and ext.jingpai (the gateway's per-search overrides, the same keys
 *      and messages: io.jingpai.core.Overrides) — the one place a retriever sees the whole search body;
 *   2. rewrite() loads the dictionary once per node (an async action), augments the inner retriever's full-text
 *      clauses with its keywords (io.jingpai.core.QueryRewriter, the gateway's rules) and plans the search
 *      (io.jingpai.core.RerankPlan): a search that is not reranked (mode off / augment, sort, beyond the window, …)
 *      becomes its (augmented) inner retriever — the engine's own page;
 *   3. a reranked one puts its inner retriever into the search itself and adds JingpaiRankBuilder: the query phase
 *      asks every shard for the engine's top max(window, from + size) hits, the rank-feature phase fetches their
 *      rerank fields on the shards and reranks the window on the coordinator (JingpaiCoordinatorContext), failing
 *      open to the engine's order with the reason; what was done is the response header X-Jingpai (the gateway's
 *      ext.jingpai object);
 *   4. the rank-feature phase keeps the order it is given and cuts the search's from/size page from it: the gateway's
 *      page, a page across the window's end and ties included (no second search re-sorts it by score).
 *
 * Not a compound retriever on purpose: a compound one (CompoundRetrieverBuilder) runs its inner search first and then a
 * second search over rank docs that the engine orders by score — which mixes the engine scores of hits past the window
 * among the window's fused ones and breaks ties by shard and doc — and it opens a point in time for every search.
 */
package io.jingpai.elasticsearch;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import io.jingpai.core.Json;
import io.jingpai.core.Overrides;
import io.jingpai.core.QueryRewriter;
import io.jingpai.core.RerankPlan;
import io.jingpai.core.Segmenter;
import org.elasticsearch.action.ActionListener;
import org.elasticsearch.action.ActionRequestValidationException;
import org.elasticsearch.action.ValidateActions;
import org.elasticsearch.index.query.QueryBuilder;
import org.elasticsearch.index.query.QueryRewriteContext;
import org.elasticsearch.search.SearchExtBuilder;
import org.elasticsearch.search.builder.SearchSourceBuilder;
import org.elasticsearch.search.retriever.RetrieverBuilder;
import org.elasticsearch.search.retriever.RetrieverParserContext;
import org.elasticsearch.usage.SearchUsage;
import org.elasticsearch.xcontent.XContentBuilder;
import org.elasticsearch.xcontent.XContentParser;
import org.elasticsearch.xcontent.XContentParserConfiguration;
import org.elasticsearch.xcontent.json.JsonXContent;

/** {@code {"jingpai": {"retriever": {...}, "reranker_url": …, "fields": […], "rank_window_size": 20, "fusion": "linear", …}}} */
public final class JingpaiRetrieverBuilder extends RetrieverBuilder {
    public static final String NAME = "jingpai";
    /** the response header that tells what the retriever did (JSON, non-ASCII escaped): the gateway's ext.jingpai */
    public static final String HEADER = "X-Jingpai";
    private static final Segmenter NO_WORDS = new Segmenter(Map.of(), 0);

    private final RetrieverSettings settings;
    /** the inner retriever as written ({"standard": {...}}): augmented from this */
    private final Map<String, Object> innerSource;
    /** the inner retriever: as parsed, then augmented */
    private final RetrieverBuilder inner;
    /** non-null once planned: the search is reranked, with the engine asked for plan.engineSize() hits */
    private final RerankPlan plan;
    private final Map<String, Object> augment;
    // the search's from, size, ext.jingpai and shape, read by validate() (the rewrite does not see the body)
    private Request request;

    /** What validate() read of the search body. */
    record Request(int from, int size, Overrides overrides, boolean aggregations) {
        static final Request DEFAULT = new Request(0, 10, Overrides.NONE, false);
    }

    JingpaiRetrieverBuilder(RetrieverBuilder inner, RetrieverSettings settings, Map<String, Object> innerSource, RerankPlan plan,
                            Map<String, Object> augment, Request request) {
        this.inner = inner;
        this.settings = settings;
        this.innerSource = innerSource;
        this.plan = plan;
        this.augment = augment;
        this.request = request;
    }

    @SuppressWarnings("unchecked")
    public static JingpaiRetrieverBuilder fromXContent(XContentParser parser, RetrieverParserContext context) throws IOException {
        if (parser.currentToken() == XContentParser.Token.FIELD_NAME && NAME.equals(parser.currentName())) {
            // nested in another retriever (its named-object field), the parser is on our name, not yet on our object
            parser.nextToken();
        }
        Map<String, Object> body = new LinkedHashMap<>(parser.map());
        Object inner = body.get("retriever");
        if (!(inner instanceof Map<?, ?> innerMap) || innerMap.size() != 1 || !(innerMap.values().iterator().next() instanceof Map<?, ?>)) {
            throw new RetrieverSettings.Invalid("retriever", "expected one inner retriever, e.g. {\"standard\": {\"query\": …}}, got " + inner);
        }
        body.remove("retriever");
        RetrieverSettings settings = RetrieverSettings.read(body, JingpaiPlugin.allowedHosts);
        XContentParserConfiguration config = XContentParserConfiguration.EMPTY.withRegistry(parser.getXContentRegistry())
            .withDeprecationHandler(parser.getDeprecationHandler());
        RetrieverBuilder retriever = parseInner((Map<String, Object>) innerMap, config, context);
        return new JingpaiRetrieverBuilder(retriever, settings, (Map<String, Object>) innerMap, null, Map.of(), Request.DEFAULT);
    }

    /** Parses {@code {"<name>": {...}}} as the retriever of that name. */
    static RetrieverBuilder parseInner(Map<String, Object> inner, XContentParserConfiguration config, RetrieverParserContext context)
        throws IOException {
        try (XContentParser p = JsonXContent.jsonXContent.createParser(config, Json.write(inner))) {
            p.nextToken();
            p.nextToken();
            String name = p.currentName();
            p.nextToken();
            RetrieverBuilder rb = p.namedObject(RetrieverBuilder.class, name, context);
            context.trackRetrieverUsage(name);
            return rb;
        }
    }

    @Override
    public String getName() {
        return NAME;
    }

    private JingpaiRetrieverBuilder with(RetrieverBuilder newInner, Map<String, Object> newInnerSource, RerankPlan newPlan,
                                         Map<String, Object> newAugment) {
        JingpaiRetrieverBuilder copy = new JingpaiRetrieverBuilder(newInner, settings, newInnerSource, newPlan, newAugment, request);
        copy.preFilterQueryBuilders = preFilterQueryBuilders;
        copy.retrieverName = retrieverName;
        copy.minScore = minScore;
        return copy;
    }

    /**
     * Reads the search's from, size and ext.jingpai. Not the rank builders' check of size against rank_window_size: a
     * page past the window is the gateway's (hits past it in the engine's order), so the engine is asked for enough.
     */
    @Override
    public ActionRequestValidationException validate(SearchSourceBuilder source, ActionRequestValidationException e, boolean isScroll,
                                                     boolean allowPartialSearchResults) {
        e = super.validate(source, e, isScroll, allowPartialSearchResults);
        if (isScroll) {
            e = ValidateActions.addValidationError("[" + NAME + "] cannot be used in a scroll context", e);
        }
        Overrides overrides = Overrides.NONE;
        try {
            overrides = Overrides.find(source.ext(), (SearchExtBuilder ext) -> ext instanceof JingpaiSearchExt j ? j.info() : null).overrides();
        } catch (Overrides.Invalid invalid) {
            e = ValidateActions.addValidationError(invalid.getMessage(), e);
        }
        request = new Request(source.from() < 0 ? 0 : source.from(), source.size() < 0 ? 10 : source.size(), overrides,
            source.aggregations() != null);
        return e;
    }

    /** Why the search's shape allows no rerank (the gateway's shape_reason), or null. */
    private String shapeReason() {
        Object standard = innerSource.get("standard");
        if (standard instanceof Map<?, ?> s) {
            if (s.get("search_after") != null) {
                return "search_after";
            }
            Object sort = s.get("sort");
            if (sort != null && !isScoreSort(sort)) {
                return "sort";
            }
        } else {
            return "inner_retriever";
        }
        if (request.size() == 0) {
            return request.aggregations() ? "aggregations_only" : "size_0";
        }
        if (request.from() + request.size() > settings.maxWindow()) {
            return "window_exceeded";
        }
        return null;
    }

    private static boolean isScoreSort(Object sort) {
        List<?> list = sort instanceof List<?> l ? l : List.of(sort);
        for (Object s : list) {
            boolean score = "_score".equals(s) || (s instanceof Map<?, ?> m && m.size() == 1 && m.containsKey("_score")
                && (!(m.get("_score") instanceof Map<?, ?> o) || o.get("order") == null || "desc".equals(o.get("order")))
                && !("asc".equals(m.get("_score"))));
            if (!score) {
                return false;
            }
        }
        return true;
    }

    @Override
    public RetrieverBuilder rewrite(QueryRewriteContext ctx) throws IOException {
        if (plan != null) {
            // planned: the inner retriever's own rewrite (its query's, e.g. a terms lookup)
            RetrieverBuilder rewritten = inner.rewrite(ctx);
            return rewritten == inner ? this : with(rewritten, innerSource, plan, augment);
        }
        return plan(ctx);
    }

    @SuppressWarnings("unchecked")
    private RetrieverBuilder plan(QueryRewriteContext ctx) {
        Overrides overrides = request.overrides();
        boolean off = "off".equals(overrides.mode());
        // without a dictionary: a rewriter that adds nothing and finds the full-text texts on the rerank fields
        QueryRewriter finder = new QueryRewriter(new QueryRewriter.Meta(settings.fields(), Map.of(), null, null, null), NO_WORDS, null, 10,
            QueryRewriter.SEG_BOOST, QueryRewriter.KEYWORD_BOOST, QueryRewriter.WEIGHT_BOOST);
        QueryRewriter rewriter = finder;
        if (!off && settings.keywords() != null) {
            rewriter = Dictionaries.cached(settings.keywords());
            if (rewriter == null) {
                ctx.registerAsyncAction((client, listener) -> Dictionaries.load(client, settings.keywords(), (ActionListener<Object>) listener));
                // a new builder: the rewrite runs the load, then asks it again
                return with(inner, innerSource, null, augment);
            }
        }
        String kind = innerSource.keySet().iterator().next();
        Map<String, Object> body = (Map<String, Object>) innerSource.get(kind);
        Map<String, Object> innerMap = innerSource;
        Map<String, Object> augmentInfo = new LinkedHashMap<>();
        String queryText = "";
        if (body.get("query") != null) {
            QueryRewriter.Result result = rewriter.rewrite(body.get("query"));
            queryText = result.queryText();
            if (rewriter != finder) {
                augmentInfo.put("augmented", result.augmented > 0);
                augmentInfo.put("keywords", result.keywords.stream().map(Map.Entry::getKey).toList());
            }
            // the finder only reads the texts: its rewrite (segmented clauses without a dictionary) is not the gateway's
            if (rewriter != finder && result.augmented > 0) {
                Map<String, Object> newBody = new LinkedHashMap<>(body);
                newBody.put("query", result.query);
                innerMap = Map.of(kind, newBody);
            }
        }
        if (augmentInfo.isEmpty()) {
            augmentInfo.put("augmented", false);
            augmentInfo.put("keywords", List.of());
        }
        RetrieverBuilder augmented = inner;
        if (innerMap != innerSource) {
            try {
                augmented = parseInner(innerMap, ctx.getParserConfig(), new RetrieverParserContext(new SearchUsage(), f -> true));
            } catch (IOException e) {
                throw new IllegalStateException("[jingpai] could not read back the augmented retriever " + innerMap, e);
            }
            augmented.retrieverName(inner.retrieverName());
            augmented.getPreFilterQueryBuilders().addAll(inner.getPreFilterQueryBuilders());
        }
        Overrides effective = overrides;
        if (settings.mode().equals("augment") && overrides.mode() == null) {
            effective = new Overrides("augment", overrides.window(), overrides.fields(), overrides.query(), overrides.fusion(),
                overrides.fusionWeight(), overrides.rrfK());
        }
        RerankPlan p = RerankPlan.plan(settings.window(), settings.maxWindow(), settings.fields(), settings.fusion(), effective, shapeReason(),
            request.from(), request.size(), queryText, "the retriever's");
        if (p.reason() != null) {
            JingpaiCoordinatorContext.tell(info(p, p.reason(), augmentInfo));
            augmented.getPreFilterQueryBuilders().addAll(preFilterQueryBuilders);
            return augmented;
        }
        return with(augmented, innerMap, p, augmentInfo);
    }

    /** The gateway's ext.jingpai of a search not reranked ({@code reason}) or about to be. */
    static Map<String, Object> info(RerankPlan plan, String reason, Map<String, Object> augment) {
        Map<String, Object> info = new LinkedHashMap<>();
        info.put("mode", plan.mode());
        info.put("reranked", false);
        info.put("reason", reason);
        info.putAll(augment);
        info.put("window", plan.window() == 0 ? null : plan.window());
        return info;
    }

    @Override
    public QueryBuilder topDocsQuery() {
        return inner.topDocsQuery();
    }

    /**
     * The inner retriever's search with the rank builder of the plan: the query phase asks each shard for the engine's
     * top {@code max(window, from + size)}, the rank-feature phase reranks them on the coordinator and pages them.
     */
    @Override
    public void extractToSearchSourceBuilder(SearchSourceBuilder source, boolean compoundUsed) {
        if (plan == null) {
            throw new IllegalStateException("[" + NAME + "] retriever extracted before its rewrite");
        }
        if (compoundUsed) {
            // inside a compound retriever the search's page is the outer retriever's: the gateway's paging cannot hold
            throw new IllegalArgumentException("[" + NAME + "] retriever: cannot rerank inside another retriever ([" + NAME
                + "] must be the search's top-level retriever; inside one, use \"mode\": \"augment\")");
        }
        inner.getPreFilterQueryBuilders().addAll(preFilterQueryBuilders);
        inner.extractToSearchSourceBuilder(source, false);
        if (minScore != null) {
            source.minScore(minScore);
        }
        // no sort and no track_scores: the rank-feature phase takes its docs' engine scores from the query phase's merge
        // (EngineWindow), so neither its fetch nor the final one scores its hits again
        source.rankBuilder(new JingpaiRankBuilder(plan.engineSize(), settings, plan, augment));
    }

    @Override
    protected void doToXContent(XContentBuilder builder, Params params) throws IOException {
        builder.field("retriever", inner);
        for (Map.Entry<String, Object> e : settings.describe().entrySet()) {
            builder.field(e.getKey(), e.getValue());
        }
    }

    @Override
    public boolean doEquals(Object other) {
        JingpaiRetrieverBuilder that = (JingpaiRetrieverBuilder) other;
        return Objects.equals(inner, that.inner) && Objects.equals(settings, that.settings) && Objects.equals(innerSource, that.innerSource)
            && Objects.equals(plan, that.plan);
    }

    @Override
    public int doHashCode() {
        return Objects.hash(inner, settings, innerSource, plan);
    }
}
