package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * The shared vectors of tests/vectors (written by tests/plugin/test_shared_vectors.py from the Python code), read by
 * the tests of java/jingpai-core and of both plugins (their poms add this folder as a test source: one copy).
 */
public final class Vectors {
    public static final double TOLERANCE = 1e-6;

    private Vectors() {}

    public static Map<String, Object> read(String name) throws Exception {
        Path dir = Path.of(System.getProperty("jingpai.vectors", "../../tests/vectors"));
        return RerankClient.parseMap(Files.readAllBytes(dir.resolve(name)));
    }

    /** Equal JSON, numbers within 1e-6 (an int and a double of the same value are equal). */
    public static void assertJson(Object expected, Object actual, String path) {
        if (expected instanceof Number e) {
            if (!(actual instanceof Number a)) {
                fail(path + ": expected " + expected + ", got " + actual);
                return;
            }
            assertEquals(e.doubleValue(), a.doubleValue(), TOLERANCE, path);
        } else if (expected instanceof Map<?, ?> e) {
            assertTrue(actual instanceof Map<?, ?>, path + ": expected an object, got " + actual);
            Map<?, ?> a = (Map<?, ?>) actual;
            assertEquals(List.copyOf(e.keySet()), List.copyOf(a.keySet()), path + ": keys");
            for (Object key : e.keySet()) {
                assertJson(e.get(key), a.get(key), path + "." + key);
            }
        } else if (expected instanceof List<?> e) {
            assertTrue(actual instanceof List<?>, path + ": expected a list, got " + actual);
            List<?> a = (List<?>) actual;
            assertEquals(e.size(), a.size(), path + ": length of " + a);
            for (int i = 0; i < e.size(); i++) {
                assertJson(e.get(i), a.get(i), path + "[" + i + "]");
            }
        } else {
            assertEquals(expected, actual, path);
        }
    }

    public static double[] doubles(Object list) {
        return ((List<?>) list).stream().mapToDouble(v -> ((Number) v).doubleValue()).toArray();
    }

    public static Double[] nullableDoubles(Object list) {
        return ((List<?>) list).stream().map(v -> v == null ? null : ((Number) v).doubleValue()).toArray(Double[]::new);
    }

    public static Fusion fusion(Object spec) {
        Map<?, ?> m = (Map<?, ?>) spec;
        double weight = m.get("weight") == null ? 0.5 : ((Number) m.get("weight")).doubleValue();
        int k = m.get("rrf_k") == null ? 60 : ((Number) m.get("rrf_k")).intValue();
        return new Fusion((String) m.get("mode"), weight, k);
    }
}
