"""The page in a real browser: Debian's Chromium, headless, against a real gateway + engine + reranker.

The page state lives in the URL (``?q=&index=&augment=&rerank=``), so a headless ``--dump-dom`` after the
page's own fetches have finished shows what a user sees; ``--screenshot`` keeps a picture of it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from urllib.parse import urlencode

import pytest

pytestmark = pytest.mark.engine

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=15000",
]


def chromium(url: str, *extra: str, timeout: int = 120) -> str:
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="jingpai-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url], capture_output=True, text=True, timeout=timeout,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def hits(dom: str, column: str) -> list[str]:
    match = re.search(rf'<ol id="{column}-hits" class="hits">(.*?)</ol>', dom, re.S)
    assert match, f"no {column} column in the page"
    return re.findall(r'<li class="hit" tabindex="0" data-id="([^"]+)">', match.group(1))


def page_url(ui_setup, **params: str) -> str:
    return f"{ui_setup.ui}?{urlencode({'index': ui_setup.index, **params})}"


def test_both_columns_render_with_scores_and_marks(ui_setup, tmp_path):
    dom = chromium(page_url(ui_setup, q="苹果 手机"), "--dump-dom")
    engine, jingpai = hits(dom, "engine"), hits(dom, "jingpai")
    assert len(engine) == 10 and len(jingpai) == 10
    api = ui_setup.search(q="苹果 手机").json()
    assert engine == [h["id"] for h in api["engine"]["hits"]]
    assert jingpai == [h["id"] for h in api["jingpai"]["hits"]]
    # per hit: engine, model and fused scores; the status line names the fusion the gateway ran
    assert dom.count('class="score model"') >= 10 and dom.count('class="score fused"') >= 10
    assert "fusion linear (engine weight 0.5)" in dom
    assert 'class="moved ' in dom
    assert "<mark>苹果</mark>" in dom
    assert "reranked by tiny-ui" in dom
    assert "disabled" in re.search(r'<input id="augment"[^>]*>', dom).group(0)
    shot = tmp_path / "ui.png"
    chromium(page_url(ui_setup, q="苹果 手机"), f"--screenshot={shot}", "--window-size=1400,1000")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerank_toggle_from_the_url(ui_setup):
    dom = chromium(page_url(ui_setup, q="苹果 手机", rerank="false"), "--dump-dom")
    assert "not reranked (augment_only)" in dom
    assert 'class="score fused"' not in dom and "fusion " not in dom
    # with rerank off the augment toggle is free again (rerank implies augmentation)
    augment = re.search(r'<input id="augment"[^>]*>', dom).group(0)
    assert "disabled" not in augment


def test_hostile_documents_render_as_text_and_run_nothing(ui_setup):
    dom = chromium(page_url(ui_setup, q="360公司安全通告 升级浏览器"), "--dump-dom")
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert "data-pwned" not in body, f"injected code ran: {body}"
    assert "hostile-1" in hits(dom, "engine")
    # the title arrives as text: its markup is escaped in the DOM, and no element came from it
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;" in dom
    assert "&lt;img src=x onerror=" in dom
    assert "<img" not in dom and dom.count("<script") == 1
