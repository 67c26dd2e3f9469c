/*
 * jingpai: a reranker's answers read within bounds and validated, as the gateway's jingpai/plugin/answers.py does it:
 * the same rules and the same messages (the shared vectors tests/vectors/rerank_answers.json pin both sides).
 */
package io.jingpai.core;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.math.BigInteger;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;


/** What a reranker answered: read up to a bound (no compression), its JSON taken only as application/json, its scores checked. */
public final class Answers {
    /** The largest answer read by default (the gateway's max_answer_bytes). */
    public static final long DEFAULT_MAX_BYTES = 1L << 20;
    public static final String JSON_TYPE = "application/json";
    /** The deepest nesting of an answer read (a ranking nests 2: a list of objects). */
    public static final int MAX_DEPTH = 32;

    private Answers() {}

    /** An answer that is not what was asked for; the message says what (the gateway's BadAnswer). */
    public static final class BadAnswer extends RuntimeException {
        BadAnswer(String message) {
            super(message, null, false, false);
        }
    }

    public static String tooLarge(long maxBytes) {
        return "the answer is larger than " + maxBytes + " bytes (max_answer_bytes)";
    }

    /**
     * A body handler that reads at most {@code maxBytes} (a larger Content-Length is refused before the body is read, a body
     * that grows past the bound is cut off there), refuses a compressed answer, and stops reading once {@code abandon} is done
     * (the call's deadline passed).
     */
    public static HttpResponse.BodyHandler<byte[]> bounded(long maxBytes, CompletableFuture<?> abandon) {
        return info -> {
            String encoding = info.headers().firstValue("content-encoding").orElse("identity").trim().toLowerCase(Locale.ROOT);
            if (!encoding.isEmpty() && !encoding.equals("identity")) {
                return new Bounded(maxBytes, abandon, new BadAnswer("the answer is compressed (" + encoding + "); identity was asked for"));
            }
            OptionalLong declared = OptionalLong.empty();
            try {
                declared = info.headers().firstValueAsLong("content-length");
            } catch (NumberFormatException ignored) {
                // not a number: the body's own length decides
            }
            if (declared.isPresent() && declared.getAsLong() > maxBytes) {
                return new Bounded(maxBytes, abandon, new BadAnswer(tooLarge(maxBytes)));
            }
            return new Bounded(maxBytes, abandon, null);
        };
    }

    /** Collects a body up to a bound; failed from the start when {@code refused} is given. */
    static final class Bounded implements HttpResponse.BodySubscriber<byte[]> {
        private final CompletableFuture<byte[]> body = new CompletableFuture<>();
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();
        private final long maxBytes;
        private final CompletableFuture<?> abandon;
        private final RuntimeException refused;
        private Flow.Subscription subscription;

        Bounded(long maxBytes, CompletableFuture<?> abandon, RuntimeException refused) {
            this.maxBytes = maxBytes;
            this.abandon = abandon;
            this.refused = refused;
        }

        @Override
        public CompletionStage<byte[]> getBody() {
            return body;
        }

        @Override
        public void onSubscribe(Flow.Subscription s) {
            subscription = s;
            if (refused != null) {
                s.cancel();
                body.completeExceptionally(refused);
            } else {
                s.request(Long.MAX_VALUE);
            }
        }

        @Override
        public void onNext(List<ByteBuffer> buffers) {
            if (body.isDone()) {
                return;
            }
            if (abandon.isDone()) {
                subscription.cancel();
                body.completeExceptionally(new IOException("the call ended before its answer"));
                return;
            }
            for (ByteBuffer buffer : buffers) {
                if (out.size() + (long) buffer.remaining() > maxBytes) {
                    subscription.cancel();
                    body.completeExceptionally(new BadAnswer(tooLarge(maxBytes)));
                    return;
                }
                byte[] bytes = new byte[buffer.remaining()];
                buffer.get(bytes);
                out.write(bytes, 0, bytes.length);
            }
        }

        @Override
        public void onError(Throwable throwable) {
            body.completeExceptionally(throwable);
        }

        @Override
        public void onComplete() {
            body.complete(out.toByteArray());
        }
    }

    /** The answer's JSON value (a List, a Map, a String, a Number, a Boolean or null). */
    public static Object json(String contentType, byte[] body) {
        String mime = contentType == null ? "" : contentType.split(";", 2)[0].trim().toLowerCase(Locale.ROOT);
        if (!mime.equals(JSON_TYPE)) {
            throw new BadAnswer("the answer's content type is " + (mime.isEmpty() ? "(none)" : mime) + ", not " + JSON_TYPE);
        }
        try {
            return Json.read(body, MAX_DEPTH);
        } catch (Json.TooDeep e) {
            throw new BadAnswer(tooDeep());
        } catch (IOException | RuntimeException e) {
            throw new BadAnswer("the answer is not readable JSON");
        }
    }

    public static String tooDeep() {
        return "the answer nests deeper than " + MAX_DEPTH + " levels";
    }

    private static boolean integer(Object v) {
        return v instanceof Integer || v instanceof Long || v instanceof BigInteger || v instanceof Short || v instanceof Byte;
    }

    /** The scores of {@code n} texts in input order from a TEI /rerank answer ([{index, score}, ...]). */
    public static double[] rerankScores(Object data, int n) {
        if (!(data instanceof List<?> items)) {
            throw new BadAnswer("the answer is not a list of {index, score} items");
        }
        if (items.size() != n) {
            throw new BadAnswer("expected one score per text (" + n + "), got " + items.size() + " items");
        }
        double[] scores = new double[n];
        boolean[] seen = new boolean[n];
        for (int k = 0; k < n; k++) {
            if (!(items.get(k) instanceof Map<?, ?> item)) {
                throw new BadAnswer("item " + k + " is not an {index, score} object");
            }
            Object index = item.get("index");
            Object score = item.get("score");
            if (!integer(index)) {
                throw new BadAnswer("item " + k + ": index is not an integer");
            }
            BigInteger i = new BigInteger(index.toString());
            if (i.signum() < 0 || i.compareTo(BigInteger.valueOf(n)) >= 0) {
                throw new BadAnswer("item " + k + ": index " + i + " is out of range 0.." + (n - 1));
            }
            int at = i.intValue();
            if (seen[at]) {
                throw new BadAnswer("item " + k + ": index " + at + " is repeated");
            }
            if (!(score instanceof Number number)) {
                throw new BadAnswer("item " + k + ": score is not a number");
            }
            if (!Double.isFinite(number.doubleValue())) {
                throw new BadAnswer("item " + k + ": score is not a finite number");
            }
            seen[at] = true;
            scores[at] = number.doubleValue();
        }
        return scores;
    }
}
