// jingpai demo UI. All document and query text is inserted with textContent / text nodes only:
// nothing from the engine or the user is ever parsed as HTML.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const form = $("search-form");
  const q = $("q");
  const indexSelect = $("index");
  const augment = $("augment");
  const rerank = $("rerank");
  const banner = $("banner");
  const status = $("status");
  const keywordsLine = $("keywords");

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // Segments are [{text, kw}] runs computed by the server; keywords become <mark> elements.
  function appendSegments(parent, segments) {
    for (const seg of segments || []) {
      if (seg.kw) parent.appendChild(el("mark", null, seg.text));
      else parent.appendChild(document.createTextNode(seg.text));
    }
  }

  function fmt(score) {
    if (score === null || score === undefined) return "–";
    const n = Number(score);
    return Math.abs(n) >= 100 ? n.toFixed(1) : n.toFixed(3);
  }

  function movedBadge(hit) {
    if (hit.new) return el("span", "moved new", "new");
    if (hit.moved === null || hit.moved === undefined) return null;
    if (hit.moved > 0) return el("span", "moved up", "▲" + hit.moved);
    if (hit.moved < 0) return el("span", "moved down", "▼" + (-hit.moved));
    return el("span", "moved same", "＝");
  }

  function renderHit(hit, column, mode) {
    const li = el("li", "hit");
    li.tabIndex = 0;
    li.dataset.id = hit.id;
    const head = el("div", "hit-head");
    head.appendChild(el("span", "rank", hit.rank));
    const title = el("span", "title");
    appendSegments(title, hit.title);
    head.appendChild(title);
    if (column === "jingpai" && hit.sources && hit.sources.length) {
      // the hybrid first stage's list(s) this hit came from: BM25, kNN or both
      const names = hit.sources.map((s) => (s === "knn" ? "kNN" : s.toUpperCase()));
      const source = el("span", "source " + hit.sources.join("-"), names.join("+"));
      source.title = "found by " + names.join(" and ");
      head.appendChild(source);
    }
    if (column === "jingpai") {
      const badge = movedBadge(hit);
      if (badge) {
        badge.title = hit.new ? "not in the engine's top results" : "engine rank " + hit.engine_rank;
        head.appendChild(badge);
      }
    }
    li.appendChild(head);

    const meta = el("div", "meta");
    for (const part of [hit.category, hit.date, hit.id]) {
      if (part) meta.appendChild(el("span", "meta-part", part));
    }
    li.appendChild(meta);

    const snippet = el("p", "snippet");
    appendSegments(snippet, hit.snippet);
    li.appendChild(snippet);

    const scores = el("div", "scores");
    // in the jingpai column the engine score is the one of the augmented query (what was reranked)
    const engineLabel = column === "jingpai" && mode !== "off" ? "engine (augmented) " : "engine ";
    scores.appendChild(el("span", "score engine", engineLabel + fmt(hit.engine_score)));
    // a reranked hit: the model's own score and the fused score that placed it in the jingpai column
    if (hit.fused_score !== null && hit.fused_score !== undefined) {
      scores.appendChild(el("span", "score model", "model " + fmt(hit.model_score)));
      scores.appendChild(el("span", "score fused", "fused " + fmt(hit.fused_score)));
    }
    if (column === "jingpai" && hit.engine_rank) {
      scores.appendChild(el("span", "score was", "engine #" + hit.engine_rank));
    }
    li.appendChild(scores);
    return li;
  }

  function renderColumn(listId, metaId, column, name) {
    const list = $(listId);
    clear(list);
    for (const hit of column.hits) list.appendChild(renderHit(hit, name, column.mode));
    if (!column.hits.length) list.appendChild(el("li", "empty", "no hits"));
    const parts = ["mode " + column.mode];
    if (column.total !== null && column.total !== undefined) parts.push(column.total + " hits");
    if (column.took_ms !== null && column.took_ms !== undefined) parts.push(column.took_ms + " ms");
    $(metaId).textContent = parts.join(" · ");
  }

  // {mode: "linear", weight: 0.5} → "fusion linear (engine weight 0.5)"; weight is the engine's share
  function describeFusion(fusion) {
    if (!fusion || !fusion.mode) return null;
    const params = [];
    if (fusion.weight !== undefined && fusion.mode !== "replace") params.push("engine weight " + fusion.weight);
    if (fusion.rrf_k !== undefined) params.push("k " + fusion.rrf_k);
    if (fusion.mode === "replace") params.push("model score only");
    return "fusion " + fusion.mode + (params.length ? " (" + params.join(", ") + ")" : "");
  }

  function showBanner(text) {
    banner.textContent = text || "";
    banner.hidden = !text;
  }

  function renderKeywords(words) {
    clear(keywordsLine);
    keywordsLine.hidden = !words.length;
    if (!words.length) return;
    keywordsLine.appendChild(el("span", "label", "dictionary keywords: "));
    for (const w of words) keywordsLine.appendChild(el("mark", "kw-chip", w));
  }

  function syncToggles() {
    // the gateway always augments before reranking
    if (rerank.checked) augment.checked = true;
    augment.disabled = rerank.checked;
  }

  function currentParams() {
    return new URLSearchParams({
      q: q.value.trim(),
      index: indexSelect.value,
      augment: augment.checked ? "true" : "false",
      rerank: rerank.checked ? "true" : "false",
    });
  }

  async function search() {
    const params = currentParams();
    if (!params.get("q") || !params.get("index")) return;
    history.replaceState(null, "", "?" + params.toString());
    status.textContent = "searching…";
    let data;
    try {
      const resp = await fetch("api/search?" + params.toString(), { headers: { Accept: "application/json" } });
      data = await resp.json();
      if (!resp.ok) throw new Error(data.error || "HTTP " + resp.status);
    } catch (err) {
      status.textContent = "";
      showBanner("Search failed: " + err.message);
      return;
    }
    showBanner(data.banner);
    renderKeywords(data.keywords || []);
    renderColumn("engine-hits", "engine-meta", data.engine, "engine");
    renderColumn("jingpai-hits", "jingpai-meta", data.jingpai, "jingpai");
    const bits = [data.reranked ? "reranked by " + (data.model || "the reranker") : "not reranked" + (data.reason ? " (" + data.reason + ")" : "")];
    const fusion = describeFusion(data.fusion);
    if (fusion) bits.push(fusion);
    if (data.took_rerank_ms !== null && data.took_rerank_ms !== undefined) bits.push("rerank " + data.took_rerank_ms + " ms");
    bits.push(data.augmented ? "augmented" : "not augmented");
    status.textContent = bits.join(" · ");
  }

  async function loadIndices() {
    const wanted = new URLSearchParams(location.search);
    try {
      const resp = await fetch("api/indices", { headers: { Accept: "application/json" } });
      const data = await resp.json();
      if (!resp.ok) throw new Error(data.error || "HTTP " + resp.status);
      clear(indexSelect);
      for (const choice of data.indices) {
        const option = el("option", null, choice.name + (choice.jingpai ? "" : " (plain)"));
        option.value = choice.name;
        indexSelect.appendChild(option);
      }
      const pick = wanted.get("index") || data.default;
      if (pick) indexSelect.value = pick;
      showBanner(data.banner);
    } catch (err) {
      showBanner("Cannot list indices: " + err.message);
    }
    if (wanted.get("augment") === "false") augment.checked = false;
    if (wanted.get("rerank") === "false") rerank.checked = false;
    syncToggles();
    if (wanted.get("q")) {
      q.value = wanted.get("q");
      search();
    }
  }

  function moveFocus(step) {
    const hits = Array.from(document.querySelectorAll(".hit"));
    if (!hits.length) return;
    const at = hits.indexOf(document.activeElement);
    const next = at < 0 ? 0 : Math.min(hits.length - 1, Math.max(0, at + step));
    hits[next].focus();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    search();
  });
  rerank.addEventListener("change", () => { syncToggles(); search(); });
  augment.addEventListener("change", search);
  indexSelect.addEventListener("change", search);
  document.addEventListener("keydown", (event) => {
    const active = document.activeElement;
    // shortcuts stay off while typing text, not while a checkbox has focus
    const typing = ["SELECT", "TEXTAREA"].includes(active.tagName) || (active.tagName === "INPUT" && active.type !== "checkbox");
    if (event.key === "/" && !typing) {
      event.preventDefault();
      q.focus();
      q.select();
    } else if (!typing && (event.key === "j" || event.key === "k")) {
      moveFocus(event.key === "j" ? 1 : -1);
    } else if (event.key === "Escape" && document.activeElement === q) {
      q.blur();
    }
  });
  loadIndices();
})();
