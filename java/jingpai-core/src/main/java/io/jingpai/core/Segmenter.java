/*
 * jingpai: the gateway's segmenter (jingpai/keyword_dict/segment.py: rjieba with HMM off, jieba's dictionary plus
 * a jingpai dictionary's words) in Java: jieba's DAG over the dictionary and the most probable route, no HMM.
 */
package io.jingpai.core;

import java.io.BufferedReader;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Word segmentation like {@code Segmenter.cut} (rjieba, HMM off); whitespace tokens are dropped.
 *
 * <p>The base dictionary (jieba's, ~350k words: ~100 MB of heap with its prefixes) is shared: every segmenter of the
 * same base content uses one {@link Base}, kept in a small per-node cache ({@link #shared}), and holds only the words
 * a jingpai dictionary adds. A node with one pipeline per index would otherwise hold one copy per pipeline, and a
 * 512 MB heap runs out at the fourth.
 */
public final class Segmenter {
    /** An immutable base dictionary: word → frequency, a prefix of a word that is no word itself → 0 (jieba's FREQ). */
    public static final class Base {
        final Map<String, Long> freq;
        final long total;

        Base(Map<String, Long> words, long total) {
            Map<String, Long> f = new HashMap<>(words.size() * 2);
            for (Map.Entry<String, Long> e : words.entrySet()) {
                put(f, e.getKey(), e.getValue());
            }
            this.freq = f;
            this.total = total;
        }
    }

    /** the bases in use, by content key; a few at most (one per distinct base dictionary) */
    private static final Map<String, Base> CACHE = new LinkedHashMap<>(8, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Base> eldest) {
            return size() > 4;
        }
    };

    private final Base base;
    /** the words added on top of the base (and their prefixes), which win over the base's entries */
    private final Map<String, Long> extra = new HashMap<>();
    private long total;

    /**
     * @param base jieba's dictionary (word → frequency), or the part of it the texts can reach
     * @param baseTotal the whole base dictionary's total frequency
     */
    public Segmenter(Map<String, Long> base, long baseTotal) {
        this(shared(base, baseTotal));
    }

    public Segmenter(Base base) {
        this.base = base;
        this.total = base.total;
    }

    /** The cached {@link Base} of this content, made once per node. */
    public static Base shared(Map<String, ? extends Number> words, long baseTotal) {
        String key = key(words, baseTotal);
        synchronized (CACHE) {
            Base found = CACHE.get(key);
            if (found != null) {
                return found;
            }
        }
        Map<String, Long> copy = new HashMap<>(words.size() * 2);
        words.forEach((w, f) -> copy.put(w, f.longValue()));
        Base made = new Base(copy, baseTotal);
        synchronized (CACHE) {
            return CACHE.computeIfAbsent(key, k -> made);
        }
    }

    /** A content key of a base dictionary: size, total and two independent order-free sums of its entries' hashes. */
    static String key(Map<String, ? extends Number> words, long total) {
        long a = 0;
        long b = 0;
        for (Map.Entry<String, ? extends Number> e : words.entrySet()) {
            long h = e.getKey().hashCode() * 0x9E3779B97F4A7C15L + e.getValue().longValue();
            a += mix(h);
            b += mix(h ^ 0xC2B2AE3D27D4EB4FL) * 31 + e.getKey().length();
        }
        return words.size() + ":" + total + ":" + Long.toHexString(a) + ":" + Long.toHexString(b);
    }

    private static long mix(long z) {
        z = (z ^ (z >>> 33)) * 0xFF51AFD7ED558CCDL;
        z = (z ^ (z >>> 33)) * 0xC4CEB9FE1A85EC53L;
        return z ^ (z >>> 33);
    }

    /** A segmenter of a jieba dictionary file ({@code word freq [tag]} lines). */
    public static Segmenter read(BufferedReader reader) throws IOException {
        Map<String, Long> base = new HashMap<>();
        long total = 0;
        for (String line = reader.readLine(); line != null; line = reader.readLine()) {
            String[] parts = line.trim().split(" ");
            if (parts.length >= 2 && !parts[0].isEmpty()) {
                long f = Long.parseLong(parts[1]);
                base.put(parts[0], f);
                total += f;
            }
        }
        return new Segmenter(base, total);
    }

    private static void put(Map<String, Long> freq, String word, long f) {
        freq.put(word, f);
        int[] cps = word.codePoints().toArray();
        for (int i = 1; i < cps.length; i++) {
            freq.putIfAbsent(new String(cps, 0, i), 0L);
        }
    }

    private Long lookup(String word) {
        Long f = extra.get(word);
        return f != null ? f : base.freq.get(word);
    }

    /** Adds a jingpai dictionary word unless the dictionary already has it (as Segmenter does with rjieba). */
    public void addWord(String word, long f) {
        Long known = lookup(word);
        if (known != null && known > 0) {
            return;
        }
        extra.put(word, f);
        int[] cps = word.codePoints().toArray();
        for (int i = 1; i < cps.length; i++) {
            String prefix = new String(cps, 0, i);
            if (lookup(prefix) == null) {
                extra.put(prefix, 0L);
            }
        }
        total += f;
    }

    private static boolean isCjk(int c) {
        return (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xF900 && c <= 0xFAFF)
            || (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F)
            || (c >= 0x2B820 && c <= 0x2CEAF) || (c >= 0x2CEB0 && c <= 0x2EBEF) || (c >= 0x2F800 && c <= 0x2FA1F);
    }

    private static boolean isAsciiAlnum(int c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    }

    private static boolean isHan(int c) {
        return isCjk(c) || isAsciiAlnum(c) || c == '+' || c == '#' || c == '&' || c == '.' || c == '_' || c == '%' || c == '-';
    }

    /** Tokens of {@code text} without whitespace-only tokens. */
    public List<String> cut(String text) {
        List<String> out = new ArrayList<>();
        int[] cps = text.codePoints().toArray();
        int i = 0;
        while (i < cps.length) {
            int j = i;
            if (isHan(cps[i])) {
                while (j < cps.length && isHan(cps[j])) {
                    j++;
                }
                cutBlock(cps, i, j, out);
            } else {
                // outside the han blocks every character is its own token (whitespace is dropped)
                j = i + 1;
                if (!Character.isWhitespace(cps[i]) && !Character.isSpaceChar(cps[i])) {
                    out.add(new String(cps, i, 1));
                }
            }
            i = j;
        }
        return out;
    }

    private void cutBlock(int[] cps, int start, int end, List<String> out) {
        int n = end - start;
        double logTotal = Math.log((double) total);
        double[] routeScore = new double[n + 1];
        int[] routeEnd = new int[n + 1];
        for (int k = n - 1; k >= 0; k--) {
            double best = Double.NEGATIVE_INFINITY;
            int bestEnd = -1;
            boolean any = false;
            for (int x = k; x < n; x++) {
                String frag = new String(cps, start + k, x - k + 1);
                Long f = lookup(frag);
                if (f == null) {
                    break;
                }
                if (f > 0) {
                    any = true;
                    double score = Math.log((double) f) - logTotal + routeScore[x + 1];
                    if (score > best || (score == best && x > bestEnd)) {
                        best = score;
                        bestEnd = x;
                    }
                }
            }
            if (!any) {
                String single = new String(cps, start + k, 1);
                Long f = lookup(single);
                best = Math.log((double) (f != null && f > 0 ? f : 1L)) - logTotal + routeScore[k + 1];
                bestEnd = k;
            }
            routeScore[k] = best;
            routeEnd[k] = bestEnd;
        }
        StringBuilder buf = new StringBuilder();
        int x = 0;
        while (x < n) {
            int y = routeEnd[x] + 1;
            if (y - x == 1 && isAsciiAlnum(cps[start + x])) {
                buf.appendCodePoint(cps[start + x]);
            } else {
                if (buf.length() > 0) {
                    out.add(buf.toString());
                    buf.setLength(0);
                }
                out.add(new String(cps, start + x, y - x));
            }
            x = y;
        }
        if (buf.length() > 0) {
            out.add(buf.toString());
        }
    }
}
