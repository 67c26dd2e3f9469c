/*
 * jingpai: HTTP/1.1 over plain sockets, RerankClient's transport for an http:// reranker. The JDK's HttpClient hands
 * every exchange between its selector thread and its executor several times and writes a request's head and body
 * apart; on a loaded node those hops cost more than the exchange itself (measured against a loopback `jingpai serve`,
 * docs/elasticsearch-plugin.md). Here one thread of the caller's writes the request in one write and reads the answer
 * blocking, each read bounded by the time left to the call's deadline, on a kept-alive connection of a small pool.
 * The answer's rules are Answers' (no compression, at most max_answer_bytes, by Content-Length or chunked).
 */
package io.jingpai.core;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.security.AccessController;
import java.security.PrivilegedExceptionAction;
import java.util.Locale;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.function.BooleanSupplier;

/** Exchanges with one http:// origin; each blocks its calling thread until the answer is read or the deadline passes. */
final class PlainHttp {
    /** What came back: the status, the Content-Type (or null) and the whole body. */
    record Reply(int status, String contentType, byte[] body) {}

    /** the most idle connections kept (the node's rerank slots bound the calls in flight) */
    static final int MAX_IDLE = 16;
    /** an idle connection older than this is closed, not reused: servers close theirs (uvicorn after 5 s) */
    static final long MAX_IDLE_NANOS = 4_000_000_000L;
    /** the longest status line or header line read */
    static final int MAX_LINE = 16 * 1024;

    private final String host;
    private final int port;
    private final String hostHeader;
    private final ConcurrentLinkedDeque<Connection> idle = new ConcurrentLinkedDeque<>();

    PlainHttp(URI origin) {
        host = origin.getHost();
        port = origin.getPort() < 0 ? 80 : origin.getPort();
        hostHeader = origin.getPort() < 0 ? host : host + ":" + port;
    }

    private static final class Connection {
        final Socket socket;
        final InputStream in;
        final OutputStream out;
        long idleSince;

        Connection(Socket socket) throws IOException {
            this.socket = socket;
            this.in = new BufferedInputStream(socket.getInputStream(), 16 * 1024);
            this.out = socket.getOutputStream();
        }

        void close() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing: nothing left to do with it
            }
        }
    }

    /**
     * One exchange of {@code request} (from {@link #request}), the answer read up to {@code maxBytes}, by {@code deadline}
     * ({@link System#nanoTime()}); {@code abandoned} says the call ended (its answer is no longer read). A kept-alive
     * connection the server closed meanwhile is tried once more on a new one, if nothing of an answer came on it.
     *
     * @throws HttpTimeoutException past the deadline
     * @throws Answers.BadAnswer an answer compressed or larger than {@code maxBytes}
     * @throws IOException the connection failed
     */
    Reply exchange(byte[] request, long maxBytes, long deadline, BooleanSupplier abandoned) throws IOException {
        while (true) {
            Connection reused = take();
            Connection c = reused != null ? reused : connect(deadline);
            boolean answering = false;
            try {
                c.out.write(request);
                c.out.flush();
                c.socket.setSoTimeout(remainingMs(deadline));
                int first = c.in.read();
                if (first < 0) {
                    throw new EOFException("the server closed the connection without an answer");
                }
                answering = true;
                return read(c, first, maxBytes, deadline, abandoned);
            } catch (SocketTimeoutException e) {
                c.close();
                throw new HttpTimeoutException("no answer within the deadline");
            } catch (IOException | RuntimeException e) {
                c.close();
                if (reused == null || answering || e instanceof HttpTimeoutException) {
                    throw e;
                }
                // a kept-alive connection the server had closed: once more, on a new one
            }
        }
    }

    /** The bytes of a request: its line, Host, identity encoding and, with a body, its type and length; one write. */
    byte[] request(String method, String path, String contentType, byte[] body) {
        StringBuilder head = new StringBuilder(200).append(method).append(' ').append(path).append(" HTTP/1.1\r\nHost: ").append(hostHeader)
            .append("\r\nAccept-Encoding: identity\r\nUser-Agent: jingpai\r\n");
        if (body != null) {
            head.append("Content-Type: ").append(contentType).append("\r\nContent-Length: ").append(body.length).append("\r\n");
        }
        byte[] h = head.append("\r\n").toString().getBytes(StandardCharsets.US_ASCII);
        if (body == null) {
            return h;
        }
        byte[] all = new byte[h.length + body.length];
        System.arraycopy(h, 0, all, 0, h.length);
        System.arraycopy(body, 0, all, h.length, body.length);
        return all;
    }

    private Connection take() {
        for (Connection c = idle.pollFirst(); c != null; c = idle.pollFirst()) {
            if (System.nanoTime() - c.idleSince < MAX_IDLE_NANOS && !c.socket.isClosed()) {
                return c;
            }
            c.close();
        }
        return null;
    }

    private void giveBack(Connection c) {
        c.idleSince = System.nanoTime();
        idle.addFirst(c);
        while (idle.size() > MAX_IDLE) {
            Connection old = idle.pollLast();
            if (old == null) {
                break;
            }
            old.close();
        }
    }

    private Connection connect(long deadline) throws IOException {
        try {
            return AccessController.doPrivileged((PrivilegedExceptionAction<Connection>) () -> {
                Socket socket = new Socket();
                try {
                    socket.setTcpNoDelay(true);
                    socket.connect(new InetSocketAddress(host, port), remainingMs(deadline));
                    return new Connection(socket);
                } catch (SocketTimeoutException e) {
                    socket.close();
                    throw new HttpTimeoutException("no connection within the deadline");
                } catch (IOException e) {
                    socket.close();
                    throw e;
                }
            });
        } catch (java.security.PrivilegedActionException e) {
            throw (IOException) e.getException();
        }
    }

    private static int remainingMs(long deadline) throws HttpTimeoutException {
        long left = (deadline - System.nanoTime()) / 1_000_000;
        if (left <= 0) {
            throw new HttpTimeoutException("no answer within the deadline");
        }
        return (int) Math.min(left, Integer.MAX_VALUE);
    }

    /** The answer whose first byte is {@code first}: status line, headers, body; the connection kept if it may be. */
    private Reply read(Connection c, int first, long maxBytes, long deadline, BooleanSupplier abandoned) throws IOException {
        String status = line(c.in, first, deadline);
        String[] parts = status.split(" ", 3);
        if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
            throw new IOException("not an HTTP/1.x answer: " + status.substring(0, Math.min(80, status.length())));
        }
        int code;
        try {
            code = Integer.parseInt(parts[1]);
        } catch (NumberFormatException e) {
            throw new IOException("not an HTTP status: " + parts[1]);
        }
        String contentType = null;
        String encoding = "identity";
        long length = -1;
        boolean chunked = false;
        boolean keep = !parts[0].equals("HTTP/1.0");
        for (String h = line(c.in, c.in.read(), deadline); !h.isEmpty(); h = line(c.in, c.in.read(), deadline)) {
            int colon = h.indexOf(':');
            if (colon <= 0) {
                continue;
            }
            String name = h.substring(0, colon).trim().toLowerCase(Locale.ROOT);
            String value = h.substring(colon + 1).trim();
            switch (name) {
                case "content-type" -> contentType = value;
                case "content-encoding" -> encoding = value.toLowerCase(Locale.ROOT);
                case "content-length" -> {
                    try {
                        length = Long.parseLong(value);
                    } catch (NumberFormatException ignored) {
                        // not a number: the body's own length decides
                    }
                }
                case "transfer-encoding" -> chunked = value.toLowerCase(Locale.ROOT).contains("chunked");
                case "connection" -> keep = keep && !value.toLowerCase(Locale.ROOT).contains("close");
                default -> { }
            }
        }
        if (!encoding.isEmpty() && !encoding.equals("identity")) {
            throw new Answers.BadAnswer("the answer is compressed (" + encoding + "); identity was asked for");
        }
        if (!chunked && length > maxBytes) {
            throw new Answers.BadAnswer(Answers.tooLarge(maxBytes));
        }
        ByteArrayOutputStream body = new ByteArrayOutputStream(length > 0 ? (int) length : 1024);
        if (chunked) {
            for (long size = chunkSize(c.in, deadline); size > 0; size = chunkSize(c.in, deadline)) {
                copy(c, size, body, maxBytes, deadline, abandoned);
                line(c.in, c.in.read(), deadline); // the chunk's CRLF
            }
            for (String trailer = line(c.in, c.in.read(), deadline); !trailer.isEmpty(); trailer = line(c.in, c.in.read(), deadline)) {
                // trailers are not read
            }
        } else if (length >= 0) {
            copy(c, length, body, maxBytes, deadline, abandoned);
        } else {
            keep = false;
            copy(c, Long.MAX_VALUE, body, maxBytes, deadline, abandoned);
        }
        if (keep) {
            giveBack(c);
        } else {
            c.close();
        }
        return new Reply(code, contentType, body.toByteArray());
    }

    /** {@code n} bytes (to the end of the stream for Long.MAX_VALUE) into {@code body}, at most {@code maxBytes} in all. */
    private static void copy(Connection c, long n, ByteArrayOutputStream body, long maxBytes, long deadline, BooleanSupplier abandoned)
        throws IOException {
        byte[] buffer = new byte[8192];
        long left = n;
        while (left > 0) {
            if (abandoned.getAsBoolean()) {
                throw new IOException("the call ended before its answer");
            }
            c.socket.setSoTimeout(remainingMs(deadline));
            int got = c.in.read(buffer, 0, (int) Math.min(buffer.length, left));
            if (got < 0) {
                if (n == Long.MAX_VALUE) {
                    return;
                }
                throw new EOFException("the answer ended " + left + " bytes early");
            }
            if (body.size() + (long) got > maxBytes) {
                throw new Answers.BadAnswer(Answers.tooLarge(maxBytes));
            }
            body.write(buffer, 0, got);
            left -= got;
        }
    }

    private static long chunkSize(InputStream in, long deadline) throws IOException {
        String size = line(in, in.read(), deadline);
        int semi = size.indexOf(';');
        try {
            return Long.parseLong((semi >= 0 ? size.substring(0, semi) : size).trim(), 16);
        } catch (NumberFormatException e) {
            throw new IOException("not a chunk size: " + size.substring(0, Math.min(40, size.length())));
        }
    }

    /** One line (without its CRLF) starting with the byte {@code first} already read; past the deadline: a timeout. */
    private static String line(InputStream in, int first, long deadline) throws IOException {
        StringBuilder out = new StringBuilder(64);
        for (int b = first; ; b = in.read()) {
            if (b < 0) {
                throw new EOFException("the answer ended in its head");
            }
            if (b == '\n') {
                break;
            }
            if (b != '\r') {
                out.append((char) b);
            }
            if (out.length() > MAX_LINE) {
                throw new IOException("an answer line longer than " + MAX_LINE + " bytes");
            }
            if (System.nanoTime() - deadline > 0) {
                throw new HttpTimeoutException("no answer within the deadline");
            }
        }
        return out.toString();
    }
}
