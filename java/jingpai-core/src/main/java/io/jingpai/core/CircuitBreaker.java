/*
 * jingpai: the reranker's circuit breaker (CircuitBreaker of jingpai/plugin/rerank_client.py) in Java. Closed → open
 * after `breaker_failures` consecutive failures; after `breaker_reset_s` one probe request is let through (half-open):
 * its success closes the breaker, its failure opens it again. While open, searches fail open at once with the
 * gateway's reason `circuit_open`.
 */
package io.jingpai.core;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.DoubleSupplier;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/** One reranker's breaker; {@link #shared} gives the node's breaker of a reranker URL. */
public final class CircuitBreaker {
    private static final Logger LOG = LogManager.getLogger(CircuitBreaker.class);

    /** the gateway's defaults (GatewaySettings.breaker_failures, breaker_reset_s) */
    public static final int DEFAULT_FAILURES = 3;
    public static final double DEFAULT_RESET_S = 10.0;

    /** the breaker's state, named as the gateway names it ({@code closed}, {@code open}, {@code half_open}) */
    public enum State {
        CLOSED, OPEN, HALF_OPEN;

        @Override
        public String toString() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }
    }

    /** one breaker per reranker URL on this node, shared by every pipeline that names the URL */
    private static final Map<String, CircuitBreaker> SHARED = new ConcurrentHashMap<>();

    /** monotonic seconds */
    public static final DoubleSupplier MONOTONIC = () -> System.nanoTime() / 1e9;

    private final String name;
    private final DoubleSupplier clock;
    private int failureThreshold;
    private double resetTimeoutS;
    private int failures;
    private Double openedAt;
    private boolean probing;

    public CircuitBreaker(String name, int failureThreshold, double resetTimeoutS, DoubleSupplier clock) {
        this.name = name;
        this.clock = clock;
        configure(failureThreshold, resetTimeoutS);
    }

    /**
     * The node's breaker of the reranker at {@code url} (trailing slashes ignored). Pipelines naming the same URL share
     * it and its state; its thresholds are those of the processor created last (a pipeline written or updated).
     */
    public static CircuitBreaker shared(String url, int failureThreshold, double resetTimeoutS) {
        String key = url.replaceAll("/+$", "");
        CircuitBreaker breaker = SHARED.computeIfAbsent(key, k -> new CircuitBreaker("reranker at " + k, failureThreshold, resetTimeoutS, MONOTONIC));
        breaker.configure(failureThreshold, resetTimeoutS);
        return breaker;
    }

    /** Set the thresholds (the state is kept). */
    public synchronized void configure(int failureThreshold, double resetTimeoutS) {
        if (failureThreshold < 1) {
            throw new IllegalArgumentException("breaker_failures must be >= 1, got " + failureThreshold);
        }
        if (!(resetTimeoutS > 0) || Double.isInfinite(resetTimeoutS)) {
            throw new IllegalArgumentException("breaker_reset_s must be > 0, got " + resetTimeoutS);
        }
        this.failureThreshold = failureThreshold;
        this.resetTimeoutS = resetTimeoutS;
    }

    public synchronized int failureThreshold() {
        return failureThreshold;
    }

    public synchronized double resetTimeoutS() {
        return resetTimeoutS;
    }

    public synchronized State state() {
        if (openedAt == null) {
            return State.CLOSED;
        }
        return clock.getAsDouble() - openedAt >= resetTimeoutS ? State.HALF_OPEN : State.OPEN;
    }

    /** Whether a request may go to the reranker now (half-open: only one probe at a time). */
    public synchronized boolean allow() {
        State state = state();
        if (state == State.CLOSED) {
            return true;
        }
        if (state == State.HALF_OPEN && !probing) {
            probing = true;
            LOG.info("jingpai: {} circuit breaker half-open: sending a probe request", name);
            return true;
        }
        return false;
    }

    public synchronized void recordSuccess() {
        if (openedAt != null) {
            LOG.warn("jingpai: {} recovered: circuit breaker closed", name);
        }
        failures = 0;
        openedAt = null;
        probing = false;
    }

    public synchronized void recordFailure() {
        failures++;
        boolean wasProbe = probing;
        probing = false;
        if (wasProbe || (openedAt == null && failures >= failureThreshold)) {
            openedAt = clock.getAsDouble();
            LOG.warn("jingpai: {} circuit breaker opened after {} consecutive failure(s); retrying in {} s", name, failures, resetTimeoutS);
        }
    }
}
