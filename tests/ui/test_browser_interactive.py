"""The page driven like a user in Debian's Chromium through Playwright (no browser download:
``executable_path`` is the system chromium): type, toggle, keyboard, hostile documents."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

expect = playwright_api.expect
pytestmark = pytest.mark.engine

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture
def page(browser, ui_setup):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = context.new_page()
    pg.dialogs = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    pg.goto(f"{ui_setup.ui}?index={ui_setup.index}")
    # (locator waits: the page's CSP forbids the eval that wait_for_function needs — as it should)
    expect(pg.locator("#index option").first).to_be_attached()
    yield pg
    context.close()


def run_query(pg, query: str) -> None:
    pg.keyboard.press("Escape")
    pg.keyboard.press("/")  # the keyboard shortcut focuses the search box
    pg.keyboard.type(query)
    pg.keyboard.press("Enter")
    expect(pg.locator("#jingpai-hits .hit").first).to_be_visible()


def test_type_search_and_toggle(page, ui_setup, tmp_path):
    run_query(page, "苹果 手机")
    assert page.locator("#engine-hits .hit").count() == 10
    assert page.locator("#jingpai-hits .hit").count() == 10
    assert page.locator("#jingpai-hits .score.fused").count() == 10 and page.locator("#jingpai-hits .score.model").count() == 10
    assert "fusion linear (engine weight 0.5)" in page.locator("#status").text_content()
    assert page.locator("#status").text_content().startswith("reranked by tiny-ui")
    assert page.locator("#jingpai-hits mark").count() > 0
    assert page.locator("#augment").is_disabled()
    page.screenshot(path=str(tmp_path / "ui-interactive.png"), full_page=False)

    # rerank off: augmentation only, no rerank scores, augment toggle free again
    page.click("#rerank")
    expect(page.locator("#status")).to_have_text(re.compile(r"^not reranked \(augment_only\)"))
    assert page.locator("#jingpai-hits .score.fused").count() == 0
    assert not page.locator("#augment").is_disabled()
    assert "rerank=false" in page.url

    # augment off too: the jingpai column is the engine order
    page.click("#augment")
    expect(page.locator("#jingpai-meta")).to_have_text(re.compile(r"^mode off"))
    engine_ids = page.eval_on_selector_all("#engine-hits .hit", "els => els.map(e => e.dataset.id)")
    jingpai_ids = page.eval_on_selector_all("#jingpai-hits .hit", "els => els.map(e => e.dataset.id)")
    assert engine_ids == jingpai_ids

    # j moves keyboard focus onto the hits
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.classList.contains('hit')")


def test_hostile_documents_render_as_text_and_run_nothing(page):
    run_query(page, "360公司安全通告 升级浏览器")
    page.wait_for_timeout(500)
    assert page.evaluate("document.body.dataset.pwned") is None
    assert page.dialogs == []  # type: ignore[attr-defined]
    hostile = page.locator('#engine-hits .hit[data-id="hostile-1"]')
    assert hostile.count() == 1
    assert hostile.locator(".title").text_content().startswith("<script>document.body.setAttribute('data-pwned','script')</script>")
    assert '<img src=x onerror="document.body.setAttribute' in hostile.locator(".snippet").text_content()
    assert page.locator("#engine-hits img, #jingpai-hits img, #engine-hits script, #jingpai-hits script").count() == 0
