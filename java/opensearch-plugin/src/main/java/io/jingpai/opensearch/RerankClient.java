/*
 * jingpai: the reranker client (jingpai/plugin/rerank_client.py) in Java: POST {url}/rerank of `jingpai serve` or
 * a TEI reranker, GET /info once for the model and its batch limit, every failure a short machine-readable reason,
 * behind a circuit breaker (while it is open: `circuit_open` at once, nothing sent).
 */
package io.jingpai.opensearch;

import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.security.AccessController;
import java.security.PrivilegedAction;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

import org.opensearch.common.xcontent.XContentHelper;
import org.opensearch.common.xcontent.XContentType;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.common.bytes.BytesArray;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;

/** Async client of {@code POST /rerank}; failures complete exceptionally with {@link Unavailable}. */
public class RerankClient {
    /** The reranker could not score this request; {@code reason} is the gateway's jingpai.reason. */
    public static final class Unavailable extends RuntimeException {
        public final String reason;

        public Unavailable(String reason, String detail) {
            super(reason + ": " + detail);
            this.reason = reason;
        }
    }

    private final String url;
    private final Duration timeout;
    private final HttpClient http;
    private volatile String modelId;
    private volatile Integer maxBatch;
    private volatile boolean described;
    private final CircuitBreaker breaker;
    private final RerankSlots slots;

    /** A client with a breaker and slots of its own, at the gateway's defaults. */
    public RerankClient(String url, int timeoutMs) {
        this(url, timeoutMs, new CircuitBreaker("reranker at " + url, CircuitBreaker.DEFAULT_FAILURES, CircuitBreaker.DEFAULT_RESET_S,
            CircuitBreaker.MONOTONIC));
    }

    /** A client whose calls go through {@code breaker}, with slots of its own. */
    public RerankClient(String url, int timeoutMs, CircuitBreaker breaker) {
        this(url, timeoutMs, breaker, new RerankSlots("reranker at " + url, RerankSlots.DEFAULT_CONCURRENCY));
    }

    /**
     * A client whose calls each hold one of {@code slots} and go through {@code breaker} (the processors pass the node's
     * breaker and slots of the URL).
     */
    public RerankClient(String url, int timeoutMs, CircuitBreaker breaker, RerankSlots slots) {
        this.url = url.replaceAll("/+$", "");
        this.timeout = Duration.ofMillis(timeoutMs);
        this.breaker = breaker;
        this.slots = slots;
        this.http = AccessController.doPrivileged((PrivilegedAction<HttpClient>) () ->
            HttpClient.newBuilder().connectTimeout(timeout).version(HttpClient.Version.HTTP_1_1).executor(EXECUTOR).build());
    }

    /**
     * The HttpClient's threads. Its default factory makes "innocuous" threads in a group of their own and marks them
     * daemon, which OpenSearch's SecureSM refuses (ThreadPermission modifyArbitraryThread) because the check sees the
     * java.net.http module's frames, not only this plugin's. These threads are made here, privileged, in the calling
     * thread's group: only this plugin's permissions are checked. Idle threads end after a minute.
     */
    static final ThreadFactory THREADS = new ThreadFactory() {
        private final AtomicInteger next = new AtomicInteger();

        @Override
        public Thread newThread(Runnable r) {
            return AccessController.doPrivileged((PrivilegedAction<Thread>) () -> {
                Thread t = new Thread(r, "jingpai-rerank-" + next.incrementAndGet());
                t.setDaemon(true);
                return t;
            });
        }
    };
    private static final ExecutorService EXECUTOR = Executors.newCachedThreadPool(THREADS);

    public String modelId() {
        return modelId;
    }

    public CircuitBreaker breaker() {
        return breaker;
    }

    public RerankSlots slots() {
        return slots;
    }

    /**
     * Scores of {@code texts} against {@code query}, in input order, once a slot is held (none within the timeout:
     * reason {@code reranker_busy}). While the breaker is open, fails at once with reason {@code circuit_open}; every
     * other outcome is recorded by the breaker (as the gateway's client does).
     */
    public CompletableFuture<double[]> rerank(String query, List<String> texts) {
        return slots.acquire(timeout.toMillis()).thenCompose(held -> {
            CompletableFuture<double[]> call = guarded(query, texts);
            call.whenComplete((scores, exc) -> slots.release());
            return call;
        });
    }

    private CompletableFuture<double[]> guarded(String query, List<String> texts) {
        if (!breaker.allow()) {
            return CompletableFuture.failedFuture(
                new Unavailable("circuit_open", "reranker at " + url + " failed repeatedly; circuit breaker is open"));
        }
        CompletableFuture<double[]> call;
        try {
            call = call(query, texts);
        } catch (RuntimeException e) {
            breaker.recordFailure();
            return CompletableFuture.failedFuture(failure(e));
        }
        return call.whenComplete((scores, exc) -> {
            if (exc != null) {
                breaker.recordFailure();
            } else {
                breaker.recordSuccess();
            }
        });
    }

    private CompletableFuture<double[]> call(String query, List<String> texts) {
        CompletableFuture<Void> ready = described ? CompletableFuture.completedFuture(null) : describe();
        return ready.thenCompose(ignored -> {
            int size = maxBatch != null ? maxBatch : Math.max(texts.size(), 1);
            List<CompletableFuture<double[]>> parts = new ArrayList<>();
            for (int i = 0; i < texts.size(); i += size) {
                parts.add(post(query, texts.subList(i, Math.min(i + size, texts.size()))));
            }
            return CompletableFuture.allOf(parts.toArray(new CompletableFuture<?>[0])).thenApply(v -> {
                double[] out = new double[texts.size()];
                int at = 0;
                for (CompletableFuture<double[]> part : parts) {
                    double[] scores = part.join();
                    System.arraycopy(scores, 0, out, at, scores.length);
                    at += scores.length;
                }
                return out;
            });
        });
    }

    private <T> CompletableFuture<HttpResponse<T>> send(HttpRequest request, HttpResponse.BodyHandler<T> handler) {
        return AccessController.doPrivileged((PrivilegedAction<CompletableFuture<HttpResponse<T>>>) () -> http.sendAsync(request, handler))
            .exceptionally(exc -> {
                throw new CompletionException(failure(exc));
            });
    }

    private Unavailable failure(Throwable exc) {
        Throwable cause = exc instanceof CompletionException && exc.getCause() != null ? exc.getCause() : exc;
        if (cause instanceof Unavailable u) {
            return u;
        }
        if (cause instanceof HttpTimeoutException) {
            return new Unavailable("reranker_timeout", "no answer from " + url + " within " + timeout.toMillis() + " ms");
        }
        if (cause instanceof ConnectException || cause instanceof IOException) {
            return new Unavailable("reranker_unreachable", url + ": " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
        return new Unavailable("reranker_unreachable", url + ": " + cause);
    }

    private CompletableFuture<Void> describe() {
        HttpRequest request = HttpRequest.newBuilder(URI.create(url + "/info")).timeout(timeout).GET().build();
        return send(request, HttpResponse.BodyHandlers.ofByteArray()).thenAccept(resp -> {
            if (resp.statusCode() == 200) {
                try {
                    Map<String, Object> info = parseMap(resp.body());
                    for (String key : List.of("model_id", "model_name", "model", "name")) {
                        Object v = info.get(key);
                        if (v instanceof Map<?, ?> m) {
                            v = m.get("name");
                        }
                        if (v != null && !"".equals(v)) {
                            modelId = String.valueOf(v);
                            break;
                        }
                    }
                    Object limits = info.get("limits");
                    Object batch = info.containsKey("max_client_batch_size") ? info.get("max_client_batch_size")
                        : (limits instanceof Map<?, ?> l ? l.get("max_docs") : null);
                    if (batch instanceof Integer b && b > 0) {
                        maxBatch = b;
                    }
                } catch (IOException | RuntimeException ignored) {
                    // a reranker whose /info is no JSON object is taken as is: no name, no batch limit
                }
            }
            described = true;
        });
    }

    private CompletableFuture<double[]> post(String query, List<String> texts) {
        byte[] body;
        try (XContentBuilder b = JsonXContent.contentBuilder()) {
            b.startObject().field("query", query).field("texts", texts).field("truncate", true).field("raw_scores", false)
                .field("return_text", false).endObject();
            body = org.opensearch.core.common.bytes.BytesReference.toBytes(org.opensearch.core.common.bytes.BytesReference.bytes(b));
        } catch (IOException e) {
            return CompletableFuture.failedFuture(new Unavailable("reranker_error", e.toString()));
        }
        HttpRequest request = HttpRequest.newBuilder(URI.create(url + "/rerank")).timeout(timeout)
            .header("content-type", "application/json").POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
        return send(request, HttpResponse.BodyHandlers.ofByteArray()).thenApply(resp -> scores(resp.statusCode(), resp.body(), texts.size()));
    }

    /** The scores of one {@code /rerank} answer, in input order. */
    double[] scores(int status, byte[] body, int n) {
        if (status != 200) {
            String reason = status == 429 ? "reranker_overloaded" : status == 424 ? "reranker_inference_failed" : "reranker_error";
            String text = new String(body, StandardCharsets.UTF_8);
            throw new Unavailable(reason, url + "/rerank answered HTTP " + status + ": " + text.substring(0, Math.min(200, text.length())));
        }
        try (XContentParser parser = JsonXContent.jsonXContent.createParser(NamedXContentRegistry.EMPTY,
            DeprecationHandler.THROW_UNSUPPORTED_OPERATION, body)) {
            List<Object> items = parser.list();
            double[] scores = new double[n];
            Arrays.fill(scores, Double.NaN);
            for (Object item : items) {
                Map<?, ?> m = (Map<?, ?>) item;
                int index = ((Number) m.get("index")).intValue();
                scores[index] = ((Number) m.get("score")).doubleValue();
            }
            for (double s : scores) {
                if (Double.isNaN(s)) {
                    throw new IllegalArgumentException("expected one score per text (" + n + ")");
                }
            }
            return scores;
        } catch (IOException | RuntimeException e) {
            throw new Unavailable("reranker_bad_response", url + "/rerank: " + e);
        }
    }

    static Map<String, Object> parseMap(byte[] body) throws IOException {
        return XContentHelper.convertToMap(new BytesArray(body), true, XContentType.JSON).v2();
    }

    static Map<String, Object> ordered(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            out.put((String) kv[i], kv[i + 1]);
        }
        return out;
    }
}
