/*
 * jingpai: the gateway's planning of one search (plan_search and _rerank_plan of jingpai/plugin/gateway/plan.py) on
 * plain data, for any engine plugin: the mode, why the search is not reranked, or the window the engine is asked for.
 * tests/vectors/overrides.json pins it (OverridesTest in each plugin).
 */
package io.jingpai.core;

import java.util.List;

/**
 * One search's plan: {@code reason != null}: not reranked (window 0: none planned), with this search's mode, query text,
 * rerank fields and fusion (the plugin's settings, or its ext.jingpai's).
 */
public record RerankPlan(String mode, String reason, int from, int size, int window, String queryText, List<String> fields, Fusion fusion) {
    /** the hits asked of the engine from 0 when the window is reranked: the window, or the whole page when it ends past it */
    public int engineSize() {
        return Math.max(window, from + size);
    }

    /**
     * The plan of a search with {@code overrides} on a plugin configured with {@code window}, {@code maxWindow},
     * {@code fields} and {@code fusion}.
     *
     * @param shapeReason why its shape allows no rerank (scroll, sort, size_0, window_exceeded, ...), or null
     * @param rewriteQueryText the full-text clauses' texts, "" when none
     * @throws IllegalArgumentException ext.jingpai.window over {@code maxWindow} (HTTP 400, as the gateway); the message
     *     names {@code owner}'s max_window ("the pipeline's", "the retriever's")
     */
    public static RerankPlan plan(int window, int maxWindow, List<String> fields, Fusion fusion, Overrides overrides, String shapeReason,
                                  int from, int size, String rewriteQueryText, String owner) {
        Fusion fused = overrides.over(fusion);
        List<String> rerankFields = overrides.fields() != null ? overrides.fields() : fields;
        String mode = overrides.mode() != null ? overrides.mode() : "rerank";
        String queryText = overrides.query() != null ? overrides.query() : rewriteQueryText;
        if (mode.equals("off")) {
            return new RerankPlan(mode, "disabled", from, size, 0, queryText, rerankFields, fused);
        }
        String reason = mode.equals("augment") ? "augment_only" : shapeReason;
        if (reason == null && queryText.isEmpty()) {
            reason = "no_full_text_query";
        }
        if (reason != null) {
            return new RerankPlan(mode, reason, from, size, 0, queryText, rerankFields, fused);
        }
        if (overrides.window() != null && overrides.window() > maxWindow) {
            throw new IllegalArgumentException("ext.jingpai.window " + overrides.window() + " exceeds " + owner + " max_window " + maxWindow);
        }
        // the engine's top W whatever the page (paging never repeats or skips a hit): as the gateway
        int w = Math.min(overrides.window() != null ? overrides.window() : window, maxWindow);
        return new RerankPlan(mode, from >= w ? "beyond_window" : null, from, size, w, queryText, rerankFields, fused);
    }
}
