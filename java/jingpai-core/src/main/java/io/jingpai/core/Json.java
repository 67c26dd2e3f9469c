/*
 * jingpai: the little JSON both engine plugins need without an engine: a reranker's answers (read strictly, as
 * Python's json module reads them less NaN / Infinity, which the gateway refuses too), the /rerank request body, and
 * the shared test vectors. The engines' own XContent differs between OpenSearch and Elasticsearch; this does not.
 */
package io.jingpai.core;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A strict RFC 8259 reader (objects keep their order, a repeated key keeps its last value) and a writer. */
public final class Json {
    private Json() {}

    /** The nesting a value went past ({@link #read(byte[], int)}'s bound). */
    public static final class TooDeep extends IOException {
        TooDeep(int maxDepth) {
            super("nested deeper than " + maxDepth + " levels", null);
        }
    }

    /** The value of {@code body} (UTF-8): a Map, a List, a String, a Long / BigInteger / Double, a Boolean or null. */
    public static Object read(byte[] body) throws IOException {
        return read(body, Integer.MAX_VALUE);
    }

    /** As {@link #read(byte[])}, refusing ({@link TooDeep}) arrays and objects nested deeper than {@code maxDepth}. */
    public static Object read(byte[] body, int maxDepth) throws IOException {
        Reader r = new Reader(new String(body, StandardCharsets.UTF_8), maxDepth);
        r.space();
        Object value = r.value(0);
        r.space();
        if (r.at < r.text.length()) {
            throw r.error("more after the value");
        }
        return value;
    }

    /** {@link #read(byte[])} of a JSON object. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> readMap(byte[] body) throws IOException {
        Object value = read(body);
        if (!(value instanceof Map<?, ?>)) {
            throw new IOException("expected a JSON object");
        }
        return (Map<String, Object>) value;
    }

    private static final class Reader {
        final String text;
        final int maxDepth;
        int at;

        Reader(String text, int maxDepth) {
            this.text = text;
            this.maxDepth = maxDepth;
        }

        IOException error(String what) {
            return new IOException(what + " at character " + at);
        }

        void space() {
            while (at < text.length()) {
                char c = text.charAt(at);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                at++;
            }
        }

        Object value(int depth) throws IOException {
            if (at >= text.length()) {
                throw error("no value");
            }
            char c = text.charAt(at);
            switch (c) {
                case '{':
                case '[':
                    if (depth + 1 > maxDepth) {
                        throw new TooDeep(maxDepth);
                    }
                    return c == '{' ? object(depth + 1) : array(depth + 1);
                case '"':
                    return string();
                case 't':
                    return word("true", Boolean.TRUE);
                case 'f':
                    return word("false", Boolean.FALSE);
                case 'n':
                    return word("null", null);
                default:
                    return number();
            }
        }

        Object word(String word, Object value) throws IOException {
            if (!text.startsWith(word, at)) {
                throw error("unexpected token");
            }
            at += word.length();
            return value;
        }

        Map<String, Object> object(int depth) throws IOException {
            Map<String, Object> out = new LinkedHashMap<>();
            at++;
            space();
            if (at < text.length() && text.charAt(at) == '}') {
                at++;
                return out;
            }
            while (true) {
                space();
                if (at >= text.length() || text.charAt(at) != '"') {
                    throw error("expected a key");
                }
                String key = string();
                space();
                expect(':');
                space();
                out.put(key, value(depth));
                space();
                if (at < text.length() && text.charAt(at) == ',') {
                    at++;
                    continue;
                }
                expect('}');
                return out;
            }
        }

        List<Object> array(int depth) throws IOException {
            List<Object> out = new ArrayList<>();
            at++;
            space();
            if (at < text.length() && text.charAt(at) == ']') {
                at++;
                return out;
            }
            while (true) {
                space();
                out.add(value(depth));
                space();
                if (at < text.length() && text.charAt(at) == ',') {
                    at++;
                    continue;
                }
                expect(']');
                return out;
            }
        }

        void expect(char c) throws IOException {
            if (at >= text.length() || text.charAt(at) != c) {
                throw error("expected '" + c + "'");
            }
            at++;
        }

        String string() throws IOException {
            StringBuilder out = new StringBuilder();
            at++;
            while (true) {
                if (at >= text.length()) {
                    throw error("unterminated string");
                }
                char c = text.charAt(at++);
                if (c == '"') {
                    return out.toString();
                }
                if (c < 0x20) {
                    throw error("control character in a string");
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                if (at >= text.length()) {
                    throw error("unterminated escape");
                }
                char e = text.charAt(at++);
                switch (e) {
                    case '"', '\\', '/' -> out.append(e);
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'u' -> {
                        if (at + 4 > text.length()) {
                            throw error("short \\u escape");
                        }
                        try {
                            out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                        } catch (NumberFormatException ex) {
                            throw error("bad \\u escape");
                        }
                        at += 4;
                    }
                    default -> throw error("bad escape");
                }
            }
        }

        Object number() throws IOException {
            int start = at;
            if (at < text.length() && text.charAt(at) == '-') {
                at++;
            }
            int digits = at;
            while (at < text.length() && Character.isDigit(text.charAt(at)) && text.charAt(at) < 128) {
                at++;
            }
            if (at == digits || (text.charAt(digits) == '0' && at - digits > 1)) {
                throw error("not a number");
            }
            boolean integer = true;
            if (at < text.length() && text.charAt(at) == '.') {
                integer = false;
                at++;
                int frac = at;
                while (at < text.length() && text.charAt(at) >= '0' && text.charAt(at) <= '9') {
                    at++;
                }
                if (at == frac) {
                    throw error("no digits after the point");
                }
            }
            if (at < text.length() && (text.charAt(at) == 'e' || text.charAt(at) == 'E')) {
                integer = false;
                at++;
                if (at < text.length() && (text.charAt(at) == '+' || text.charAt(at) == '-')) {
                    at++;
                }
                int exp = at;
                while (at < text.length() && text.charAt(at) >= '0' && text.charAt(at) <= '9') {
                    at++;
                }
                if (at == exp) {
                    throw error("no digits in the exponent");
                }
            }
            String literal = text.substring(start, at);
            if (!integer) {
                return Double.parseDouble(literal); // 1e999 reads as Infinity, as Python's float() does
            }
            BigInteger big = new BigInteger(literal);
            return big.bitLength() < 64 ? (Object) big.longValue() : big;
        }
    }

    /** {@code value} as JSON text: Maps, Lists, Strings, Numbers, Booleans and null. */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    /** {@link #write(Object)} with every character past ASCII escaped (backslash-u and four hex digits): an HTTP header value. */
    public static String writeAscii(Object value) {
        String text = write(value);
        StringBuilder out = new StringBuilder(text.length());
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c < 0x80) {
                out.append(c);
            } else {
                out.append(String.format("\\u%04x", (int) c));
            }
        }
        return out.toString();
    }

    private static void write(Object value, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof String s) {
            quote(s, out);
        } else if (value instanceof Boolean || value instanceof Integer || value instanceof Long || value instanceof BigInteger) {
            out.append(value);
        } else if (value instanceof Number n) {
            double d = n.doubleValue();
            if (!Double.isFinite(d)) {
                throw new IllegalArgumentException("JSON has no " + d);
            }
            out.append(d);
        } else if (value instanceof Map<?, ?> map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : map.entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                quote(String.valueOf(e.getKey()), out);
                out.append(':');
                write(e.getValue(), out);
            }
            out.append('}');
        } else if (value instanceof Iterable<?> list) {
            out.append('[');
            boolean first = true;
            for (Object v : list) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(v, out);
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("no JSON form for " + value.getClass().getName());
        }
    }

    private static void quote(String s, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }
}
