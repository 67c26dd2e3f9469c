"""Settings of the ``_search`` gateway: one frozen dataclass, built from CLI / env / config file in one place.

:func:`load_config_file` reads a TOML or JSON file whose keys are :class:`GatewaySettings` field names
(optionally under a ``[gateway]`` table); :mod:`jingpai.commands.gateway` merges it under the CLI and
``JINGPAI_GATEWAY_*`` environment values and builds the settings. Per-index fusion overrides live in the
file's ``indices`` table (:data:`INDEX_OVERRIDES`). :data:`CLI_FLAGS` names each field's ``jingpai gateway``
option, so :func:`setting_hint` can tell an operator where a setting is set without importing the command.
"""

from __future__ import annotations

# long: the gateway's one settings dataclass with its validation, its CLI-flag table and its config-file reader
import fnmatch
import json
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from jingpai.errors import UserError
from jingpai.plugin.answers import MAX_ANSWER_BYTES
from jingpai.plugin.augment import KEYWORD_BOOST, SEG_BOOST, WEIGHT_BOOST
from jingpai.reranker.fusion import FusionError, FusionMode, FusionSpec, ListFusion, ListFusionMode

GatewayMode = Literal["off", "augment", "rerank"]
GATEWAY_MODES: tuple[str, ...] = ("off", "augment", "rerank")
#: settings an ``indices.<name>`` table of the config file may override for that index
INDEX_OVERRIDES: tuple[str, ...] = ("fusion", "fusion_weight", "rrf_k", "hybrid", "hybrid_fusion", "hybrid_weight", "hybrid_k", "hybrid_rrf_k",
                                    "hybrid_rerank_window")
#: the hybrid ones among them (the rest are the rerank fusion's)
HYBRID_OVERRIDES: tuple[str, ...] = ("hybrid", "hybrid_fusion", "hybrid_weight", "hybrid_k", "hybrid_rrf_k", "hybrid_rerank_window")
#: which hits of a hybrid search are reranked: the fused list's top ``window``, or every hit in the top
#: ``window`` of either list (up to twice the window)
HybridRerankWindow = Literal["fused", "both"]
HYBRID_RERANK_WINDOWS: tuple[str, ...] = ("fused", "both")
#: the most nearest neighbours one kNN search asks for (both engines cap ``num_candidates`` at 10,000)
MAX_KNN_CANDIDATES = 10_000


class GatewayConfigError(UserError, ValueError):
    """A gateway setting or config file is invalid (the message names the setting and what was expected)."""


@dataclass(frozen=True)
class HybridSpec:
    """The hybrid first stage of a search on an index with document vectors: whether its full-text query also
    runs as a kNN search, how many neighbours that asks for and how the two lists fuse.

    Args:
        enabled: run the kNN search next to BM25 (on indices with vectors only).
        fusion: how BM25's list and kNN's list fuse (``weight`` is BM25's).
        k: neighbours asked for (``None``: as many hits as the BM25 search fetches, the rerank window or ``from + size``).
        num_candidates: the HNSW search breadth (``None``: ``max(100, 2k)``, at most :data:`MAX_KNN_CANDIDATES`).
        rerank_window: which hits a reranked hybrid search reranks: ``fused``, the fused list's top ``window``;
            ``both``, every hit in the top ``window`` of the BM25 list or of the kNN list (up to ``2 × window``),
            so the reranker sees all that BM25 + rerank would have seen, and kNN's top ``window`` besides.
    """

    enabled: bool = True
    fusion: ListFusion = field(default_factory=ListFusion)
    k: int | None = None
    num_candidates: int | None = None
    rerank_window: HybridRerankWindow = "fused"

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise GatewayConfigError(f"hybrid must be true or false, got {self.enabled!r}")
        for name in ("k", "num_candidates"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KNN_CANDIDATES):
                raise GatewayConfigError(f"hybrid {name} must be an integer in 1..{MAX_KNN_CANDIDATES}, got {value!r}")
        if self.k is not None and self.num_candidates is not None and self.num_candidates < self.k:
            raise GatewayConfigError(f"hybrid num_candidates ({self.num_candidates}) must be >= k ({self.k})")
        if self.rerank_window not in HYBRID_RERANK_WINDOWS:
            raise GatewayConfigError(f"hybrid rerank_window must be one of {', '.join(HYBRID_RERANK_WINDOWS)}, got {self.rerank_window!r}")

    def override(self, *, enabled: bool | None = None, fusion: str | None = None, weight: float | None = None, rrf_k: int | None = None,
                 k: int | None = None, num_candidates: int | None = None, rerank_window: str | None = None) -> HybridSpec:
        """This spec with the given values replaced (``None`` keeps this one's).

        Raises:
            GatewayConfigError: a value out of range (the message names it).
        """
        f = self.fusion
        try:
            fused = ListFusion(mode=fusion or f.mode, weight=f.weight if weight is None else weight,  # type: ignore[arg-type]
                               rrf_k=f.rrf_k if rrf_k is None else rrf_k)
        except FusionError as exc:
            raise GatewayConfigError(str(exc)) from exc
        return HybridSpec(enabled=self.enabled if enabled is None else enabled, fusion=fused, k=self.k if k is None else k,
                          num_candidates=self.num_candidates if num_candidates is None else num_candidates,
                          rerank_window=rerank_window or self.rerank_window)  # type: ignore[arg-type]

    def neighbours(self, depth: int) -> tuple[int, int]:
        """``(k, num_candidates)`` of a search whose BM25 list is ``depth`` hits deep."""
        k = min(self.k or depth, MAX_KNN_CANDIDATES)
        return k, max(k, self.num_candidates or min(max(100, 2 * k), MAX_KNN_CANDIDATES))


@dataclass(frozen=True)
class GatewaySettings:
    """Everything the gateway needs; passed to :func:`jingpai.plugin.gateway.create_app`.

    Args:
        engine_url: the Elasticsearch/OpenSearch REST endpoint every request is forwarded to.
        reranker_url: base URL of ``jingpai serve`` (TEI ``POST /rerank``); ``None`` disables reranking.
        host: interface to listen on.
        port: port to listen on.
        mode: default per-request behaviour (``?jingpai=`` overrides it per request).
        window: how many of the engine's top hits are reranked. Pages past the window continue in the
            engine's order (positions >= window are the engine's), so paging never repeats a hit. 20
            documents take a MiniLM-L6-class cross-encoder ~0.6 s on 2 CPU cores.
        max_window: requests with ``from + size`` beyond this are not reranked (reason ``window_exceeded``),
            and ``ext.jingpai.window`` may not exceed it.
        rerank_fields: document fields sent to the reranker, joined by newlines (``None``: the index's
            text fields, e.g. title then content).
        doc_chars: each document's text is cut to this many characters (title + start of content).
        timeout_ms: the deadline of a whole reranker call (connect, send, wait, read: a trickling body too); past it the
            engine order is returned (fail-open, ``reranker_timeout``). High enough for a CPU reranker to score ``window``
            documents. A search also waits at most this long for a free rerank slot (below) before it is served in the
            engine's order (``reranker_busy``), so reranking adds at most 2 × ``timeout_ms`` to any request.
        max_answer_bytes: the largest reranker or embedder answer read; a larger one fails open (``*_bad_response``).
        rerank_concurrency: reranker calls in flight at once across the whole gateway; more wait for a slot.
        msearch_rerank_concurrency: reranker calls in flight at once for one ``_msearch`` request, so one
            request of thousands of searches cannot flood the reranker or starve other clients.
        expose_internals: let ``GET /_jingpai/health`` show the engine and reranker URLs and the gateway's
            502/504/500 bodies name hosts and low-level errors. Off by default: anyone who can reach the
            gateway can read both without credentials (the details always go to the gateway's log).
        breaker_failures: consecutive reranker failures that open the circuit breaker.
        breaker_reset_s: how long an open breaker waits before letting one probe request through.
        dict_dirs: keyword dictionary directories; an index's dictionary is picked by version.
        dict_root: a directory of dictionary directories (``jingpai dict build --out <root>/…``, up to three
            levels down); a version an index names that is not loaded is looked up and loaded there on first
            use, without a restart (:mod:`jingpai.plugin.dictionaries`; ``POST /_jingpai/reload`` rescans it).
        keywords_top_k: dictionary keywords taken from a query for augmentation.
        seg_boost: boost of the added clause on the dictionary-segmented field.
        keyword_boost: boost of the added clause on the keywords field.
        weight_boost: boost of the added keyword-weight clause (0: not added). The three boosts' defaults
            are measured (:data:`jingpai.plugin.augment.SEG_BOOST` and its neighbours say where).
        engine_timeout_s: timeout of requests forwarded to the engine.
        engine_ca_file: PEM file of the CA of an ``https://`` engine's certificate (``None``: the system's CAs). The
            gateway has no engine credentials: every request it makes for a client carries that client's own headers.
        max_body_depth: deepest nesting (objects and arrays) of a JSON request body, or of one line of an
            NDJSON body (``_bulk``, ``_msearch``), that the gateway forwards; a deeper one is answered 400
            without reaching the engine (OpenSearch 2.19 dies of a ``StackOverflowError`` on a ``_bulk``
            document nested 5,000 deep). The default sits above everything the engines accept from a
            client: documents are limited to ``index.mapping.depth.limit`` (20) objects, and Elasticsearch
            8's deepest ``bool`` query (``indices.query.bool.max_nested_depth``: 30) nests about 92 levels
            (3 per ``bool``: the query, its ``must`` array, the clause).
        meta_ttl_s: how long an index's ``_meta`` (field roles, dictionary version) is cached; an
            alias swap to a new dictionary version is seen after at most this long.
        fusion: how the engine's and the model's scores combine (:mod:`jingpai.reranker.fusion`):
            ``replace`` (model only), ``linear`` (min-max normalised, weighted) or ``rrf``.
        fusion_weight: the *engine's* weight in [0, 1] for ``linear`` and ``rrf`` (the model's is 1 − w).
        rrf_k: the RRF constant.
        embed_url: the embedding service (TEI ``POST /embed``: ``jingpai serve`` with a bi-encoder such as
            ``use-bi``) that embeds a hybrid search's query text (``None``: ``reranker_url``).
        embed_timeout_ms: the deadline of an embedding call, whole; past it the search is served by BM25 alone
            (fail-open, ``jingpai.hybrid.reason: embed_timeout``).
        hybrid: on an index with document vectors (``jingpai index --vectors``), also run the query as kNN
            and fuse the two candidate lists before reranking (:class:`HybridSpec`).
        hybrid_fusion: ``rrf`` or ``linear`` fusion of the BM25 and kNN lists.
        hybrid_weight: BM25's weight in [0, 1] in that fusion (kNN's is 1 − w).
        hybrid_k: neighbours the kNN search asks for (``None``: as deep as the BM25 list).
        hybrid_rrf_k: the RRF constant of the hybrid fusion.
        hybrid_rerank_window: ``fused`` (rerank the fused list's top ``window``) or ``both`` (every hit in the
            top ``window`` of either list: up to twice the reranking work, a superset of BM25 + rerank's window).
        indices: per-index overrides of :data:`INDEX_OVERRIDES`, keyed by the index expression of the
            request (an exact name, else the first matching glob such as ``logs-*``); a request's
            ``ext.jingpai`` / ``?jingpai_fusion…`` parameters override these in turn.
    """

    engine_url: str
    reranker_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    mode: GatewayMode = "rerank"
    window: int = 20
    max_window: int = 500
    rerank_fields: tuple[str, ...] | None = None
    doc_chars: int = 512
    timeout_ms: int = 3000
    max_answer_bytes: int = MAX_ANSWER_BYTES
    rerank_concurrency: int = 8
    msearch_rerank_concurrency: int = 4
    expose_internals: bool = False
    breaker_failures: int = 3
    breaker_reset_s: float = 10.0
    dict_dirs: tuple[Path, ...] = ()
    dict_root: Path | None = None
    keywords_top_k: int = 10
    # the boosts' defaults are the augmentation's, defined once there
    seg_boost: float = SEG_BOOST
    keyword_boost: float = KEYWORD_BOOST
    weight_boost: float = WEIGHT_BOOST
    engine_timeout_s: float = 120.0
    engine_ca_file: Path | None = None
    max_body_depth: int = 100
    meta_ttl_s: float = 30.0
    # the fusion defaults are FusionSpec's, defined once there
    fusion: FusionMode = FusionSpec.mode
    fusion_weight: float = FusionSpec.weight
    rrf_k: int = FusionSpec.rrf_k
    embed_url: str | None = None
    embed_timeout_ms: int = 1000
    # the hybrid defaults are ListFusion's and HybridSpec's, defined once there
    hybrid: bool = HybridSpec.enabled
    hybrid_fusion: ListFusionMode = ListFusion.mode
    hybrid_weight: float = ListFusion.weight
    hybrid_k: int | None = None
    hybrid_rrf_k: int = ListFusion.rrf_k
    hybrid_rerank_window: HybridRerankWindow = HybridSpec.rerank_window
    indices: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.engine_url.startswith(("http://", "https://")):
            raise GatewayConfigError(f"engine_url must be an http(s) URL, got {self.engine_url!r}")
        for name in ("reranker_url", "embed_url"):
            url = getattr(self, name)
            if url is not None and not url.startswith(("http://", "https://")):
                raise GatewayConfigError(f"{name} must be an http(s) URL, got {url!r}")
        if self.mode not in GATEWAY_MODES:
            raise GatewayConfigError(f"mode must be one of {', '.join(GATEWAY_MODES)}, got {self.mode!r}")
        for name in ("window", "max_window", "doc_chars", "timeout_ms", "max_answer_bytes", "breaker_failures", "keywords_top_k",
                     "rerank_concurrency", "msearch_rerank_concurrency", "max_body_depth", "embed_timeout_ms"):
            if getattr(self, name) < 1:
                raise GatewayConfigError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.window > self.max_window:
            raise GatewayConfigError(f"window ({self.window}) must not exceed max_window ({self.max_window})")
        if self.breaker_reset_s <= 0 or self.engine_timeout_s <= 0 or self.meta_ttl_s < 0:
            raise GatewayConfigError("breaker_reset_s and engine_timeout_s must be > 0 and meta_ttl_s >= 0")
        object.__setattr__(self, "engine_url", self.engine_url.rstrip("/"))
        for name in ("reranker_url", "embed_url"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, getattr(self, name).rstrip("/"))
        if self.rerank_fields is not None:
            object.__setattr__(self, "rerank_fields", tuple(self.rerank_fields))
        object.__setattr__(self, "dict_dirs", tuple(Path(d) for d in self.dict_dirs))
        if self.dict_root is not None:
            object.__setattr__(self, "dict_root", Path(self.dict_root))
        if self.engine_ca_file is not None and not Path(self.engine_ca_file).is_file():
            raise GatewayConfigError(f"engine_ca_file {str(self.engine_ca_file)!r} does not exist; give the CA that signed the engine's certificate")
        try:
            default = FusionSpec(mode=self.fusion, weight=self.fusion_weight, rrf_k=self.rrf_k)
        except FusionError as exc:
            raise GatewayConfigError(str(exc)) from exc
        if not isinstance(self.indices, dict):
            raise GatewayConfigError(f"indices must be a table of index name -> {{{', '.join(INDEX_OVERRIDES)}}}, got {self.indices!r}")
        hybrid = HybridSpec().override(enabled=self.hybrid, fusion=self.hybrid_fusion, weight=self.hybrid_weight, rrf_k=self.hybrid_rrf_k,
                                       k=self.hybrid_k, rerank_window=self.hybrid_rerank_window)
        resolved: dict[str, tuple[FusionSpec, HybridSpec]] = {}
        for name, overrides in self.indices.items():
            resolved[name] = _index_fusion(default, hybrid, name, overrides)
        object.__setattr__(self, "indices", {name: dict(overrides) for name, overrides in self.indices.items()})
        object.__setattr__(self, "_fusion", (default, hybrid))
        object.__setattr__(self, "_index_fusion", resolved)

    @property
    def embedder_url(self) -> str | None:
        """Where query texts are embedded: ``embed_url``, else the reranker's URL."""
        return self.embed_url or self.reranker_url

    def _for(self, index: str | None) -> tuple[FusionSpec, HybridSpec]:
        if index:
            if index in self._index_fusion:
                return self._index_fusion[index]
            for pattern, specs in self._index_fusion.items():
                if fnmatch.fnmatchcase(index, pattern):
                    return specs
        return self._fusion

    def hybrid_for(self, index: str | None) -> HybridSpec:
        """The hybrid first stage for a search on ``index``, resolved like :meth:`fusion_for`."""
        return self._for(index)[1]

    def fusion_for(self, index: str | None) -> FusionSpec:
        """The fusion for a search on ``index`` (the request's index expression): its ``indices`` entry
        (exact name first, then the first matching glob in file order) over the gateway's."""
        return self._for(index)[0]

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


#: settings field -> its ``jingpai gateway`` option (the fields without one are config-file only). The command
#: builds its options from this table, so a hint never names an option that does not exist.
CLI_FLAGS: dict[str, str] = {
    "engine_url": "--engine",
    "reranker_url": "--reranker",
    "host": "--host",
    "port": "--port",
    "mode": "--mode",
    "window": "--window",
    "max_window": "--max-window",
    "rerank_fields": "--rerank-fields",
    "doc_chars": "--doc-chars",
    "timeout_ms": "--timeout-ms",
    "max_answer_bytes": "--max-answer-bytes",
    "rerank_concurrency": "--rerank-concurrency",
    "msearch_rerank_concurrency": "--msearch-rerank-concurrency",
    "expose_internals": "--expose-internals/--no-expose-internals",
    "breaker_failures": "--breaker-failures",
    "breaker_reset_s": "--breaker-reset-s",
    "dict_dirs": "--dict",
    "dict_root": "--dict-root",
    "keywords_top_k": "--keywords-top-k",
    "engine_timeout_s": "--engine-timeout-s",
    "engine_ca_file": "--engine-ca-file",
    "max_body_depth": "--max-body-depth",
    "meta_ttl_s": "--meta-ttl-s",
    "fusion": "--fusion",
    "fusion_weight": "--fusion-weight",
    "rrf_k": "--rrf-k",
    "embed_url": "--embedder",
    "embed_timeout_ms": "--embed-timeout-ms",
    "hybrid": "--hybrid/--no-hybrid",
    "hybrid_fusion": "--hybrid-fusion",
    "hybrid_weight": "--hybrid-weight",
    "hybrid_k": "--hybrid-k",
    "hybrid_rrf_k": "--hybrid-rrf-k",
    "hybrid_rerank_window": "--hybrid-rerank-window",
}
#: the environment variables of ``jingpai gateway``: this prefix + the option's name (``JINGPAI_<COMMAND>_<OPTION>``)
ENV_PREFIX = "JINGPAI_GATEWAY_"


def setting_hint(field_name: str) -> str:
    """Where an operator sets ``field_name``: its ``jingpai gateway`` option, environment variable and
    config-file key (for log messages that suggest raising a setting).

    >>> setting_hint("timeout_ms")
    '--timeout-ms (env JINGPAI_GATEWAY_TIMEOUT_MS, config key timeout_ms)'
    >>> setting_hint("seg_boost")
    'config key seg_boost'
    """
    flag = CLI_FLAGS.get(field_name)
    if flag is None:
        return f"config key {field_name}"
    option = flag.split("/")[0]
    env = ENV_PREFIX + option.lstrip("-").upper().replace("-", "_")
    return f"{option} (env {env}, config key {field_name})"


def _index_fusion(default: FusionSpec, hybrid: HybridSpec, name: str, overrides: Any) -> tuple[FusionSpec, HybridSpec]:
    if not isinstance(overrides, dict):
        raise GatewayConfigError(f"indices.{name} must be a table of {', '.join(INDEX_OVERRIDES)}, got {overrides!r}")
    unknown = sorted(set(overrides) - set(INDEX_OVERRIDES))
    if unknown:
        raise GatewayConfigError(f"unknown setting(s) {unknown} in indices.{name}; expected some of {list(INDEX_OVERRIDES)}")
    rerank = {k: v for k, v in overrides.items() if k not in HYBRID_OVERRIDES}
    first = {k.removeprefix("hybrid_"): v for k, v in overrides.items() if k in HYBRID_OVERRIDES}
    if "hybrid" in first:
        first["enabled"] = first.pop("hybrid")
    try:
        return default.override(**rerank), hybrid.override(**first)
    except (FusionError, GatewayConfigError) as exc:
        raise GatewayConfigError(f"indices.{name}: {exc}") from exc


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a gateway config file (``.toml`` or ``.json``) into a dict of setting name → value.

    Keys are :class:`GatewaySettings` field names, at the top level or under a ``gateway`` table.

    Raises:
        GatewayConfigError: unreadable file, bad syntax or unknown keys (the valid names are listed).

    Example:
        A ``gateway.toml``::

            [gateway]
            engine_url = "http://127.0.0.1:9200"
            reranker_url = "http://127.0.0.1:8081"
            window = 40
            dict_dirs = ["dicts/finance"]
            fusion = "linear"
            fusion_weight = 0.5

            [gateway.indices."products"]
            fusion = "rrf"
            rrf_k = 30
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GatewayConfigError(f"cannot read gateway config {path}: {exc}") from exc
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GatewayConfigError(f"gateway config {path} is not valid {'JSON' if path.suffix.lower() == '.json' else 'TOML'}: {exc}") from exc
    if not isinstance(data, dict):
        raise GatewayConfigError(f"gateway config {path} must hold a table/object of settings, got {type(data).__name__}")
    if isinstance(data.get("gateway"), dict):
        data = data["gateway"]
    valid = GatewaySettings.field_names()
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise GatewayConfigError(f"unknown setting(s) {unknown} in {path}; expected some of {valid}")
    return dict(data)


__all__ = [
    "CLI_FLAGS", "ENV_PREFIX", "GATEWAY_MODES", "HYBRID_OVERRIDES", "INDEX_OVERRIDES", "MAX_KNN_CANDIDATES", "GatewayConfigError",
    "GatewayMode", "GatewaySettings", "HybridSpec", "load_config_file", "setting_hint",
]
