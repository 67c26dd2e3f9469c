/*
 * jingpai: the gateway's score fusion (jingpai/reranker/fusion.py, FusionSpec) in Java. Identical results are
 * the contract: tests/vectors/fusion.json is written by the Python module and replayed by FusionTest.
 */
package io.jingpai.core;

import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.Map;

/** One window's fusion of engine and model scores: {@code replace}, {@code linear} or {@code rrf}. */
public final class Fusion {
    public static final String[] MODES = {"replace", "linear", "rrf"};

    public final String mode;
    /** the engine's weight in [0, 1] */
    public final double weight;
    public final int rrfK;

    public Fusion(String mode, double weight, int rrfK) {
        if (!Arrays.asList(MODES).contains(mode)) {
            throw new IllegalArgumentException("fusion must be one of replace, linear, rrf, got '" + mode + "'");
        }
        if (!(weight >= 0.0 && weight <= 1.0)) {
            throw new IllegalArgumentException("fusion_weight must be a number in [0, 1] (the engine's weight), got " + weight);
        }
        if (rrfK < 1) {
            throw new IllegalArgumentException("rrf_k must be an integer >= 1, got " + rrfK);
        }
        this.mode = mode;
        this.weight = weight;
        this.rrfK = rrfK;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Fusion f && f.mode.equals(mode) && f.weight == weight && f.rrfK == rrfK;
    }

    @Override
    public int hashCode() {
        return java.util.Objects.hash(mode, weight, rrfK);
    }

    /** the response's {@code fusion} object, like FusionSpec.describe() */
    public Map<String, Object> describe() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("mode", mode);
        if (!mode.equals("replace")) {
            out.put("weight", weight);
        }
        if (mode.equals("rrf")) {
            out.put("rrf_k", rrfK);
        }
        return out;
    }

    /**
     * Fused scores parallel to the inputs, with engine ranks 1..n (the gateway's call).
     *
     * @param engine first-stage scores; {@code null} or any null / non-finite entry: the engine's ranks stand in
     * @param model the reranker's scores (finite)
     */
    public double[] fuse(Double[] engine, double[] model) {
        int n = model.length;
        for (double m : model) {
            if (!Double.isFinite(m)) {
                throw new IllegalArgumentException("model scores must be finite, got " + Arrays.toString(model));
            }
        }
        double[] ranks = new double[n];
        for (int i = 0; i < n; i++) {
            ranks[i] = i + 1;
        }
        if (mode.equals("replace")) {
            return model.clone();
        }
        double[] first = engineArray(engine, n);
        if (first == null) {
            first = new double[n];
            for (int i = 0; i < n; i++) {
                first[i] = 1.0 - (ranks[i] - 1.0) / Math.max(n - 1, 1);
            }
        }
        double[] out = new double[n];
        if (mode.equals("linear")) {
            double[] e = minMax(first);
            double[] m = minMax(model);
            for (int i = 0; i < n; i++) {
                out[i] = weight * e[i] + (1.0 - weight) * m[i];
            }
            return out;
        }
        double[] modelRanks = new double[n];
        int[] order = fusedOrder(model, ranks);
        for (int r = 0; r < n; r++) {
            modelRanks[order[r]] = r + 1;
        }
        double k = rrfK;
        for (int i = 0; i < n; i++) {
            out[i] = 2.0 * weight / (k + ranks[i]) + 2.0 * (1.0 - weight) / (k + modelRanks[i]);
        }
        return out;
    }

    private static double[] engineArray(Double[] engine, int n) {
        if (engine == null) {
            return null;
        }
        if (engine.length != n) {
            throw new IllegalArgumentException("got " + engine.length + " engine scores for " + n + " model scores");
        }
        double[] out = new double[n];
        for (int i = 0; i < n; i++) {
            if (engine[i] == null || !Double.isFinite(engine[i])) {
                return null;
            }
            out[i] = engine[i];
        }
        return out;
    }

    /** {@code (x - min) / (max - min)}; all 1.0 when every value is equal (min_max). */
    public static double[] minMax(double[] x) {
        double[] out = new double[x.length];
        if (x.length == 0) {
            return out;
        }
        double low = Double.POSITIVE_INFINITY, high = Double.NEGATIVE_INFINITY;
        for (double v : x) {
            low = Math.min(low, v);
            high = Math.max(high, v);
        }
        double span = high - low;
        if (span <= 0.0 || !Double.isFinite(span)) {
            Arrays.fill(out, 1.0);
            return out;
        }
        for (int i = 0; i < x.length; i++) {
            out[i] = (x[i] - low) / span;
        }
        return out;
    }

    /** Indices best first; ties by engine rank, then input order (numpy lexsort((ranks, -scores))). */
    public static int[] fusedOrder(double[] fused, double[] engineRanks) {
        Integer[] idx = new Integer[fused.length];
        for (int i = 0; i < idx.length; i++) {
            idx[i] = i;
        }
        // == on doubles, not Double.compare: 0.0 and -0.0 tie, as in numpy
        Comparator<Integer> cmp = (a, b) -> fused[a] > fused[b] ? -1 : (fused[a] < fused[b] ? 1 : 0);
        if (engineRanks != null) {
            cmp = cmp.thenComparingDouble(i -> engineRanks[i]);
        }
        Arrays.sort(idx, cmp.thenComparingInt(i -> i)); // a stable sort: input order breaks what is left
        return Arrays.stream(idx).mapToInt(Integer::intValue).toArray();
    }

    public static int[] fusedOrder(double[] fused) {
        return fusedOrder(fused, null);
    }
}
