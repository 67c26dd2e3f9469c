package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.Test;

/** rerank_concurrency: at most N reranker calls in flight per URL on a node; no slot within timeout_ms is reranker_busy. */
class RerankSlotsTest {
    private static String reason(CompletableFuture<?> future) {
        CompletionException e = assertThrows(CompletionException.class, future::join);
        return ((RerankClient.Unavailable) e.getCause()).reason;
    }

    @Test
    void slotsGoToWaitersInOrderAndWaitersTimeOut() throws Exception {
        RerankSlots slots = new RerankSlots("test", 2);
        assertTrue(slots.acquire(1000).isDone());
        assertTrue(slots.acquire(1000).isDone());
        CompletableFuture<Void> first = slots.acquire(60_000);
        CompletableFuture<Void> second = slots.acquire(60_000);
        assertFalse(first.isDone() || second.isDone());
        assertEquals(2, slots.waiting());
        slots.release();
        assertTrue(first.isDone() && !first.isCompletedExceptionally(), "the longest waiter gets the freed slot");
        assertFalse(second.isDone());
        assertEquals(2, slots.inFlight());
        CompletableFuture<Void> late = slots.acquire(50);
        assertEquals("reranker_busy", reason(late));
        assertEquals(1, slots.waiting(), "a waiter that timed out leaves the queue");
        slots.release();
        slots.release();
        slots.release();
        assertTrue(second.isDone());
        assertEquals(0, slots.inFlight());
        assertEquals(0, slots.waiting());
    }

    @Test
    void aLoweredLimitPassesNoSlotOnWhileOverIt() {
        RerankSlots slots = new RerankSlots("test", 2);
        slots.acquire(1000).join();
        slots.acquire(1000).join();
        CompletableFuture<Void> waiter = slots.acquire(60_000);
        slots.configure(1);
        slots.release();
        assertFalse(waiter.isDone(), "2 in flight over a limit of 1: the freed slot is not passed on");
        slots.release();
        assertTrue(waiter.isDone());
        assertEquals(1, slots.inFlight());
        assertThrows(IllegalArgumentException.class, () -> slots.configure(0));
        CompletableFuture<Void> a = slots.acquire(60_000);
        CompletableFuture<Void> b = slots.acquire(60_000);
        assertFalse(a.isDone() || b.isDone());
        slots.configure(3);
        assertTrue(a.isDone() && b.isDone(), "a raised limit lets the waiters in at once");
        assertEquals(3, slots.inFlight());
    }

    @Test
    void sharedPerUrl() {
        assertSame(RerankSlots.shared("http://127.0.0.1:7/", 3), RerankSlots.shared("http://127.0.0.1:7", 5));
        assertEquals(5, RerankSlots.shared("http://127.0.0.1:7", 5).limit(), "the processor created last sets the limit");
    }

    /** Through the client: with one slot, a second search while the first is being scored waits, then fails open busy. */
    @Test
    void theClientWaitsForASlotThenFailsOpenBusy() throws Exception {
        CountDownLatch hold = new CountDownLatch(1);
        AtomicInteger reranks = new AtomicInteger();
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
        server.createContext("/info", exchange -> {
            byte[] body = "{\"model_id\":\"tiny\"}".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.createContext("/rerank", exchange -> {
            reranks.incrementAndGet();
            exchange.getRequestBody().readAllBytes();
            try {
                hold.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] body = "[{\"index\":0,\"score\":0.5}]".getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().add("Content-Type", "application/json");
            exchange.sendResponseHeaders(200, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.start();
        try {
            String url = "http://127.0.0.1:" + server.getAddress().getPort();
            RerankSlots slots = new RerankSlots("test", 1);
            CircuitBreaker breaker = new CircuitBreaker("test", 3, 10.0, CircuitBreaker.MONOTONIC);
            RerankClient client = new RerankClient(url, 2000, breaker, slots);
            CompletableFuture<double[]> first = client.rerank("q", List.of("a"));
            RerankClient impatient = new RerankClient(url, 300, breaker, slots);
            assertEquals("reranker_busy", reason(impatient.rerank("q", List.of("b"))));
            assertEquals(CircuitBreaker.State.CLOSED, breaker.state(), "a search that got no slot is not a reranker failure");
            hold.countDown();
            assertArrayEquals(new double[] {0.5}, first.join());
            assertEquals(1, reranks.get(), "the busy search sent nothing");
            assertEquals(0, slots.inFlight());
            assertArrayEquals(new double[] {0.5}, impatient.rerank("q", List.of("c")).join(), "the slot is free again");
        } finally {
            server.stop(0);
        }
    }
}
