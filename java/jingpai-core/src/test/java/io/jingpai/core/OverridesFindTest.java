package io.jingpai.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** Overrides.find: the jingpai section of a search's ext sections, as both plugins read it (the others kept, in order). */
class OverridesFindTest {
    record Ext(String name, Map<String, Object> body) {}

    static Map<String, Object> jingpai(Ext e) {
        return e.name().equals("jingpai") ? e.body() : null;
    }

    @Test
    void theJingpaiSectionIsParsedAndTheOthersKept() {
        Ext other = new Ext("other", Map.of("x", 1));
        Ext last = new Ext("last", Map.of());
        Overrides.Found<Ext> found = Overrides.find(List.of(other, new Ext("jingpai", Map.of("window", 5, "fusion", "rrf")), last),
            OverridesFindTest::jingpai);
        assertEquals(5, found.overrides().window());
        assertEquals("rrf", found.overrides().fusion());
        assertEquals(List.of(other, last), found.others());
    }

    @Test
    void noSectionsOrNoJingpaiOneIsNone() {
        assertSame(Overrides.NONE, Overrides.find(null, OverridesFindTest::jingpai).overrides());
        assertSame(Overrides.NONE, Overrides.find(List.of(new Ext("other", Map.of())), OverridesFindTest::jingpai).overrides());
    }

    @Test
    void aBadJingpaiSectionIsTheGatewaysError() {
        Overrides.Invalid bad = assertThrows(Overrides.Invalid.class,
            () -> Overrides.find(List.of(new Ext("jingpai", Map.of("widow", 5))), OverridesFindTest::jingpai));
        assertEquals("widow", bad.field);
    }
}
