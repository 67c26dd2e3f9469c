/*
 * jingpai: jingpai_rerank, the gateway's rerank and fusion inside OpenSearch. It is listed twice in a pipeline, with
 * the same settings: as a request processor it plans the window (the engine is asked for its top `window` hits from
 * 0, as the gateway does: jingpai/plugin/gateway/plan.py), as a response processor it reranks the window, fuses and
 * cuts the client's page (finish.py). Every reranker failure fails open: the engine's order of the same page, with
 * the reason in the response's ext.jingpai.
 */
package io.jingpai.opensearch;

import io.jingpai.core.CircuitBreaker;
import io.jingpai.core.Fusion;
import io.jingpai.core.QueryRewriter;
import io.jingpai.core.RerankClient;
import io.jingpai.core.RerankPlan;
import io.jingpai.core.RerankSlots;
import io.jingpai.core.StoredKeywords;
import io.jingpai.core.Window;
import io.jingpai.core.Overrides;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;

import org.opensearch.action.search.SearchRequest;
import org.opensearch.action.search.SearchResponse;
import org.opensearch.action.search.SearchResponseSections;
import org.opensearch.core.action.ActionListener;
import org.opensearch.search.SearchExtBuilder;
import org.opensearch.search.SearchHit;
import org.opensearch.search.SearchHits;
import org.opensearch.search.builder.SearchSourceBuilder;
import org.opensearch.search.pipeline.AbstractProcessor;
import org.opensearch.search.pipeline.PipelineProcessingContext;
import org.opensearch.search.pipeline.Processor;
import org.opensearch.search.pipeline.SearchRequestProcessor;
import org.opensearch.search.pipeline.SearchResponseProcessor;
import org.opensearch.search.profile.SearchProfileShardResults;
import org.opensearch.search.sort.ScoreSortBuilder;
import org.opensearch.search.sort.SortBuilder;
import org.opensearch.search.sort.SortOrder;

/** The settings both halves share, read from the pipeline config. */
public final class RerankProcessor {
    public static final String TYPE = "jingpai_rerank";
    static final String ATTR_PLAN = "jingpai.rerank_plan";

    private RerankProcessor() {}

    /**
     * The window decided for one search (reason != null: not reranked; window 0: none planned), with this search's
     * mode, rerank fields and fusion (the pipeline's, or its ext.jingpai's).
     */
    public record Plan(String mode, String reason, int from, int size, int window, String queryText, SourceFold source, Fusion fusion,
                       Map<String, Object> augment, boolean keywords) {
        /** the document fields sent to the reranker */
        public List<String> fields() {
            return source.fields();
        }

        /** This plan with the search's _source filter folded in (the window must return the rerank fields). */
        public Plan folded(org.opensearch.search.fetch.subphase.FetchSourceContext ctx) {
            return folded(ctx, null);
        }

        /**
         * {@link #folded(org.opensearch.search.fetch.subphase.FetchSourceContext)}, the window also fetching the stored
         * keywords at {@code keywordsField} (null: none stored) for the reranker's request, never reranked on as text
         * unless a rerank field: {@link #keywords} says whether the filter lets them come (the gateway's plan.py).
         */
        public Plan folded(org.opensearch.search.fetch.subphase.FetchSourceContext ctx, String keywordsField) {
            if (keywordsField == null) {
                return new Plan(mode, reason, from, size, window, queryText, SourceFold.fold(ctx, source.fields()), fusion, augment, false);
            }
            if (source.fields().contains(keywordsField)) {
                SourceFold fold = SourceFold.fold(ctx, source.fields());
                return new Plan(mode, reason, from, size, window, queryText, fold, fusion, augment, fold.fields().contains(keywordsField));
            }
            List<String> with = new ArrayList<>(source.fields());
            with.add(keywordsField);
            SourceFold fold = SourceFold.fold(ctx, with);
            boolean fetched = fold.fields().contains(keywordsField);
            SourceFold reranked = new SourceFold(fold.fields().stream().filter(f -> !f.equals(keywordsField)).toList(), fold.added(), fold.drop(),
                fold.fetch());
            return new Plan(mode, reason, from, size, window, queryText, reranked, fusion, augment, fetched);
        }

        /** the hits asked of the engine from 0 when the window is reranked: the window, or the whole page when it ends past it */
        public int engineSize() {
            return Math.max(window, from + size);
        }
    }

    /**
     * The gateway's planning of one search (plan_search and _rerank_plan of jingpai/plugin/gateway/plan.py) on plain
     * data: the mode (ext.jingpai's, else rerank), why it is not reranked, or the window the engine is asked for.
     *
     * @param shapeReason why its shape allows no rerank ({@link #shapeReason}), or null
     * @param rewriteQueryText the full-text clauses' texts (jingpai_keywords), "" when none
     * @throws IllegalArgumentException ext.jingpai.window over the pipeline's max_window (HTTP 400, as the gateway)
     */
    public static Plan plan(RerankSettings settings, Overrides overrides, String shapeReason, int from, int size, String rewriteQueryText,
                            Map<String, Object> augment) {
        RerankPlan p = RerankPlan.plan(settings.window(), settings.maxWindow(), settings.fields(), settings.fusion(), overrides, shapeReason,
            from, size, rewriteQueryText, "the pipeline's");
        return new Plan(p.mode(), p.reason(), from, size, p.window(), p.queryText(), SourceFold.none(p.fields()), p.fusion(), augment, false);
    }

    /** Why a search is not reranked because of its shape (shape_reason), or null. */
    static String shapeReason(SearchRequest request, RerankSettings settings) {
        SearchSourceBuilder src = request.source();
        if (request.scroll() != null) {
            return "scroll";
        }
        if (src == null) {
            return "no_full_text_query";
        }
        if (src.pointInTimeBuilder() != null) {
            return "pit";
        }
        if (src.searchAfter() != null && src.searchAfter().length > 0) {
            return "search_after";
        }
        if (src.sorts() != null) {
            for (SortBuilder<?> sort : src.sorts()) {
                if (!(sort instanceof ScoreSortBuilder) || sort.order() != SortOrder.DESC) {
                    return "sort";
                }
            }
        }
        int size = src.size() < 0 ? 10 : src.size();
        int from = src.from() < 0 ? 0 : src.from();
        if (size == 0) {
            return src.aggregations() != null ? "aggregations_only" : "size_0";
        }
        if (from + size > settings.maxWindow()) {
            return "window_exceeded";
        }
        return null;
    }

    /** The request half: asks the engine for the window from 0. */
    public static final class Request extends AbstractProcessor implements SearchRequestProcessor {
        private final RerankSettings settings;

        Request(String tag, String description, boolean ignoreFailure, RerankSettings settings) {
            super(tag, description, ignoreFailure);
            this.settings = settings;
        }

        @Override
        public String getType() {
            return TYPE;
        }

        @Override
        public SearchRequest processRequest(SearchRequest request) {
            return processRequest(request, new PipelineProcessingContext());
        }

        @Override
        public SearchRequest processRequest(SearchRequest request, PipelineProcessingContext context) {
            Overrides overrides = JingpaiExt.overrides(request, context);
            SearchSourceBuilder src = request.source();
            QueryRewriter.Result rewrite = (QueryRewriter.Result) context.getAttribute(KeywordsProcessor.ATTR_REWRITE);
            Map<String, Object> augment = new LinkedHashMap<>();
            augment.put("augmented", rewrite != null && rewrite.augmented > 0);
            augment.put("keywords", rewrite == null ? List.of() : rewrite.keywords.stream().map(Map.Entry::getKey).toList());
            int from = src == null || src.from() < 0 ? 0 : src.from();
            int size = src == null || src.size() < 0 ? 10 : src.size();
            Plan plan = plan(settings, overrides, shapeReason(request, settings), from, size, rewrite != null ? rewrite.queryText() : "",
                augment);
            if (plan.reason() == null) {
                src.from(0);
                src.size(plan.engineSize());
                plan = plan.folded(src.fetchSource(), settings.rerankKeywords() == null ? null : settings.rerankKeywords().field());
                if (plan.source().fetch() != null) {
                    src.fetchSource(plan.source().fetch());
                }
            }
            context.setAttribute(ATTR_PLAN, plan);
            return request;
        }
    }

    /** The response half: reranks the window, fuses, cuts the page, adds ext.jingpai. */
    public static final class Response extends AbstractProcessor implements SearchResponseProcessor {
        private final RerankSettings settings;
        private final RerankClient client;

        Response(String tag, String description, boolean ignoreFailure, RerankSettings settings, RerankClient client) {
            super(tag, description, ignoreFailure);
            this.settings = settings;
            this.client = client;
        }

        @Override
        public String getType() {
            return TYPE;
        }

        @Override
        public SearchResponse processResponse(SearchRequest request, SearchResponse response) {
            throw new UnsupportedOperationException("jingpai_rerank runs asynchronously");
        }

        @Override
        public SearchResponse processResponse(SearchRequest request, SearchResponse response, PipelineProcessingContext context) {
            throw new UnsupportedOperationException("jingpai_rerank runs asynchronously");
        }

        @Override
        public void processResponseAsync(SearchRequest request, SearchResponse response, PipelineProcessingContext context,
                                         ActionListener<SearchResponse> listener) {
            try {
                Plan plan = (Plan) context.getAttribute(ATTR_PLAN);
                if (plan == null) {
                    listener.onResponse(withExt(response, response.getHits(), info(null, "not_planned", Map.of())));
                    return;
                }
                if (plan.reason() != null) {
                    listener.onResponse(withExt(response, response.getHits(), info(plan, plan.reason(), Map.of())));
                    return;
                }
                SearchHit[] hits = response.getHits().getHits();
                if (hits.length == 0) {
                    listener.onResponse(withExt(response, response.getHits(), info(plan, "no_hits", Map.of())));
                    return;
                }
                int w = Math.min(plan.window(), hits.length);
                List<String> texts = new ArrayList<>();
                for (int i = 0; i < w; i++) {
                    texts.add(Window.docText(hits[i].getSourceAsMap(), plan.fields(), settings.docChars()));
                }
                if (texts.stream().allMatch(String::isEmpty)) {
                    listener.onResponse(withExt(response, enginePage(response, plan), info(plan, "no_document_text", Map.of())));
                    return;
                }
                Map<String, Object> keywords = null;
                StoredKeywords stored = settings.rerankKeywords();
                if (stored != null && plan.keywords()) {
                    // sent only where the stored digest is that of the text sent (as the gateway's finish.py)
                    List<List<String>> words = new ArrayList<>();
                    for (int i = 0; i < w; i++) {
                        words.add(StoredKeywords.of(hits[i].getSourceAsMap(), stored.field(), texts.get(i)));
                    }
                    keywords = stored.request(words);
                }
                long started = System.nanoTime();
                client.rerank(plan.queryText(), texts, keywords).whenComplete((scores, exc) -> {
                    double took = Math.round((System.nanoTime() - started) / 1e4) / 100.0;
                    try {
                        if (exc != null) {
                            Throwable cause = exc instanceof CompletionException && exc.getCause() != null ? exc.getCause() : exc;
                            String reason = cause instanceof RerankClient.Unavailable u ? u.reason : "reranker_error";
                            listener.onResponse(withExt(response, enginePage(response, plan), info(plan, reason, Map.of("took_rerank_ms", took))));
                            return;
                        }
                        listener.onResponse(reranked(response, plan, scores, took));
                    } catch (Exception e) {
                        listener.onFailure(e);
                    }
                });
            } catch (Exception e) {
                listener.onFailure(e);
            }
        }

        private SearchResponse reranked(SearchResponse response, Plan plan, double[] scores, double took) {
            SearchHit[] hits = response.getHits().getHits();
            Double[] engine = new Double[hits.length];
            for (int i = 0; i < hits.length; i++) {
                // the score as the engine writes it in JSON, read back as a double: what the gateway fuses
                engine[i] = Float.isNaN(hits[i].getScore()) ? null : Double.parseDouble(Float.toString(hits[i].getScore()));
            }
            double[] fused = new double[Math.min(plan.window(), hits.length)];
            List<Window.Placed> page = Window.page(engine, scores, plan.window(), plan.from(), plan.size(), plan.fusion(), fused);
            SearchHit[] out = new SearchHit[page.size()];
            for (int i = 0; i < out.length; i++) {
                Window.Placed placed = page.get(i);
                out[i] = hits[placed.input()];
                if (placed.reranked()) {
                    out[i].score((float) placed.score());
                }
                plan.source().unfold(out[i]);
            }
            double max = Arrays.stream(fused).max().orElse(Double.NaN);
            SearchHits old = response.getHits();
            SearchHits newHits = new SearchHits(out, old.getTotalHits(), (float) max, old.getSortFields(), old.getCollapseField(),
                old.getCollapseValues());
            Map<String, Object> extra = new LinkedHashMap<>();
            extra.put("reranked", true);
            extra.put("model", client.modelId());
            extra.put("took_rerank_ms", took);
            extra.put("fusion", plan.fusion().describe());
            return withExt(response, newHits, info(plan, null, extra));
        }

        /** The engine's order of the client's page (fail-open, and searches not reranked past planning). */
        private static SearchHits enginePage(SearchResponse response, Plan plan) {
            SearchHits old = response.getHits();
            List<SearchHit> page = Window.slice(Arrays.asList(old.getHits()), plan.from(), plan.size());
            page.forEach(plan.source()::unfold);
            return new SearchHits(page.toArray(new SearchHit[0]), old.getTotalHits(), old.getMaxScore(), old.getSortFields(),
                old.getCollapseField(), old.getCollapseValues());
        }

        private Map<String, Object> info(Plan plan, String reason, Map<String, Object> extra) {
            Map<String, Object> info = new LinkedHashMap<>();
            info.put("mode", plan == null ? "rerank" : plan.mode());
            info.put("reranked", false);
            info.put("reason", reason);
            if (plan != null) {
                info.putAll(plan.augment());
                info.put("window", plan.window() == 0 ? null : plan.window());
            }
            info.putAll(extra);
            return info;
        }

        static SearchResponse withExt(SearchResponse response, SearchHits hits, Map<String, Object> info) {
            SearchResponseSections old = response.getInternalResponse();
            List<SearchExtBuilder> exts = new ArrayList<>(old.getSearchExtBuilders());
            exts.removeIf(e -> e instanceof JingpaiExt);
            exts.add(new JingpaiExt(info));
            SearchResponseSections sections = new SearchResponseSections(hits, old.aggregations(), old.suggest(), old.timedOut(),
                old.terminatedEarly(), new SearchProfileShardResults(response.getProfileResults()), old.getNumReducePhases(), exts,
                old.getProcessorResult());
            return new SearchResponse(sections, response.getScrollId(), response.getTotalShards(), response.getSuccessfulShards(),
                response.getSkippedShards(), response.getTook().millis(), response.getShardFailures(), response.getClusters(),
                response.pointInTimeId());
        }
    }

    public static final class RequestFactory implements Processor.Factory<SearchRequestProcessor> {
        private final List<String> allowedHosts;

        public RequestFactory(List<String> allowedHosts) {
            this.allowedHosts = allowedHosts;
        }

        @Override
        public Request create(Map<String, Processor.Factory<SearchRequestProcessor>> factories, String tag, String description,
                              boolean ignoreFailure, Map<String, Object> config, Processor.PipelineContext pipelineContext) {
            return new Request(tag, description, ignoreFailure, RerankSettings.read(tag, config, allowedHosts));
        }
    }

    public static final class ResponseFactory implements Processor.Factory<SearchResponseProcessor> {
        private final List<String> allowedHosts;

        public ResponseFactory(List<String> allowedHosts) {
            this.allowedHosts = allowedHosts;
        }

        @Override
        public Response create(Map<String, Processor.Factory<SearchResponseProcessor>> factories, String tag, String description,
                               boolean ignoreFailure, Map<String, Object> config, Processor.PipelineContext pipelineContext) {
            RerankSettings settings = RerankSettings.read(tag, config, allowedHosts);
            CircuitBreaker breaker = CircuitBreaker.shared(settings.url(), settings.breakerFailures(), settings.breakerResetS());
            RerankSlots slots = RerankSlots.shared(settings.url(), settings.rerankConcurrency());
            return new Response(tag, description, ignoreFailure, settings, new RerankClient(settings.url(), settings.timeoutMs(), breaker, slots,
                settings.maxAnswerBytes()));
        }
    }
}
