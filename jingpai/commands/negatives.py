"""``jingpai negatives``: sample training negatives (keyword overlap + entity replacement via the engine, or random).

Example::

    jingpai negatives --data ../shared/data/zh/afqmc/train.tsv --dict dicts/fin --engine http://127.0.0.1:9200 \\
        --index afqmc-questions --build-index --out afqmc_with_negatives.tsv

The sampling options come from :class:`~jingpai.reranker.negatives.NegativeSettings` (environment
variables ``JINGPAI_NEGATIVES_<OPTION>``); ``--engine`` is also read from ``JINGPAI_ENGINE_URL``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from jingpai.commands.base import JingpaiCommand
from jingpai.commands.options import SHARED_ENGINE_ENV, Opt, engine_auth, engine_option, env_name, settings_from, settings_options
from jingpai.reranker.data import FORMATS
from jingpai.reranker.negatives import NegativeResult, NegativeSettings

logger = logging.getLogger(__name__)

#: NegativeSettings' fields in the order the options have always been listed, around the other options
STRATEGY_OPTION = {"strategy": Opt()}
FIELD_OPTION = {"field": Opt(help="Index field holding the candidate text.")}
RULE_OPTIONS: dict[str, Opt] = {
    "alpha": Opt(help="Keep Q when Sim(q,Q)/Sim(q,q) < alpha."),
    "beta": Opt(help="Keep Q when keyword overlap > beta."),
    "candidates": Opt(type=click.IntRange(min=1)),
    "per_query": Opt(type=click.IntRange(min=1)),
    "replace_ratio": Opt(type=click.FloatRange(0, 1), help="Share of queries that also get an entity-replacement negative."),
}
SEED_OPTION = {"seed": Opt(), "max_queries": Opt(type=click.IntRange(min=1), help="window strategy: mine at most this many queries.")}
NEGATIVE_OPTIONS: dict[str, Opt] = {**STRATEGY_OPTION, **FIELD_OPTION, **RULE_OPTIONS, **SEED_OPTION}


@click.command(cls=JingpaiCommand)
@click.option("--data", "data_path", required=True, type=click.Path(exists=True, path_type=Path),
              help="Labelled pairs: their queries get negatives; label >= --relevant-min pairs are known positives.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@settings_options("negatives", NegativeSettings, STRATEGY_OPTION)
@engine_option("negatives", help=f"Engine URL [env {env_name('negatives', '--engine')} or {SHARED_ENGINE_ENV}] (keyword strategy).")
@click.option("--index", "index_name", default=None, help="Index/alias with the candidate texts (keyword strategy).")
@click.option("--build-index", is_flag=True, help="First index every text of --data into --index (which must not exist).")
@settings_options("negatives", NegativeSettings, FIELD_OPTION)
@click.option("--dict", "dict_dir", type=click.Path(exists=True, file_okay=False), default=None, help="Keyword dictionary folder.")
@settings_options("negatives", NegativeSettings, RULE_OPTIONS)
@click.option("--relevant-min", type=float, default=1.0, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Read at most this many pairs.")
@settings_options("negatives", NegativeSettings, SEED_OPTION)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Output TSV: the positives of --data plus the sampled negatives.")
def negatives(data_path, fmt, engine_url, index_name, build_index, dict_dir, relevant_min, limit, out_path, **values) -> None:
    """Sample negatives (keyword-overlap + entity replacement, the gateway's window, or random) and write training pairs."""
    from jingpai.reranker.data import read_pairs, write_pairs

    try:
        pairs = read_pairs(data_path, format=fmt, limit=limit)
        settings = settings_from(NegativeSettings, values, NEGATIVE_OPTIONS)
        positives = [p for p in pairs if p.label >= relevant_min]
        known: dict[str, set[str]] = {}
        for p in positives:
            known.setdefault(p.query, set()).add(p.document)
        queries = [p.query for p in pairs]
        pool = list(dict.fromkeys(t for p in pairs for t in (p.query, p.document)))
        if settings.strategy == "window":
            _windows(pairs, settings, engine_url=engine_url, index_name=index_name, dict_dir=dict_dir, relevant_min=relevant_min,
                     out_path=out_path)
            return
        result = _sample(queries, pool, known, settings, engine_url=engine_url, index_name=index_name, dict_dir=dict_dir,
                         build_index=build_index)
        write_pairs(positives + result.pairs, out_path)
    except (ValueError, OSError) as exc:  # bad input (the engine's errors are JingpaiErrors, caught by the command)
        raise click.ClickException(str(exc)) from exc
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.stats.items()))
    click.echo(f"wrote {len(positives)} positives and {len(result.pairs)} negatives to {out_path} ({counts})")


def _windows(pairs: list, settings: NegativeSettings, *, engine_url: str, index_name: str | None, dict_dir: str | None,
             relevant_min: float, out_path: Path) -> None:
    """The ``window`` strategy: every mined query's labelled pairs and its clean window negatives, grouped by query."""
    from jingpai.engine.client import connect
    from jingpai.jobs.windows import WindowSettings, mine_windows
    from jingpai.keyword_dict import Dictionary
    from jingpai.reranker.data import write_pairs

    if index_name is None or dict_dir is None:
        raise click.UsageError("the window strategy needs --index (the alias it builds or reuses) and --dict")
    engine = connect(engine_url, auth=engine_auth())
    try:
        result = mine_windows(pairs, engine=engine, dictionary=Dictionary.load(dict_dir), settings=WindowSettings(
            index=index_name, window=settings.candidates, per_query=settings.per_query, max_queries=settings.max_queries,
            relevant_min=relevant_min, seed=settings.seed))
    finally:
        engine.close()
    write_pairs(result.pairs, out_path)
    counts = ", ".join(f"{k} {v}" for k, v in result.stats.items())
    click.echo(f"wrote {len(result.pairs)} pairs to {out_path} ({counts})")


def _sample(queries: list[str], pool: list[str], known: dict[str, set[str]], settings: NegativeSettings, *, engine_url: str,
            index_name: str | None, dict_dir: str | None, build_index: bool) -> NegativeResult:
    """The strategy's negatives: random from ``pool``, or retrieved from ``--index`` (built first with ``--build-index``)."""
    from jingpai.jobs.negatives import index_texts, sample_negatives

    if settings.strategy == "random":
        return sample_negatives(queries, settings=settings, positives=known, pool=pool)
    if index_name is None or dict_dir is None:
        raise click.UsageError("the keyword strategy needs --index and --dict")
    from jingpai.engine.client import connect
    from jingpai.keyword_dict import Dictionary

    engine = connect(engine_url, auth=engine_auth())
    if build_index:
        if engine.index_exists(index_name):
            raise click.ClickException(f"index {index_name!r} exists; drop --build-index to sample from it as it is")
        index_texts(engine, index_name, pool, field_name=settings.field)
    return sample_negatives(queries, engine=engine, index=index_name, dictionary=Dictionary.load(dict_dir),
                            settings=settings, positives=known)


__all__ = ["NEGATIVE_OPTIONS", "negatives"]
