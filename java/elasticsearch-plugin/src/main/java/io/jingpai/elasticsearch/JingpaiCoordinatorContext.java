/*
 * jingpai: the rerank on the coordinating node, asynchronous (no search thread waits on HTTP): the engine's top hits
 * of all shards in the engine's order (score, then shard, then doc: the order a plain search merges them in), the
 * window's texts to `jingpai serve` /rerank (io.jingpai.core.RerankClient: one deadline, bounded answers, the
 * gateway's validation, a circuit breaker and slots per reranker URL), fused and paged as the gateway does
 * (io.jingpai.core.Window). Every failure fails open: the engine's order, the reason in the X-Jingpai header.
 */
package io.jingpai.elasticsearch;

import java.util.Arrays;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;

import io.jingpai.core.CircuitBreaker;
import io.jingpai.core.Json;
import io.jingpai.core.RerankClient;
import io.jingpai.core.RerankPlan;
import io.jingpai.core.RerankSlots;
import io.jingpai.core.Window;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.elasticsearch.action.ActionListener;
import org.elasticsearch.common.util.concurrent.ThreadContext;
import org.elasticsearch.search.rank.context.RankFeaturePhaseRankCoordinatorContext;
import org.elasticsearch.search.rank.feature.RankFeatureDoc;
import org.elasticsearch.threadpool.ThreadPool;

final class JingpaiCoordinatorContext extends RankFeaturePhaseRankCoordinatorContext {
    private static final Logger LOGGER = LogManager.getLogger(JingpaiCoordinatorContext.class);
    /** one client per reranker and limits: its /info is read once, its breaker and slots are the URL's */
    private static final Map<String, RerankClient> CLIENTS = new ConcurrentHashMap<>();
    /** the engine's order of merged hits: score, then shard, then doc */
    static final Comparator<RankFeatureDoc> ENGINE_ORDER = Comparator.<RankFeatureDoc>comparingDouble(d -> -d.score)
        .thenComparingInt(d -> d.shardIndex).thenComparingInt(d -> d.doc);

    private final RetrieverSettings settings;
    private final RerankPlan plan;
    private final Map<String, Object> augment;
    private final EngineWindow engineWindow;

    JingpaiCoordinatorContext(int size, int from, int rankWindowSize, RetrieverSettings settings, RerankPlan plan, Map<String, Object> augment,
                              EngineWindow engineWindow) {
        super(size, from, rankWindowSize, true);
        this.settings = settings;
        this.plan = plan;
        this.augment = augment;
        this.engineWindow = engineWindow;
    }

    static RerankClient client(RetrieverSettings s) {
        String key = s.url() + "|" + s.timeoutMs() + "|" + s.maxAnswerBytes() + "|" + s.breakerFailures() + "|" + s.breakerResetS() + "|"
            + s.rerankConcurrency();
        return CLIENTS.computeIfAbsent(key, k -> new RerankClient(s.url(), s.timeoutMs(),
            CircuitBreaker.shared(s.url(), s.breakerFailures(), s.breakerResetS()), RerankSlots.shared(s.url(), s.rerankConcurrency()),
            s.maxAnswerBytes()));
    }

    /** Adds what was done to the search's response (header X-Jingpai, the gateway's ext.jingpai as JSON). */
    static void tell(Map<String, Object> info) {
        ThreadPool pool = JingpaiPlugin.threadPool;
        if (pool != null) {
            pool.getThreadContext().addResponseHeader(JingpaiRetrieverBuilder.HEADER, Json.writeAscii(info));
        }
    }

    @Override
    protected void computeScores(RankFeatureDoc[] featureDocs, ActionListener<float[]> scoreListener) {
        throw new UnsupportedOperationException("jingpai reranks in computeRankScoresForGlobalResults");
    }

    /** The docs in the order they are in ({@link #computeRankScoresForGlobalResults} put them in the gateway's order). */
    @Override
    protected RankFeatureDoc[] preprocess(RankFeatureDoc[] originalDocs, boolean rerankedScores) {
        return originalDocs;
    }

    @Override
    public void computeRankScoresForGlobalResults(RankFeatureDoc[] featureDocs, ActionListener<RankFeatureDoc[]> listener) {
        RankFeatureDoc[] engine = featureDocs.clone();
        for (RankFeatureDoc doc : engine) {
            // the shards' fetches do not score (the search tracks no scores): the query phase's scores, kept by its merge
            doc.score = engineWindow.score(doc.shardIndex, doc.doc);
        }
        Arrays.sort(engine, ENGINE_ORDER);
        if (engine.length == 0) {
            failOpen(engine, "no_hits", Map.of(), listener);
            return;
        }
        int w = Math.min(plan.window(), engine.length);
        List<String> texts = new ArrayList<>();
        for (int i = 0; i < w; i++) {
            texts.add(engine[i].featureData == null ? "" : engine[i].featureData);
        }
        if (texts.stream().allMatch(String::isEmpty)) {
            failOpen(engine, "no_document_text", Map.of(), listener);
            return;
        }
        ThreadPool pool = JingpaiPlugin.threadPool;
        ThreadContext threadContext = pool.getThreadContext();
        // the search's context (its headers, its task) is given back to the thread that takes the answer
        Supplier<ThreadContext.StoredContext> restore = threadContext.newRestorableContext(true);
        RerankClient client = client(settings);
        long started = System.nanoTime();
        client.rerank(plan.queryText(), texts).whenComplete((scores, exc) -> {
            double took = Math.round((System.nanoTime() - started) / 1e4) / 100.0;
            // on the reranker client's thread, in the search's context: the fusion of the window, then the phase's
            // listener, which forks to the search's own executor (a ThreadedActionListener) — no hop of our own first
            try (ThreadContext.StoredContext ignored = restore.get()) {
                if (exc != null) {
                    Throwable cause = exc instanceof CompletionException && exc.getCause() != null ? exc.getCause() : exc;
                    String reason = cause instanceof RerankClient.Unavailable u ? u.reason : "reranker_error";
                    LOGGER.warn("jingpai: rerank failed open ({}): {}", reason, cause.getMessage());
                    failOpen(engine, reason, Map.of("took_rerank_ms", took), listener);
                    return;
                }
                listener.onResponse(reranked(engine, scores, took, client.modelId()));
            } catch (Exception e) {
                listener.onFailure(e);
            }
        });
    }

    /** The engine's order and scores, with {@code reason}. */
    private void failOpen(RankFeatureDoc[] engine, String reason, Map<String, Object> extra, ActionListener<RankFeatureDoc[]> listener) {
        Map<String, Object> info = JingpaiRetrieverBuilder.info(plan, reason, augment);
        info.putAll(extra);
        tell(info);
        listener.onResponse(engine);
    }

    private RankFeatureDoc[] reranked(RankFeatureDoc[] engine, double[] scores, double took, String model) {
        Double[] first = new Double[engine.length];
        for (int i = 0; i < engine.length; i++) {
            // the score as the engine writes it in JSON, read back as a double: what the gateway fuses
            first[i] = Float.isNaN(engine[i].score) ? null : Double.parseDouble(Float.toString(engine[i].score));
        }
        List<Window.Placed> order = Window.page(first, scores, plan.window(), 0, engine.length, plan.fusion(), null);
        RankFeatureDoc[] out = new RankFeatureDoc[order.size()];
        for (int i = 0; i < out.length; i++) {
            Window.Placed placed = order.get(i);
            out[i] = engine[placed.input()];
            if (placed.reranked()) {
                out[i].score = (float) placed.score();
            }
        }
        Map<String, Object> info = JingpaiRetrieverBuilder.info(plan, null, augment);
        Map<String, Object> extra = new LinkedHashMap<>();
        extra.put("reranked", true);
        extra.put("model", model);
        extra.put("took_rerank_ms", took);
        extra.put("fusion", plan.fusion().describe());
        extra.put("hits", pageHits(order, first));
        info.putAll(extra);
        tell(info);
        return out;
    }

    /**
     * The gateway's per-hit {@code _jingpai} of the page's hits (from/size of the phase's order), in the page's order:
     * {@code engine_score}, {@code engine_rank}, {@code model_score} of a reranked hit, null for one past the window. The
     * hits of an Elasticsearch response cannot carry an object of the plugin's, so X-Jingpai carries them.
     */
    private List<Object> pageHits(List<Window.Placed> order, Double[] first) {
        List<Object> hits = new ArrayList<>();
        for (int i = plan.from(); i < Math.min(order.size(), plan.from() + plan.size()); i++) {
            Window.Placed placed = order.get(i);
            if (!placed.reranked()) {
                hits.add(null);
                continue;
            }
            Map<String, Object> hit = new LinkedHashMap<>();
            hit.put("engine_score", first[placed.input()]);
            hit.put("engine_rank", placed.engineRank());
            hit.put("model_score", placed.modelScore());
            hits.add(hit);
        }
        return hits;
    }
}
