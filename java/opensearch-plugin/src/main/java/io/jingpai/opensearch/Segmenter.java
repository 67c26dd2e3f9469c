/*
 * jingpai: the gateway's segmenter (jingpai/keyword_dict/segment.py: rjieba with HMM off, jieba's dictionary plus
 * a jingpai dictionary's words) in Java: jieba's DAG over the dictionary and the most probable route, no HMM.
 */
package io.jingpai.opensearch;

import java.io.BufferedReader;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** Word segmentation like {@code Segmenter.cut} (rjieba, HMM off); whitespace tokens are dropped. */
public final class Segmenter {
    /** word → frequency; a prefix of a word that is no word itself maps to 0 (jieba's FREQ) */
    private final Map<String, Long> freq = new HashMap<>();
    private long total;

    /**
     * @param base jieba's dictionary (word → frequency), or the part of it the texts can reach
     * @param baseTotal the whole base dictionary's total frequency
     */
    public Segmenter(Map<String, Long> base, long baseTotal) {
        for (Map.Entry<String, Long> e : base.entrySet()) {
            put(e.getKey(), e.getValue());
        }
        this.total = baseTotal;
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

    private void put(String word, long f) {
        freq.put(word, f);
        int[] cps = word.codePoints().toArray();
        for (int i = 1; i < cps.length; i++) {
            freq.putIfAbsent(new String(cps, 0, i), 0L);
        }
    }

    /** Adds a jingpai dictionary word unless the dictionary already has it (as Segmenter does with rjieba). */
    public void addWord(String word, long f) {
        Long known = freq.get(word);
        if (known != null && known > 0) {
            return;
        }
        put(word, f);
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
                Long f = freq.get(frag);
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
                Long f = freq.get(single);
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
