package io.jingpai.opensearch;

import io.jingpai.core.Overrides;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

import org.opensearch.action.search.SearchRequest;
import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.common.io.stream.StreamOutput;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.search.SearchExtBuilder;
import org.opensearch.search.pipeline.PipelineProcessingContext;

/** {@code ext.jingpai}: what the processors did (the gateway's {@code jingpai} object), in the response's {@code ext}. */
public final class JingpaiExt extends SearchExtBuilder {
    public static final String NAME = "jingpai";
    private final Map<String, Object> info;

    public JingpaiExt(Map<String, Object> info) {
        this.info = new LinkedHashMap<>(info);
    }

    public JingpaiExt(StreamInput in) throws IOException {
        @SuppressWarnings("unchecked") Map<String, Object> read = (Map<String, Object>) in.readGenericValue();
        this.info = read;
    }

    public static JingpaiExt parse(XContentParser parser) throws IOException {
        return new JingpaiExt(parser.map());
    }

    static final String ATTR_OVERRIDES = "jingpai.overrides";

    /**
     * The overrides of {@code request} (its ext.jingpai, read by the shared {@link Overrides#parse}), read once per search:
     * the first processor to ask takes ext.jingpai off the request (the shards never see it, as the gateway never
     * forwards it) and keeps it in the pipeline's context.
     */
    public static Overrides overrides(SearchRequest request, PipelineProcessingContext context) {
        Object kept = context.getAttribute(ATTR_OVERRIDES);
        if (kept instanceof Overrides o) {
            return o;
        }
        Overrides overrides = Overrides.NONE;
        if (request.source() != null && request.source().ext() != null && !request.source().ext().isEmpty()) {
            Overrides.Found<SearchExtBuilder> found = Overrides.find(request.source().ext(), e -> e instanceof JingpaiExt j ? j.info() : null);
            overrides = found.overrides();
            request.source().ext(found.others());
        }
        context.setAttribute(ATTR_OVERRIDES, overrides);
        return overrides;
    }

    public Map<String, Object> info() {
        return info;
    }

    @Override
    public String getWriteableName() {
        return NAME;
    }

    @Override
    public void writeTo(StreamOutput out) throws IOException {
        out.writeGenericValue(info);
    }

    @Override
    public XContentBuilder toXContent(XContentBuilder builder, Params params) throws IOException {
        return builder.field(NAME, info);
    }

    @Override
    public int hashCode() {
        return Objects.hash(info);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof JingpaiExt other && other.info.equals(info);
    }
}
