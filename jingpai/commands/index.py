"""``jingpai index PATH… --index NAME`` plus ``jingpai index status|prune|score-entities NAME``.

Every command here is a :class:`~jingpai.commands.base.JingpaiCommand`: jingpai's errors (bad corpus,
engine unreachable or refusing, index not jingpai's) end as one ``Error: …`` line without an ``except``
here; only setting checks that raise plain ``ValueError`` are caught.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from jingpai.commands.base import JingpaiGroup
from jingpai.commands.options import MODEL_DIR, ModelDir, Opt, engine_auth, engine_option, settings_from, settings_options
from jingpai.indexer.settings import MAX_DEPTH_CEILING, IndexSettings
from jingpai.indexer.readers import FORMATS
from jingpai.indexer.spark_settings import SparkIndexSettings
from jingpai.jobs.entity_settings import EntityScoreSettings

logger = logging.getLogger(__name__)


def _connect(url: str):  # noqa: ANN202 - an Engine
    # imported here: the engine client loads httpx, which `jingpai index --help` must not pay for
    from jingpai.engine.client import connect

    return connect(url, auth=engine_auth())


class _DefaultToRun(JingpaiGroup):
    """``jingpai index FILE…`` runs indexing; ``status`` / ``prune`` are sub-commands."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return "run", self.commands["run"], args

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("jingpai index", "PATH... --index NAME [OPTIONS] | status NAME | prune NAME | score-entities NAME --model DIR")


@click.group(cls=_DefaultToRun, invoke_without_command=False)
def index() -> None:
    """Index corpora with dictionary-augmented fields into a versioned index behind an alias."""


#: how IndexSettings' fields look on the command line (defaults and types come from IndexSettings)
RUN_OPTIONS: dict[str, Opt] = {
    "fmt": Opt(flag="--format", type=click.Choice(FORMATS), help="Corpus format (default: from the file suffix)."),
    "columns": Opt(csv=True, help="CSV/TSV column names, comma-separated, for files without a header row."),
    "id_field": Opt(help="Field holding the document id (default: content hash)."),
    "text_fields": Opt(csv=True, help="Comma-separated text fields."),
    "batch_size": Opt(type=click.IntRange(min=1)),
    "max_doc_bytes": Opt(type=click.IntRange(min=1), help="Quarantine documents larger than this as JSON with jingpai's fields."),
    "max_record_bytes": Opt(type=click.IntRange(min=1),
                            help="Quarantine input lines larger than this before parsing them (bounds memory)."),
    "max_depth": Opt(type=click.IntRange(1, MAX_DEPTH_CEILING),
                     help="Quarantine JSONL records nested deeper than this (objects and arrays) before parsing them "
                          "(default: the engines' default index.mapping.depth.limit)."),
    "max_rejected": Opt(type=click.FloatRange(0.0, 1.0),
                        help="Largest share of rejected records for the new index to replace the live one (0.01 = 1%)."),
    "force": Opt(help="Move the alias even if the new index is empty or over --max-rejected."),
    "keywords_top_k": Opt(flag="--keywords", type=click.IntRange(min=0), help="Keywords kept per document."),
    "rerank_keywords": Opt(help="Also store each document's keywords of the text the gateway reranks (jingpai.rk), so a "
                                "keyword reranker (kwbert, use-kw) on the same dictionary need not segment the hits (needs --dict)."),
    "quarantine_dir": Opt(type=click.Path(file_okay=False, path_type=Path)),
    "rebuild": Opt(help="Build a new physical index even if one exists for this dictionary."),
    "progress": Opt(flag="--no-progress", negate=True, help="No progress bar."),
    "concurrency": Opt(type=click.IntRange(min=1), help="Bulk requests in flight at once."),
    "vectors": Opt(metavar="MODEL", type=ModelDir(exists=False),
                   help="A saved bi-encoder (bi, use-bi) or a pretrained encoder's name (bge-small-zh): one vector per document, indexed for kNN search "
                        "(OpenSearch needs `jingpai engine up --plugins knn`; with --spark the folder is shipped to the executors)."),
    "vector_chunking": Opt(help="With --vectors, text longer than the model's window: embed its first window, "
                                "or the mean of its windows."),
    "vector_index": Opt(help="With --vectors, how the engine indexes them: an HNSW graph, or flat (no graph: faster "
                             "indexing, exact kNN search over every vector; for up to about 100k documents)."),
    "reuse_vectors": Opt(flag="--no-reuse-vectors", negate=True,
                         help="With --vectors, embed every document, even those whose text and vector the live index "
                              "already holds from the same model (by default their vectors are read back)."),
}


#: how SparkIndexSettings' fields look on the command line (with --spark)
SPARK_OPTIONS: dict[str, Opt] = {
    "master": Opt(help="With --spark: Spark master URL (default local[*], or the one spark-submit was given)."),
    "writer": Opt(flag="--spark-writer", help="With --spark: connector = the engine's official Spark connector "
                  "(needs --id-field); bulk = jingpai's bulk writer in the executors; auto = connector where it can write."),
    "connector": Opt(flag="--spark-connector", metavar="GROUP:ARTIFACT:VERSION",
                     help="With --spark: Maven coordinates of the connector (default: the engine's, docs/scale.md)."),
}


def _paths(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Local files must exist (click's check) unless --spark, which also reads hdfs://, s3a://, globs."""
    if ctx.params.get("spark"):
        return values
    return tuple(click.Path(exists=True, dir_okay=False, path_type=Path).convert(v, param, ctx) for v in values)


@index.command(name="run")
@click.option("--spark", is_flag=True, is_eager=True, envvar="JINGPAI_INDEX_SPARK",
              help="Segment, extract keywords and write in Spark executors (pip install 'jingpai[spark]'; docs/scale.md).")
@click.argument("paths", nargs=-1, required=True, callback=_paths)
@click.option("--index", "index_name", required=True, envvar="JINGPAI_INDEX_INDEX",
              help="Alias to index into (physical indices are NAME-<dict>-<n>).")
@engine_option("index")
@click.option("--dict", "dict_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              envvar="JINGPAI_INDEX_DICT", help="Dictionary directory from `jingpai dict build`.")
@settings_options("index", IndexSettings, RUN_OPTIONS)
@settings_options("index", SparkIndexSettings, SPARK_OPTIONS)
def run(spark, paths, index_name, engine_url, dict_dir, **values) -> None:
    """Index PATH… into --index (with --spark: on Spark; PATH may then be hdfs://, s3a://, a glob).

    The alias moves to the new physical index only if it is not empty and at most --max-rejected of the
    records were rejected; otherwise the command exits non-zero and the alias stays (docs/indexing.md).
    """
    from jingpai.indexer.pipeline import BuildCheckError, index_corpus

    settings = _checked(lambda: settings_from(IndexSettings, values, RUN_OPTIONS, index=index_name))
    spark_settings = _checked(lambda: settings_from(SparkIndexSettings, values, SPARK_OPTIONS))
    dictionary = _dictionary(dict_dir)
    try:
        embedder = _embedder(settings.vectors)  # a bad model folder fails before the engine is touched
        if spark:
            from jingpai.indexer.spark_index import index_corpus_spark

            report = index_corpus_spark(_connect(engine_url), paths, settings, spark_settings, dictionary=dictionary,
                                        embedder=embedder)
        else:
            report = index_corpus(_connect(engine_url), paths, settings, dictionary=dictionary, embedder=embedder)
    except BuildCheckError as exc:
        click.echo(exc.report.summary())
        if exc.report.rejected:
            click.echo(exc.report.rejections())
        raise
    except ValueError as exc:  # a setting the run checks itself (jingpai's own errors are JingpaiErrors)
        raise click.ClickException(str(exc)) from exc
    click.echo(report.summary())
    if report.rejected:
        click.echo(report.rejections())
    if report.check_failure:
        click.echo(f"--force: the alias moved although {report.check_failure}")


def _checked(make):
    """``make()``, with a plain ``ValueError`` of a settings check as click's ``Error: …``."""
    try:
        return make()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


def _embedder(model_dir: Path | None):  # noqa: ANN202 - a ModelEmbedder
    if model_dir is None:
        return None
    # imported here: it loads torch, which `jingpai index --help` must not pay for
    from jingpai.jobs.document_vectors import load_embedder

    return load_embedder(model_dir)


def _dictionary(dict_dir: Path | None):
    if dict_dir is None:
        return None
    from jingpai.keyword_dict import Dictionary

    return Dictionary.load(dict_dir)


@index.command()
@click.argument("name")
@engine_option("index")
def status(name: str, engine_url: str) -> None:
    """List the physical versions of index NAME and which one the alias serves."""
    from jingpai.indexer.versions import list_versions

    versions = list_versions(_connect(engine_url), name)
    if not versions:
        raise click.ClickException(f"no jingpai index versions named {name}-<dict>-<n> at {engine_url}")
    for v in versions:
        marker = "*" if v.aliased else " "
        flat = ", flat" if v.vector_index == "flat" else ""
        vectors = f"  vectors {v.vector_model} ({v.vector_dims}-d{flat})" if v.vector_model else ""
        click.echo(f"{marker} {v.name:<40} dict {v.dict_version:<13} docs {v.docs}{vectors}")


@index.command()
@click.argument("name")
@engine_option("index")
@click.option("--keep", type=click.IntRange(min=0), default=0, show_default=True, help="Idle versions to keep.")
def prune(name: str, engine_url: str, keep: int) -> None:
    """Delete physical versions of NAME that the alias no longer serves."""
    from jingpai.indexer.versions import delete_old_versions

    deleted = delete_old_versions(_connect(engine_url), name, keep=keep)
    click.echo("deleted: " + (", ".join(deleted) if deleted else "nothing"))


#: how EntityScoreSettings' fields look on the command line, before and after --dict
#: (``JINGPAI_INDEX_SCORE_ENTITIES_*``: ``JINGPAI_INDEX_*`` belongs to `jingpai index run`)
SCORE_ENTITIES_OPTIONS: dict[str, Opt] = {
    "entities": Opt(help="keywords: the document's jingpai.keywords; title-keywords: dictionary keywords of the title (needs --dict)."),
}
SCORE_ENTITIES_MORE_OPTIONS: dict[str, Opt] = {
    "title_field": Opt(help="Field whose entities are scored (default: first text field)."),
    "body_field": Opt(help="Field they are scored against (default: second text field)."),
    "max_entities": Opt(type=click.IntRange(min=1), help="Entities per document."),
    "batch_size": Opt(type=click.IntRange(min=1), help="Documents per batch / bulk request."),
}


@index.command(name="score-entities")
@click.argument("name")
@click.option("--model", "model_dir", required=True, type=MODEL_DIR,
              help="Saved jingpai model (bertca uses precomputed document encodings; others score pairs).")
@engine_option("index")
@settings_options("index_score_entities", EntityScoreSettings, SCORE_ENTITIES_OPTIONS)
@click.option("--dict", "dict_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Dictionary directory (for --entities title-keywords).")
@settings_options("index_score_entities", EntityScoreSettings, SCORE_ENTITIES_MORE_OPTIONS)
@click.option("--device", default=None, help="torch device (default: CUDA when available, else CPU).")
def score_entities_cmd(name, model_dir, engine_url, dict_dir, device, **values) -> None:
    """Score each document's title entities against its body with a model; write jingpai.entity_scores."""
    from jingpai.jobs.entity_scores import score_entities
    from jingpai.reranker.base import Reranker

    spec = {**SCORE_ENTITIES_OPTIONS, **SCORE_ENTITIES_MORE_OPTIONS}
    settings = _checked(lambda: settings_from(EntityScoreSettings, values, spec, index=name))
    dictionary = _dictionary(dict_dir)
    engine = _connect(engine_url)
    if not engine.index_exists(name):
        raise click.ClickException(f"no index or alias named {name!r} at {engine_url}")
    model = Reranker.load(model_dir, device=device)  # ModelLoadError is a JingpaiError: one line, exit 1
    report = _checked(lambda: score_entities(engine, model, settings, dictionary=dictionary))
    click.echo(report.summary())
    if report.failed:
        raise click.ClickException(
            f"{len(report.failed)} updates rejected, e.g. " + "; ".join(f"{k}: {v}" for k, v in list(report.failed.items())[:3])
        )
