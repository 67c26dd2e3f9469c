/*
 * jingpai: the gateway's rerank_concurrency (BoundedReranker of jingpai/plugin/gateway/rerank.py) in Java: at most N
 * reranker calls in flight at once per reranker URL on this node; a search that gets no slot within timeout_ms fails
 * open with the gateway's reason `reranker_busy`, so reranking adds at most 2 × timeout_ms to a search. Waiting takes
 * no search thread: a waiter is a future completed by the call that frees a slot.
 */
package io.jingpai.core;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/** Slots of one reranker; {@link #shared} gives the node's slots of a reranker URL. */
public final class RerankSlots {
    /** the gateway's default (GatewaySettings.rerank_concurrency) */
    public static final int DEFAULT_CONCURRENCY = 8;

    private static final Map<String, RerankSlots> SHARED = new ConcurrentHashMap<>();

    /** one timer thread for every waiter's deadline (made like the HTTP client's threads: RerankClient.THREADS) */
    private static final ScheduledThreadPoolExecutor TIMER = timer();

    private final String name;
    private int limit;
    private int inFlight;
    private final ArrayDeque<Waiter> waiting = new ArrayDeque<>();

    private record Waiter(CompletableFuture<Void> slot, ScheduledFuture<?>[] deadline) {}

    public RerankSlots(String name, int limit) {
        this.name = name;
        configure(limit);
    }

    /**
     * The node's slots of the reranker at {@code url} (trailing slashes ignored), shared by every pipeline naming it;
     * the limit is that of the processor created last.
     */
    public static RerankSlots shared(String url, int limit) {
        String key = url.replaceAll("/+$", "");
        RerankSlots slots = SHARED.computeIfAbsent(key, k -> new RerankSlots("reranker at " + k, limit));
        slots.configure(limit);
        return slots;
    }

    /** Set the limit: calls in flight keep their slots; a raised limit lets waiters in at once. */
    public void configure(int limit) {
        if (limit < 1) {
            throw new IllegalArgumentException("rerank_concurrency must be >= 1, got " + limit);
        }
        List<Waiter> ready;
        synchronized (this) {
            this.limit = limit;
            ready = takeReady();
        }
        ready.forEach(w -> w.slot().complete(null));
    }

    public synchronized int limit() {
        return limit;
    }

    public synchronized int inFlight() {
        return inFlight;
    }

    public synchronized int waiting() {
        return waiting.size();
    }

    /**
     * A slot: completes when this call holds one (at once when one is free), or fails with reason
     * {@code reranker_busy} after {@code timeoutMs}. Every slot obtained must be given back with {@link #release}.
     */
    public CompletableFuture<Void> acquire(long timeoutMs) {
        Waiter waiter;
        synchronized (this) {
            if (inFlight < limit && waiting.isEmpty()) {
                inFlight++;
                return CompletableFuture.completedFuture(null);
            }
            waiter = new Waiter(new CompletableFuture<>(), new ScheduledFuture<?>[1]);
            waiting.add(waiter);
        }
        ScheduledFuture<?> deadline = TIMER.schedule(() -> {
            boolean mine;
            synchronized (this) {
                mine = waiting.remove(waiter); // whoever takes the waiter off the queue completes it
            }
            if (mine) {
                waiter.slot().completeExceptionally(new RerankClient.Unavailable("reranker_busy", "no rerank slot free within " + timeoutMs
                    + " ms (" + limit() + " calls at once to the " + name + " on this node; raise the pipeline's rerank_concurrency)"));
            }
        }, timeoutMs, TimeUnit.MILLISECONDS);
        synchronized (this) {
            waiter.deadline()[0] = deadline;
        }
        return waiter.slot();
    }

    /** Give a slot back: to the longest waiter, unless the calls in flight are at or over a (lowered) limit. */
    public void release() {
        List<Waiter> ready;
        synchronized (this) {
            inFlight--;
            ready = takeReady();
        }
        ready.forEach(w -> w.slot().complete(null)); // outside the lock: the waiters' calls start from here
    }

    /** The waiters that get a slot now, longest first; each one's slot is counted, its deadline cancelled. */
    private List<Waiter> takeReady() {
        List<Waiter> ready = new ArrayList<>();
        while (inFlight < limit && !waiting.isEmpty()) {
            Waiter next = waiting.poll();
            if (next.deadline()[0] != null) {
                next.deadline()[0].cancel(false);
            }
            inFlight++;
            ready.add(next);
        }
        return ready;
    }

    private static ScheduledThreadPoolExecutor timer() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, RerankClient.THREADS);
        timer.setRemoveOnCancelPolicy(true);
        return timer;
    }
}
