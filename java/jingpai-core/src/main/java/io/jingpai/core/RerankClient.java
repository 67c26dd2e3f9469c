/*
 * jingpai: the reranker client (jingpai/plugin/rerank_client.py) in Java: POST {url}/rerank of `jingpai serve` or
 * a TEI reranker, GET /info once for the model and its batch limit, every failure a short machine-readable reason,
 * behind a circuit breaker (while it is open: `circuit_open` at once, nothing sent). Each call has one deadline,
 * timeout_ms, on the whole of it (the first call's /info, connect, send, wait, read: a body that trickles in too);
 * past it the call fails `reranker_timeout` and its exchanges are cancelled. Answers are read up to max_answer_bytes
 * and validated by Answers (the gateway's rules and messages). An http:// reranker is called over plain sockets
 * (PlainHttp: one thread of EXECUTOR per exchange, kept-alive connections), an https:// one with the JDK's HttpClient.
 */
package io.jingpai.core;

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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;


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
    private final long maxAnswerBytes;
    /** the transport of an http:// reranker; null for https:// (the JDK's HttpClient, {@link #http}) */
    private final PlainHttp plain;
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
        this(url, timeoutMs, breaker, slots, Answers.DEFAULT_MAX_BYTES);
    }

    /** As above, reading answers of at most {@code maxAnswerBytes} (a larger one is reranker_bad_response). */
    public RerankClient(String url, int timeoutMs, CircuitBreaker breaker, RerankSlots slots, long maxAnswerBytes) {
        this.url = url.replaceAll("/+$", "");
        this.timeout = Duration.ofMillis(timeoutMs);
        this.maxAnswerBytes = maxAnswerBytes;
        this.breaker = breaker;
        this.slots = slots;
        URI origin = URI.create(this.url);
        this.plain = "http".equalsIgnoreCase(origin.getScheme()) ? new PlainHttp(origin) : null;
        this.http = plain != null ? null : AccessController.doPrivileged((PrivilegedAction<HttpClient>) () ->
            HttpClient.newBuilder().connectTimeout(timeout).version(HttpClient.Version.HTTP_1_1).executor(EXECUTOR).build());
    }

    /**
     * The HttpClient's threads. Its default factory makes "innocuous" threads in a group of their own and marks them
     * daemon, which OpenSearch's SecureSM refuses (ThreadPermission modifyArbitraryThread) because the check sees the
     * java.net.http module's frames, not only this plugin's. These threads are made here, privileged, in the calling
     * thread's group: only this plugin's permissions are checked. Idle threads end after a minute.
     */
    public static final ThreadFactory THREADS = new ThreadFactory() {
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
    /** The calls' deadlines: one thread of THREADS, made on the first call; a call that ends first cancels its timer. */
    private static final ScheduledThreadPoolExecutor DEADLINES = deadlines();

    private static ScheduledThreadPoolExecutor deadlines() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, THREADS);
        timer.setRemoveOnCancelPolicy(true);
        return timer;
    }

    /** One call: its outcome, and the exchanges it started (cancelled when it ends, at its deadline too). */
    private static final class Call {
        final CompletableFuture<double[]> outcome = new CompletableFuture<>();
        /** Done once the call ended (the bodies still arriving stop being read). */
        final CompletableFuture<Void> over = new CompletableFuture<>();
        final AtomicBoolean ended = new AtomicBoolean();
        final List<CompletableFuture<?>> exchanges = new CopyOnWriteArrayList<>();
        /** the call's deadline on {@link System#nanoTime()}: its exchanges' reads end there */
        final long deadlineNanos;
        volatile ScheduledFuture<?> deadline;

        Call(Duration timeout) {
            deadlineNanos = System.nanoTime() + timeout.toNanos();
        }

        void track(CompletableFuture<?> exchange) {
            exchanges.add(exchange);
            if (over.isDone()) {
                exchange.cancel(true);
            }
        }
    }

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
        return rerank(query, texts, null);
    }

    /**
     * {@link #rerank(String, List)} with the texts' stored keywords: {@code keywords} is the request's {@code keywords}
     * object ({@link StoredKeywords#request}: its {@code words} parallel to {@code texts}; null: none is sent).
     */
    public CompletableFuture<double[]> rerank(String query, List<String> texts, Map<String, Object> keywords) {
        return slots.acquire(timeout.toMillis()).thenCompose(held -> guarded(query, texts, keywords));
    }

    /** The call with a slot held; the slot is given back before its outcome is told (so a caller sees it free). */
    private CompletableFuture<double[]> guarded(String query, List<String> texts, Map<String, Object> keywords) {
        if (!breaker.allow()) {
            slots.release();
            return CompletableFuture.failedFuture(
                new Unavailable("circuit_open", "reranker at " + url + " failed repeatedly; circuit breaker is open"));
        }
        Call call = new Call(timeout);
        call.deadline = DEADLINES.schedule(() -> end(call, null, timedOut()), timeout.toMillis(), TimeUnit.MILLISECONDS);
        try {
            call(query, texts, keywords, call).whenComplete((scores, exc) -> end(call, scores, exc == null ? null : failure(exc)));
        } catch (RuntimeException e) {
            end(call, null, failure(e));
        }
        return call.outcome;
    }

    /** The call's end, once (its answer or its deadline, whichever comes first): exchanges cancelled, the slot freed, the breaker told. */
    private void end(Call call, double[] scores, Unavailable failure) {
        if (!call.ended.compareAndSet(false, true)) {
            return;
        }
        ScheduledFuture<?> deadline = call.deadline;
        if (deadline != null) {
            deadline.cancel(false);
        }
        call.over.complete(null);
        for (CompletableFuture<?> exchange : call.exchanges) {
            exchange.cancel(true);
        }
        slots.release();
        if (failure != null) {
            breaker.recordFailure();
            call.outcome.completeExceptionally(failure);
        } else {
            breaker.recordSuccess();
            call.outcome.complete(scores);
        }
    }

    private Unavailable timedOut() {
        return new Unavailable("reranker_timeout", "no answer from " + url + " within " + timeout.toMillis() + " ms");
    }

    private CompletableFuture<double[]> call(String query, List<String> texts, Map<String, Object> keywords, Call call) {
        CompletableFuture<Void> ready = described ? CompletableFuture.completedFuture(null) : describe(call);
        return ready.thenCompose(ignored -> {
            int size = maxBatch != null ? maxBatch : Math.max(texts.size(), 1);
            List<CompletableFuture<double[]>> parts = new ArrayList<>();
            for (int i = 0; i < texts.size(); i += size) {
                int end = Math.min(i + size, texts.size());
                parts.add(post(query, texts.subList(i, end), part(keywords, i, end), call));
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

    /** {@code GET path} (body null) or {@code POST path} of a JSON body; its status, content type and body. */
    private CompletableFuture<PlainHttp.Reply> exchange(String path, byte[] body, Call call) {
        if (plain != null) {
            byte[] request = plain.request(body == null ? "GET" : "POST", path, Answers.JSON_TYPE, body);
            CompletableFuture<PlainHttp.Reply> exchange = new CompletableFuture<>();
            call.track(exchange);
            EXECUTOR.execute(() -> {
                try {
                    exchange.complete(plain.exchange(request, maxAnswerBytes, call.deadlineNanos, call.over::isDone));
                } catch (IOException | RuntimeException e) {
                    exchange.completeExceptionally(e);
                }
            });
            return exchange;
        }
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url + path)).timeout(timeout).header("accept-encoding", "identity");
        if (body == null) {
            request.GET();
        } else {
            request.header("content-type", Answers.JSON_TYPE).POST(HttpRequest.BodyPublishers.ofByteArray(body));
        }
        CompletableFuture<HttpResponse<byte[]>> exchange = AccessController.doPrivileged(
            (PrivilegedAction<CompletableFuture<HttpResponse<byte[]>>>) () -> http.sendAsync(request.build(),
                Answers.bounded(maxAnswerBytes, call.over)));
        call.track(exchange);
        return exchange.thenApply(resp -> new PlainHttp.Reply(resp.statusCode(), resp.headers().firstValue("content-type").orElse(null),
            resp.body()));
    }

    private Unavailable failure(Throwable exc) {
        Throwable cause = exc;
        while ((cause instanceof CompletionException || cause instanceof ExecutionException) && cause.getCause() != null) {
            cause = cause.getCause();
        }
        for (Throwable c = cause; c != null; c = c.getCause()) {
            if (c instanceof Unavailable u) {
                return u;
            }
            if (c instanceof Answers.BadAnswer bad) {
                return new Unavailable("reranker_bad_response", url + "/rerank: " + bad.getMessage());
            }
        }
        if (cause instanceof HttpTimeoutException || cause instanceof CancellationException) {
            return timedOut();
        }
        if (cause instanceof ConnectException || cause instanceof IOException) {
            return new Unavailable("reranker_unreachable", url + ": " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
        return new Unavailable("reranker_unreachable", url + ": " + cause);
    }

    private CompletableFuture<Void> describe(Call call) {
        return exchange("/info", null, call).handle((resp, exc) -> {
            if (exc != null) {
                Unavailable u = failure(exc);
                if (!u.reason.equals("reranker_bad_response")) {
                    throw new CompletionException(u);
                }
                // an /info too large or compressed is not read: the reranker is taken as is
            } else if (resp.status() == 200) {
                readInfo(resp);
            }
            described = true;
            return null;
        });
    }

    private void readInfo(PlainHttp.Reply resp) {
        try {
            if (!(Answers.json(resp.contentType(), resp.body()) instanceof Map<?, ?> info)) {
                return;
            }
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
        } catch (RuntimeException ignored) {
            // a reranker whose /info is no JSON object is taken as is: no name, no batch limit
        }
    }

    /** The {@code keywords} object of the texts {@code from} to {@code to} of a split call (null: none known there). */
    private static Map<String, Object> part(Map<String, Object> keywords, int from, int to) {
        if (keywords == null) {
            return null;
        }
        List<?> words = ((List<?>) keywords.get("words")).subList(from, to);
        if (words.stream().allMatch(w -> w == null)) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>(keywords);
        out.put("words", words);
        return out;
    }

    private CompletableFuture<double[]> post(String query, List<String> texts, Map<String, Object> keywords, Call call) {
        Map<String, Object> request = ordered("query", query, "texts", texts, "truncate", true, "raw_scores", false, "return_text", false);
        if (keywords != null) {
            request.put("keywords", keywords);
        }
        byte[] body = Json.write(request).getBytes(StandardCharsets.UTF_8);
        return exchange("/rerank", body, call).thenApply(resp -> scores(resp.status(), resp.contentType(), resp.body(), texts.size()));
    }

    /** The scores of one {@code /rerank} answer, in input order (the shared vectors' rules). */
    public double[] scores(int status, String contentType, byte[] body, int n) {
        if (status != 200) {
            String reason = status == 429 ? "reranker_overloaded" : status == 424 ? "reranker_inference_failed" : "reranker_error";
            String text = new String(body, 0, Math.min(body.length, 800), StandardCharsets.UTF_8);
            throw new Unavailable(reason, url + "/rerank answered HTTP " + status + ": " + text.substring(0, Math.min(200, text.length())));
        }
        try {
            return Answers.rerankScores(Answers.json(contentType, body), n);
        } catch (Answers.BadAnswer e) {
            throw new Unavailable("reranker_bad_response", url + "/rerank: " + e.getMessage());
        }
    }

    public static Map<String, Object> parseMap(byte[] body) throws IOException {
        return Json.readMap(body);
    }

    public static Map<String, Object> ordered(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            out.put((String) kv[i], kv[i + 1]);
        }
        return out;
    }
}
