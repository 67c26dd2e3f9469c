"""The gateway's byte-level splice of the ``jingpai`` object into engine answers it does not rerank."""

from __future__ import annotations

import json

import pytest

from jingpai.plugin.gateway import _append_member


@pytest.mark.parametrize(
    "content",
    [b'{"took":3,"hits":{"hits":[]}}', b'{}', b'  {"a": "\\u4e2d}"}\n', b'{"a":{"b":[1,2,{}]}}  \r\n'],
)
def test_append_member_keeps_the_object_and_adds_the_key_last(content: bytes) -> None:
    info = {"reranked": False, "reason": "disabled", "keywords": ["中国"]}
    out = _append_member(content, "jingpai", info)
    assert out is not None
    data = json.loads(out)
    assert data == {**json.loads(content), "jingpai": info}
    assert list(data)[-1] == "jingpai"


@pytest.mark.parametrize("content", [b"", b"[1,2]", b'"text"', b"null", b'{"a":1'])
def test_append_member_refuses_what_is_not_an_object(content: bytes) -> None:
    assert _append_member(content, "jingpai", {}) is None
