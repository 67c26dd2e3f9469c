package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import java.util.zip.GZIPOutputStream;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.DynamicTest;

/**
 * rerank_answers.json (written by tests/plugin/test_rerank_answers.py): every wrong answer of a reranker, served by a stand-in
 * on loopback (a JDK HttpServer following the vectors' rules: pad_bytes, trickle_ms, chunked, gzip) and read by the real
 * RerankClient: the same scores, or the same fail-open reason and message as the gateway's client, within the deadline.
 */
class RerankAnswersTest {
    private static Map<String, Object> vectors;
    private static HttpServer server;
    private static ExecutorService threads;
    private static final AtomicReference<Map<String, Object>> CASE = new AtomicReference<>();
    private static final AtomicBoolean STOPPING = new AtomicBoolean();

    @BeforeAll
    static void start() throws Exception {
        vectors = Vectors.read("rerank_answers.json");
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        threads = Executors.newCachedThreadPool();
        server.setExecutor(threads);
        server.createContext("/info", exchange -> {
            exchange.getResponseHeaders().add("Content-Type", "application/json");
            send(exchange, 200, "{\"model_id\":\"standin\",\"max_client_batch_size\":64}".getBytes(StandardCharsets.UTF_8));
        });
        server.createContext("/rerank", exchange -> {
            exchange.getRequestBody().readAllBytes();
            serve(exchange, CASE.get());
        });
        server.start();
    }

    @AfterAll
    static void stop() {
        STOPPING.set(true);
        server.stop(0);
        threads.shutdownNow();
    }

    private static void send(HttpExchange exchange, int status, byte[] body) throws IOException {
        exchange.sendResponseHeaders(status, body.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(body);
        }
    }

    /** The case's body in pieces: as written, gzip-compressed, or padded with a text of pad_bytes × x in each item. */
    static List<byte[]> pieces(Map<String, Object> c) throws IOException {
        byte[] body = ((String) c.get("body")).getBytes(StandardCharsets.UTF_8);
        if (c.get("pad_bytes") instanceof Number pad) {
            byte[] text = new byte[pad.intValue()];
            Arrays.fill(text, (byte) 'x');
            List<byte[]> out = new ArrayList<>(List.of("[".getBytes(StandardCharsets.UTF_8)));
            List<?> items = (List<?>) Answers.json("application/json", body);
            for (int k = 0; k < items.size(); k++) {
                Map<?, ?> item = (Map<?, ?>) items.get(k);
                String head = (k > 0 ? "," : "") + "{\"index\":" + item.get("index") + ",\"score\":" + item.get("score") + ",\"text\":\"";
                out.add(head.getBytes(StandardCharsets.UTF_8));
                out.add(text);
                out.add("\"}".getBytes(StandardCharsets.UTF_8));
            }
            out.add("]".getBytes(StandardCharsets.UTF_8));
            return out;
        }
        if (Boolean.TRUE.equals(c.get("gzip"))) {
            ByteArrayOutputStream zipped = new ByteArrayOutputStream();
            try (GZIPOutputStream gz = new GZIPOutputStream(zipped)) {
                gz.write(body);
            }
            return List.of(zipped.toByteArray());
        }
        return List.of(body);
    }

    private static void serve(HttpExchange exchange, Map<String, Object> c) throws IOException {
        List<byte[]> pieces = pieces(c);
        if (c.get("content_type") != null) {
            exchange.getResponseHeaders().add("Content-Type", (String) c.get("content_type"));
        }
        if (Boolean.TRUE.equals(c.get("gzip"))) {
            exchange.getResponseHeaders().add("Content-Encoding", "gzip");
        }
        long length = pieces.stream().mapToLong(p -> p.length).sum();
        exchange.sendResponseHeaders(((Number) c.get("status")).intValue(), Boolean.TRUE.equals(c.get("chunked")) ? 0 : length);
        Object trickle = c.get("trickle_ms");
        try (OutputStream out = exchange.getResponseBody()) {
            for (byte[] piece : pieces) {
                if (trickle instanceof Number ms) {
                    for (byte b : piece) {
                        Thread.sleep(ms.longValue());
                        if (STOPPING.get()) {
                            return;
                        }
                        out.write(b);
                        out.flush();
                    }
                } else {
                    out.write(piece);
                }
            }
        } catch (IOException | InterruptedException e) {
            // the client hung up (what the attack wants), or the server stops
        } finally {
            exchange.close();
        }
    }

    private static String url() {
        return "http://127.0.0.1:" + server.getAddress().getPort();
    }

    @TestFactory
    @SuppressWarnings("unchecked")
    Stream<DynamicTest> theClientMakesOfEachAnswerWhatTheVectorsSay() {
        int n = ((Number) vectors.get("texts")).intValue();
        int timeoutMs = ((Number) vectors.get("timeout_ms")).intValue();
        List<String> texts = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            texts.add("文本" + i);
        }
        return ((List<Map<String, Object>>) vectors.get("cases")).stream().map(c -> DynamicTest.dynamicTest((String) c.get("name"), () -> {
            CASE.set(c);
            CircuitBreaker breaker = new CircuitBreaker("test", 100, 10.0, CircuitBreaker.MONOTONIC);
            RerankClient client = new RerankClient(url(), timeoutMs, breaker, new RerankSlots("test", 4));
            Map<String, Object> expected = (Map<String, Object>) c.get("expected");
            long started = System.nanoTime();
            if (expected.containsKey("scores")) {
                assertArrayEquals(Vectors.doubles(expected.get("scores")), client.rerank("中国GDP", texts).join(), 1e-12);
            } else {
                CompletionException e = assertThrows(CompletionException.class, () -> client.rerank("中国GDP", texts).join());
                RerankClient.Unavailable u = (RerankClient.Unavailable) e.getCause();
                String message = ((String) expected.get("message")).replace("{url}", url()).replace("{timeout_ms}", String.valueOf(timeoutMs));
                assertEquals(expected.get("reason") + ": " + message, u.getMessage());
                assertEquals(expected.get("reason"), u.reason);
            }
            long tookMs = (System.nanoTime() - started) / 1_000_000;
            // the whole call ends at the deadline however the answer comes (a trickle would take ~150 s)
            assertTrue(tookMs < timeoutMs + 2000, c.get("name") + " held the call " + tookMs + " ms");
        }));
    }

    @Test
    void theDefaultBoundIsTheGateways() {
        assertEquals(((Number) vectors.get("max_answer_bytes")).longValue(), Answers.DEFAULT_MAX_BYTES);
    }
}
