/*
 * jingpai: the settings of jingpai_rerank (RerankProcessor), read from the pipeline config; defaults and checks are the
 * gateway's (jingpai/plugin/settings.py).
 */
package io.jingpai.opensearch;

import io.jingpai.core.Answers;
import io.jingpai.core.CircuitBreaker;
import io.jingpai.core.Fusion;
import io.jingpai.core.Overrides;
import io.jingpai.core.RerankSlots;
import io.jingpai.core.StoredKeywords;
import java.net.URI;
import java.util.List;
import java.util.Map;

import org.opensearch.ingest.ConfigurationUtils;

/**
 * The settings of one jingpai_rerank (defaults: the gateway's); {@code rerankKeywords}: how the index stored its
 * rerank keywords ({@code jingpai index --rerank-keywords}; null: none, nothing is sent with the texts).
 */
public record RerankSettings(String url, int window, int maxWindow, List<String> fields, int docChars, int timeoutMs, Fusion fusion,
                       int breakerFailures, double breakerResetS, int rerankConcurrency, long maxAnswerBytes,
                       StoredKeywords rerankKeywords) {
    static RerankSettings read(String tag, Map<String, Object> config, List<String> allowedHosts) {
        String url = ConfigurationUtils.readStringProperty(RerankProcessor.TYPE, tag, config, "reranker_url");
        String host = URI.create(url).getHost();
        if (!allowedHosts.contains("*") && (host == null || !allowedHosts.contains(host))) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "reranker_url",
                "host " + host + " is not in the node setting jingpai.reranker.allowed_hosts " + allowedHosts);
        }
        int window = KeywordsProcessor.number(config.remove("window"), 20).intValue();
        int maxWindow = KeywordsProcessor.number(config.remove("max_window"), 500).intValue();
        if (window < 1 || window > maxWindow) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "window", "must be in [1, max_window]");
        }
        List<String> fields = KeywordsProcessor.strings(config.remove("fields"));
        if (fields.isEmpty()) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "fields", "the document fields sent to the reranker are required");
        }
        int docChars = KeywordsProcessor.number(config.remove("doc_chars"), 512).intValue();
        int timeoutMs = KeywordsProcessor.number(config.remove("timeout_ms"), 3000).intValue();
        String mode = ConfigurationUtils.readStringProperty(RerankProcessor.TYPE, tag, config, "fusion", "linear");
        double weight = KeywordsProcessor.number(config.remove("fusion_weight"), 0.5).doubleValue();
        int rrfK = KeywordsProcessor.number(config.remove("rrf_k"), 60).intValue();
        int breakerFailures = breakerFailures(tag, config.remove("breaker_failures"));
        double breakerResetS = breakerResetS(tag, config.remove("breaker_reset_s"));
        int concurrency = positiveInteger(tag, config.remove("rerank_concurrency"), "rerank_concurrency", RerankSlots.DEFAULT_CONCURRENCY,
            "reranker calls in flight at once on this node");
        long maxAnswerBytes = positiveInteger(tag, config.remove("max_answer_bytes"), "max_answer_bytes", (int) Answers.DEFAULT_MAX_BYTES,
            "the largest reranker answer read; a larger one fails open");
        StoredKeywords stored = rerankKeywords(tag, config.remove("rerank_keywords"));
        try {
            return new RerankSettings(url, window, maxWindow, fields, docChars, timeoutMs, new Fusion(mode, weight, rrfK), breakerFailures,
                breakerResetS, concurrency, maxAnswerBytes, stored);
        } catch (IllegalArgumentException e) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "fusion", e.getMessage());
        }
    }

    /** A setting's value as a number (a JSON number or a numeric string); NaN when it is neither (the caller names it). */
    static double numberOrNaN(Object value) {
        return Overrides.numberOrNaN(value);
    }

    /**
     * rerank_keywords: {@code {"field": "jingpai.rk", "dict_version": …, "top_k": …}} as the index's
     * {@code _meta.jingpai.rerank_keywords} says (jingpai pipeline writes it), or absent.
     */
    static StoredKeywords rerankKeywords(String tag, Object value) {
        if (value == null) {
            return null;
        }
        if (!(value instanceof Map<?, ?> map) || !(map.get("dict_version") instanceof String version) || version.isEmpty()) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "rerank_keywords",
                "must be an object {\"field\", \"dict_version\", \"top_k\"} (the index's _meta.jingpai.rerank_keywords), got " + value);
        }
        Object field = map.containsKey("field") ? map.get("field") : "jingpai.rk";
        if (!(field instanceof String f) || f.isEmpty()) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "rerank_keywords",
                "field must be the document field holding the stored keywords, got " + field);
        }
        int topK = positiveInteger(tag, map.get("top_k"), "rerank_keywords.top_k", 20, "keywords kept per document");
        Object unknown = map.keySet().stream().filter(k -> !List.of("field", "dict_version", "top_k").contains(k)).findFirst().orElse(null);
        if (unknown != null) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "rerank_keywords",
                "unknown key " + unknown + "; expected field, dict_version, top_k");
        }
        return new StoredKeywords(f, version, topK);
    }

    /** breaker_failures: consecutive reranker failures that open the breaker, an integer >= 1 (default 3). */
    static int breakerFailures(String tag, Object value) {
        return positiveInteger(tag, value, "breaker_failures", CircuitBreaker.DEFAULT_FAILURES,
            "consecutive reranker failures that open the circuit breaker");
    }

    /** An integer setting >= 1 ({@code fallback} when not given); the error names it and says what it is. */
    static int positiveInteger(String tag, Object value, String name, int fallback, String what) {
        if (value == null) {
            return fallback;
        }
        double v = numberOrNaN(value);
        if (!(v >= 1) || v != Math.rint(v) || v > Integer.MAX_VALUE) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, name, "must be an integer >= 1 (" + what + "), got " + value);
        }
        return (int) v;
    }

    /** breaker_reset_s: seconds an open breaker waits before one probe request, a number > 0 (default 10). */
    static double breakerResetS(String tag, Object value) {
        if (value == null) {
            return CircuitBreaker.DEFAULT_RESET_S;
        }
        double v = numberOrNaN(value);
        if (!(v > 0) || Double.isInfinite(v)) {
            throw ConfigurationUtils.newConfigurationException(RerankProcessor.TYPE, tag, "breaker_reset_s",
                "must be a number of seconds > 0 (how long an open circuit breaker waits before a probe request), got " + value);
        }
        return v;
    }
}
