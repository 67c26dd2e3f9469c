/*
 * jingpai: _source folding (jingpai/plugin/gateway/source.py) in Java: the window is fetched with the rerank fields
 * even when the search's _source filter leaves them out, and what was added is taken out of the hits again.
 * tests/vectors/overrides.json carries the gateway's folds; OverridesTest replays them.
 */
package io.jingpai.opensearch;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.common.bytes.BytesReference;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.search.SearchHit;
import org.opensearch.search.fetch.subphase.FetchSourceContext;

/**
 * What folding decided: the fields reranked on (those the search's excludes hide are not), those added to its filter
 * (taken out of the hits again), whether {@code _source} goes from the hits entirely (the search asked for none), and
 * the filter to send ({@code null}: the search's own).
 */
public record SourceFold(List<String> fields, List<String> added, boolean drop, FetchSourceContext fetch) {
    private static final Logger LOG = LogManager.getLogger(SourceFold.class);

    /** No change: the search's filter already returns {@code fields}. */
    public static SourceFold none(List<String> fields) {
        return new SourceFold(fields, List.of(), false, null);
    }

    /** The fold of a search whose filter is {@code ctx} ({@code null}: none) for rerank fields {@code fields}. */
    public static SourceFold fold(FetchSourceContext ctx, List<String> fields) {
        if (ctx == null) {
            return none(fields);
        }
        if (!ctx.fetchSource()) {
            return new SourceFold(fields, fields, true, new FetchSourceContext(true, fields.toArray(new String[0]), new String[0]));
        }
        List<String> includes = List.of(ctx.includes());
        List<String> excludes = List.of(ctx.excludes());
        List<String> hidden = fields.stream().filter(f -> !selects(f, List.of(), excludes)).toList();
        if (!hidden.isEmpty()) {
            LOG.info("jingpai: rerank fields {} are excluded by the search's _source filter; reranking without them", hidden);
        }
        List<String> kept = fields.stream().filter(f -> !hidden.contains(f)).toList();
        List<String> missing = kept.stream().filter(f -> !selects(f, includes, excludes)).toList();
        if (includes.isEmpty() || missing.isEmpty()) {
            return new SourceFold(kept, List.of(), false, null);
        }
        List<String> widened = new ArrayList<>(includes);
        widened.addAll(missing);
        return new SourceFold(kept, missing, false, new FetchSourceContext(true, widened.toArray(new String[0]), ctx.excludes()));
    }

    /** Whether a filter of {@code includes} / {@code excludes} patterns returns field {@code name} (fnmatch, as the gateway). */
    static boolean selects(String name, List<String> includes, List<String> excludes) {
        if (!includes.isEmpty() && includes.stream().noneMatch(p -> matches(name, p))) {
            return false;
        }
        return excludes.stream().noneMatch(p -> matches(name, p));
    }

    /** Python's fnmatchcase for the patterns a _source filter uses: {@code *} and {@code ?}. */
    static boolean matches(String name, String pattern) {
        StringBuilder regex = new StringBuilder();
        for (String part : pattern.split("(?=[*?])|(?<=[*?])")) {
            regex.append(part.equals("*") ? ".*" : part.equals("?") ? "." : Pattern.quote(part));
        }
        return Pattern.compile(regex.toString(), Pattern.DOTALL).matcher(name).matches();
    }

    /** Take what folding added out of a hit of the page. */
    public void unfold(SearchHit hit) {
        if (drop) {
            hit.sourceRef(null);
            return;
        }
        if (added.isEmpty() || !hit.hasSource()) {
            return;
        }
        Map<String, Object> source = hit.getSourceAsMap();
        for (String path : added) {
            popPath(source, path);
        }
        try (XContentBuilder b = JsonXContent.contentBuilder()) {
            b.map(source);
            hit.sourceRef(BytesReference.bytes(b));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Remove the value at a dotted {@code path} (a flat dotted key first), and the objects it leaves empty (the engines
     * return no empty object for a source filter, so one left here held only what was removed: the gateway's pop_path).
     */
    @SuppressWarnings("unchecked")
    static void popPath(Map<String, Object> source, String path) {
        if (source.containsKey(path)) {
            source.remove(path);
            return;
        }
        String[] parts = path.split("\\.");
        List<Object> nodes = new ArrayList<>();
        nodes.add(source);
        for (int i = 0; i < parts.length - 1; i++) {
            Object last = nodes.get(nodes.size() - 1);
            nodes.add(last instanceof Map<?, ?> m ? m.get(parts[i]) : null);
        }
        if (!(nodes.get(nodes.size() - 1) instanceof Map<?, ?> leaf) || !leaf.containsKey(parts[parts.length - 1])) {
            return;
        }
        ((Map<String, Object>) leaf).remove(parts[parts.length - 1]);
        for (int depth = parts.length - 1; depth > 0; depth--) {
            if (nodes.get(depth) instanceof Map<?, ?> m && m.isEmpty()) {
                ((Map<String, Object>) nodes.get(depth - 1)).remove(parts[depth - 1]);
            }
        }
    }
}
