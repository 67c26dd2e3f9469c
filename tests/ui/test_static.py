"""The page and its assets: served by the gateway under /_jingpai/ui with a strict CSP, no inline script,
no external resources, and a script that never parses data as HTML."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from starlette.testclient import TestClient

from jingpai.plugin.gateway import create_app
from jingpai.plugin.settings import GatewaySettings
from jingpai.ui.app import CSP, STATIC_DIR, UiSettings

ASSETS = ("index.html", "app.js", "app.css")


@pytest.fixture(scope="module")
def client():
    # no engine is needed for the page itself; the port is closed on purpose
    from jingpai.ui.app import ui_routes  # the gateway serves no UI of its own

    app = create_app(GatewaySettings(engine_url="http://127.0.0.1:9"), routes=ui_routes())
    with TestClient(app) as c:
        yield c


class _Inventory(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict, str]] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self._in_script: dict | None = None
        self._script_body = ""

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            self.attrs.append((tag, name, value))
        if tag == "script":
            self._in_script, self._script_body = dict(attrs), ""

    def handle_data(self, data):
        if self._in_script is not None:
            self._script_body += data

    def handle_endtag(self, tag):
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, self._script_body))
            self._in_script = None


def test_ui_redirects_to_the_page_with_a_trailing_slash(client):
    resp = client.get("/_jingpai/ui", follow_redirects=False)
    assert resp.status_code == 307
    assert resp.headers["location"].endswith("/_jingpai/ui/")


@pytest.mark.parametrize("path", ["/_jingpai/ui/", "/_jingpai/ui/static/app.js", "/_jingpai/ui/static/app.css"])
def test_page_and_assets_carry_the_csp(client, path):
    resp = client.get(path)
    assert resp.status_code == 200
    assert resp.headers["content-security-policy"] == CSP
    assert "default-src 'self'" in resp.headers["content-security-policy"]
    assert "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP
    assert resp.headers["x-content-type-options"] == "nosniff"


def test_content_types(client):
    assert client.get("/_jingpai/ui/").headers["content-type"].startswith("text/html")
    assert "javascript" in client.get("/_jingpai/ui/static/app.js").headers["content-type"]
    assert client.get("/_jingpai/ui/static/app.css").headers["content-type"].startswith("text/css")


def test_missing_asset_is_a_404_with_the_csp(client):
    resp = client.get("/_jingpai/ui/static/nope.js")
    assert resp.status_code == 404
    assert resp.headers["content-security-policy"] == CSP


def test_page_has_no_inline_script_or_handlers(client):
    page = _Inventory()
    page.feed(client.get("/_jingpai/ui/").text)
    assert page.scripts, "the page loads its script"
    for attrs, body in page.scripts:
        assert attrs.get("src") == "static/app.js"
        assert body.strip() == "", "inline script would be blocked by the CSP"
    for tag, name, value in page.attrs:
        assert not name.startswith("on"), f"inline handler {name} on <{tag}>"
        assert name != "style", f"inline style on <{tag}>"
        assert not (value or "").strip().lower().startswith("javascript:")


@pytest.mark.parametrize("name", ASSETS)
def test_assets_reference_nothing_outside_the_origin(name):
    text = (STATIC_DIR / name).read_text(encoding="utf-8")
    assert not re.search(r"(?i)\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text), f"{name} refers to an external resource"
    assert "@import" not in text and "url(" not in text


def test_script_never_parses_data_as_html():
    js = (STATIC_DIR / "app.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout(\"", "DOMParser"):
        assert sink not in js, f"app.js uses {sink}"
    # text goes in through textContent / text nodes
    assert "textContent" in js and "createTextNode" in js


def test_ui_settings_validation_names_the_setting():
    with pytest.raises(ValueError, match=r"UiSettings.size \(60\) must not exceed max_size \(50\)"):
        UiSettings(size=60)
    with pytest.raises(ValueError, match=r"UiSettings.compare_window must be >= 1, got 0"):
        UiSettings(compare_window=0)


def test_api_without_engine_is_a_clear_502(client):
    resp = client.get("/_jingpai/ui/api/indices")
    assert resp.status_code == 502
    assert resp.headers["content-security-policy"] == CSP
    assert "listing indices failed: HTTP 502" in resp.json()["error"]
