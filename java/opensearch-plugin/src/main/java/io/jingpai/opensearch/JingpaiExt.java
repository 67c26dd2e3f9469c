package io.jingpai.opensearch;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.common.io.stream.StreamOutput;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.search.SearchExtBuilder;

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
