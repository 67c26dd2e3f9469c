package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * PlainHttp against a loopback server written on a ServerSocket (so the test sees each connection): a kept-alive
 * connection is reused, one the server closed after its answer is tried once more on a new one, a chunked answer is
 * read whole, and an answer that never comes ends at the deadline.
 */
class PlainHttpTest {
    private static final String ANSWER = "[{\"index\":0,\"score\":0.5}]";

    /** How the server answers each request on a connection. */
    enum Style { KEEP_ALIVE, ONE_PER_CONNECTION, CHUNKED, SILENT }

    private ServerSocket server;
    private final AtomicInteger connections = new AtomicInteger();

    private String start(Style style) throws IOException {
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread acceptor = new Thread(() -> {
            while (!server.isClosed()) {
                try {
                    Socket s = server.accept();
                    connections.incrementAndGet();
                    Thread t = new Thread(() -> serve(s, style));
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return;
                }
            }
        });
        acceptor.setDaemon(true);
        acceptor.start();
        return "http://127.0.0.1:" + server.getLocalPort();
    }

    private static void serve(Socket s, Style style) {
        try (s; BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII))) {
            OutputStream out = s.getOutputStream();
            while (true) {
                int length = 0;
                String line = in.readLine();
                if (line == null) {
                    return;
                }
                for (String h = in.readLine(); h != null && !h.isEmpty(); h = in.readLine()) {
                    if (h.toLowerCase().startsWith("content-length:")) {
                        length = Integer.parseInt(h.substring(15).trim());
                    }
                }
                in.skip(length);
                if (style == Style.SILENT) {
                    Thread.sleep(5_000);
                    return;
                }
                String head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
                String answer = style == Style.CHUNKED
                    ? head + "Transfer-Encoding: chunked\r\n\r\n5\r\n[{\"in\r\n" + Integer.toHexString(ANSWER.length() - 5) + "\r\n" + ANSWER.substring(5)
                        + "\r\n0\r\n\r\n"
                    : head + "Content-Length: " + ANSWER.length() + "\r\n\r\n" + ANSWER;
                out.write(answer.getBytes(StandardCharsets.US_ASCII));
                out.flush();
                if (style == Style.ONE_PER_CONNECTION) {
                    return; // closed after the answer, without saying so: the client's pooled connection is stale
                }
            }
        } catch (IOException | InterruptedException e) {
            // the client hung up or the test ended
        }
    }

    @AfterEach
    void stop() throws IOException {
        server.close();
    }

    private static PlainHttp.Reply post(PlainHttp http, long timeoutMs) throws IOException {
        byte[] request = http.request("POST", "/rerank", Answers.JSON_TYPE, "{\"query\":\"q\",\"texts\":[\"t\"]}".getBytes(StandardCharsets.UTF_8));
        return http.exchange(request, Answers.DEFAULT_MAX_BYTES, System.nanoTime() + timeoutMs * 1_000_000, () -> false);
    }

    @Test
    void aKeptAliveConnectionIsReused() throws IOException {
        PlainHttp http = new PlainHttp(URI.create(start(Style.KEEP_ALIVE)));
        for (int i = 0; i < 3; i++) {
            PlainHttp.Reply reply = post(http, 5_000);
            assertEquals(200, reply.status());
            assertEquals(ANSWER, new String(reply.body(), StandardCharsets.UTF_8));
        }
        assertEquals(1, connections.get());
    }

    @Test
    void aConnectionTheServerClosedIsTriedOnceMoreOnANewOne() throws Exception {
        PlainHttp http = new PlainHttp(URI.create(start(Style.ONE_PER_CONNECTION)));
        assertEquals(ANSWER, new String(post(http, 5_000).body(), StandardCharsets.UTF_8));
        Thread.sleep(100); // the server has closed the first connection by now
        assertEquals(ANSWER, new String(post(http, 5_000).body(), StandardCharsets.UTF_8));
        assertEquals(2, connections.get());
    }

    @Test
    void aChunkedAnswerIsReadWhole() throws IOException {
        PlainHttp http = new PlainHttp(URI.create(start(Style.CHUNKED)));
        PlainHttp.Reply reply = post(http, 5_000);
        assertEquals("application/json", reply.contentType());
        assertEquals(ANSWER, new String(reply.body(), StandardCharsets.UTF_8));
        assertEquals(ANSWER, new String(post(http, 5_000).body(), StandardCharsets.UTF_8)); // and the connection stays usable
        assertEquals(1, connections.get());
    }

    @Test
    void anAnswerThatNeverComesEndsAtTheDeadline() throws IOException {
        PlainHttp http = new PlainHttp(URI.create(start(Style.SILENT)));
        long started = System.nanoTime();
        assertThrows(HttpTimeoutException.class, () -> post(http, 300));
        long tookMs = (System.nanoTime() - started) / 1_000_000;
        assertTrue(tookMs >= 250 && tookMs < 2_000, "took " + tookMs + " ms");
    }
}
