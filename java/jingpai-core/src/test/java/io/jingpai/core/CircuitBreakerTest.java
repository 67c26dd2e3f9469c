package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.Test;

/** The breaker of jingpai/plugin/rerank_client.py: closed → open → half-open → closed (or open again), on a fake clock. */
class CircuitBreakerTest {
    /** a clock the test moves by hand (seconds), like the Python tests' */
    static final class FakeClock implements java.util.function.DoubleSupplier {
        double now = 1000.0;

        @Override
        public double getAsDouble() {
            return now;
        }
    }

    @Test
    void closedOpenHalfOpenClosed() {
        FakeClock clock = new FakeClock();
        CircuitBreaker breaker = new CircuitBreaker("test", 3, 10.0, clock);
        assertEquals(CircuitBreaker.State.CLOSED, breaker.state());
        for (int i = 0; i < 2; i++) {
            assertTrue(breaker.allow());
            breaker.recordFailure();
            assertEquals(CircuitBreaker.State.CLOSED, breaker.state(), "fewer than 3 consecutive failures keep it closed");
        }
        breaker.recordSuccess(); // a success resets the count
        for (int i = 0; i < 2; i++) {
            breaker.recordFailure();
        }
        assertEquals(CircuitBreaker.State.CLOSED, breaker.state());
        breaker.recordFailure();
        assertEquals(CircuitBreaker.State.OPEN, breaker.state());
        assertEquals("open", breaker.state().toString());
        assertFalse(breaker.allow(), "open: nothing goes to the reranker");
        clock.now += 9.99;
        assertFalse(breaker.allow());
        clock.now += 0.01;
        assertEquals(CircuitBreaker.State.HALF_OPEN, breaker.state());
        assertEquals("half_open", breaker.state().toString());
        assertTrue(breaker.allow(), "half-open: one probe");
        assertFalse(breaker.allow(), "half-open: only one probe at a time");
        breaker.recordSuccess();
        assertEquals(CircuitBreaker.State.CLOSED, breaker.state());
        assertTrue(breaker.allow());
        assertTrue(breaker.allow());
    }

    @Test
    void aFailedProbeOpensItAgain() {
        FakeClock clock = new FakeClock();
        CircuitBreaker breaker = new CircuitBreaker("test", 1, 5.0, clock);
        breaker.recordFailure();
        assertEquals(CircuitBreaker.State.OPEN, breaker.state());
        clock.now += 5;
        assertTrue(breaker.allow());
        breaker.recordFailure();
        assertEquals(CircuitBreaker.State.OPEN, breaker.state(), "the failed probe opens it for another reset period");
        clock.now += 4.9;
        assertFalse(breaker.allow());
        clock.now += 0.1;
        assertTrue(breaker.allow());
    }

    @Test
    void sharedPerUrlAndValidated() {
        CircuitBreaker a = CircuitBreaker.shared("http://127.0.0.1:1/test-shared", 3, 10);
        CircuitBreaker b = CircuitBreaker.shared("http://127.0.0.1:1/test-shared/", 5, 20);
        assertSame(a, b, "pipelines naming the same reranker share its breaker");
        assertEquals(5, a.failureThreshold());
        assertEquals(20.0, a.resetTimeoutS());
        assertTrue(a != CircuitBreaker.shared("http://127.0.0.1:2/test-shared", 3, 10));
        assertThrows(IllegalArgumentException.class, () -> new CircuitBreaker("x", 0, 10, CircuitBreaker.MONOTONIC));
        assertThrows(IllegalArgumentException.class, () -> new CircuitBreaker("x", 3, 0, CircuitBreaker.MONOTONIC));
    }

    /** Through the client: failures open it, an open breaker answers circuit_open without a request, a probe closes it. */
    @Test
    void theClientFailsFastWhileOpen() throws Exception {
        AtomicBoolean healthy = new AtomicBoolean(false);
        AtomicInteger reranks = new AtomicInteger();
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/info", exchange -> {
            byte[] body = "{\"model_id\":\"tiny\"}".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.createContext("/rerank", exchange -> {
            reranks.incrementAndGet();
            exchange.getRequestBody().readAllBytes();
            byte[] body = (healthy.get() ? "[{\"index\":1,\"score\":0.25},{\"index\":0,\"score\":0.75}]" : "boom").getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().add("Content-Type", "application/json");
            exchange.sendResponseHeaders(healthy.get() ? 200 : 500, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.start();
        try {
            FakeClock clock = new FakeClock();
            CircuitBreaker breaker = new CircuitBreaker("test", 3, 10.0, clock);
            String url = "http://127.0.0.1:" + server.getAddress().getPort();
            RerankClient client = new RerankClient(url, 5000, breaker);
            List<String> texts = List.of("a", "b");
            for (int i = 0; i < 3; i++) {
                assertEquals("reranker_error", reason(client, texts));
            }
            assertEquals(3, reranks.get());
            assertEquals(CircuitBreaker.State.OPEN, breaker.state());
            healthy.set(true);
            assertEquals("circuit_open", reason(client, texts));
            assertEquals(3, reranks.get(), "nothing is sent while the breaker is open");
            clock.now += 10;
            assertArrayEquals(new double[] {0.75, 0.25}, client.rerank("q", texts).join(), "the half-open probe goes through");
            assertEquals(CircuitBreaker.State.CLOSED, breaker.state());
            assertEquals(4, reranks.get());
        } finally {
            server.stop(0);
        }
    }

    private static String reason(RerankClient client, List<String> texts) {
        CompletionException e = assertThrows(CompletionException.class, () -> client.rerank("q", texts).join());
        return ((RerankClient.Unavailable) e.getCause()).reason;
    }
}
