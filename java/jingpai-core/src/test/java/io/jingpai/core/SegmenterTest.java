package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** The shared base dictionary: one copy per content, and the words one segmenter adds stay its own. */
class SegmenterTest {
    private static final Map<String, Integer> BASE = Map.of("中国", 3000, "经济", 2000, "增长", 1500, "G", 10, "D", 10, "P", 10);

    @Test
    void segmentersOfTheSameBaseShareOneCopy() {
        assertSame(Segmenter.shared(BASE, 6530), Segmenter.shared(Map.copyOf(BASE), 6530));
        assertNotSame(Segmenter.shared(BASE, 6530), Segmenter.shared(BASE, 6531));
        assertNotSame(Segmenter.shared(BASE, 6530), Segmenter.shared(Map.of("中国", 3000), 6530));
    }

    @Test
    void addedWordsDoNotLeakIntoAnotherSegmenterOfTheSameBase() {
        Segmenter withWords = new Segmenter(Segmenter.shared(BASE, 6530));
        Segmenter plain = new Segmenter(Segmenter.shared(BASE, 6530));
        withWords.addWord("中国经济", 5000);
        withWords.addWord("中国", 1); // the base has it: not added, its frequency kept
        assertEquals(List.of("中国经济", "增长"), withWords.cut("中国经济增长"));
        assertEquals(List.of("中国", "经济", "增长"), plain.cut("中国经济增长"));
        assertEquals(List.of("中国", "GDP"), plain.cut("中国GDP"));
    }
}
