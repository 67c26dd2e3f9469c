package io.jingpai.elasticsearch;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

import org.elasticsearch.common.io.stream.StreamInput;
import org.elasticsearch.common.io.stream.StreamOutput;
import org.elasticsearch.search.SearchExtBuilder;
import org.elasticsearch.xcontent.XContentBuilder;
import org.elasticsearch.xcontent.XContentParser;

/** {@code ext.jingpai} of a search: its per-search overrides, the gateway's keys (read by io.jingpai.core.Overrides). */
public final class JingpaiSearchExt extends SearchExtBuilder {
    public static final String NAME = "jingpai";
    private final Map<String, Object> info;

    public JingpaiSearchExt(Map<String, Object> info) {
        this.info = new LinkedHashMap<>(info);
    }

    public JingpaiSearchExt(StreamInput in) throws IOException {
        this.info = in.readGenericMap();
    }

    public static JingpaiSearchExt parse(XContentParser parser) throws IOException {
        return new JingpaiSearchExt(parser.map());
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
        out.writeGenericMap(info);
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
        return o instanceof JingpaiSearchExt other && other.info.equals(info);
    }
}
