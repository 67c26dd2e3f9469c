"""``jingpai dict build|show|diff``.

The build's thresholds are generated from :class:`~jingpai.keyword_dict.build.BuildSettings`,
:class:`~jingpai.keyword_dict.discovery.DiscoverySettings`,
:class:`~jingpai.keyword_dict.corpus.LabelledSpec` and :class:`~jingpai.keyword_dict.settings.SparkBuildSettings`
(defaults live there); ``--spark`` runs the same build as Spark jobs (docs/scale.md); jingpai's errors (unreadable
corpus, bad dictionary) end as one ``Error: …`` line through :class:`~jingpai.commands.base.JingpaiGroup`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from jingpai.commands.base import JingpaiGroup
from jingpai.commands.options import Opt, settings_from, settings_options
from jingpai.keyword_dict.settings import BuildSettings, DiscoverySettings, SparkBuildSettings
from jingpai.keyword_dict.corpus import LabelledSpec, read_documents, read_labelled
from jingpai.keyword_dict.spark_corpus import spark_only

logger = logging.getLogger(__name__)


def _parse_domain(value: str) -> tuple[str, Path | str]:
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise click.BadParameter(f"expected NAME=PATH, got {value!r}", param_hint="--domain")
    path = path.strip()
    return name.strip(), path if spark_only(path) else Path(path)


class _CorpusFile(click.ParamType):
    """An existing local file, or (read by ``--spark`` only) a URI or glob Spark reads, kept as text."""

    name = "path"

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        if isinstance(value, str) and spark_only(value):
            return value
        return click.Path(exists=True, dir_okay=False, path_type=Path).convert(value, param, ctx)


def _local_only(paths) -> None:  # noqa: ANN001 - paths and URIs
    remote = [str(p) for p in paths if isinstance(p, str)]
    if remote:
        raise click.UsageError(f"{remote[0]} is read by Spark only: add --spark (local builds read local files)")


@click.group(name="dict", cls=JingpaiGroup)
def dict_group() -> None:
    """Build, show and compare domain keyword dictionaries."""


#: how the settings dataclasses' fields look on `jingpai dict build` (env ``JINGPAI_DICT_BUILD_*``)
LABELLED_OPTIONS: dict[str, Opt] = {
    "label_column": Opt(type=click.IntRange(min=0), help="0-based label column of --labelled files."),
    "text_column": Opt(type=click.IntRange(min=0), help="0-based text column of --labelled files."),
    "label_names": Opt(type=click.Path(exists=True, dir_okay=False, path_type=Path),
                       help="File naming label ids 0,1,… one per line (e.g. THUCNews classes.txt)."),
}
DISCOVERY_OPTIONS: dict[str, Opt] = {
    "min_n": Opt(type=click.IntRange(min=1), help="Shortest new word, in characters (a Latin/digit run counts as one)."),
    "max_n": Opt(type=click.IntRange(min=1), help="Longest new word."),
    "min_count": Opt(type=click.IntRange(min=1), help="Minimum n-gram occurrences in the domain."),
    "min_pmi": Opt(help="Minimum PMI of the weakest split."),
    "min_entropy": Opt(help="Minimum left and right neighbour entropy."),
}
SPARK_OPTIONS: dict[str, Opt] = {
    "spark": Opt(help="Run the build as Spark jobs (same dictionary; needs jingpai[spark] and Java 17; see docs/scale.md)."),
    "master": Opt(help="Spark master URL for --spark: local[N], spark://HOST:7077, yarn, k8s://… [default: local[*], or spark-submit's --master]."),
}
BUILD_OPTIONS: dict[str, Opt] = {
    "known_words": Opt(flag="--known-words/--no-known-words", help="Also score the segmenter's own words."),
    "smoothing": Opt(type=click.FloatRange(min=0, min_open=True), help="λ in diff-idf."),
    "min_score": Opt(help="diff-idf threshold."),
    "min_df": Opt(type=click.IntRange(min=1), help="Minimum documents in the domain containing the word."),
    "top_n": Opt(type=click.IntRange(min=1), help="Words kept per domain."),
}


@dict_group.command()
@click.option("--domain", "domain_specs", multiple=True, metavar="NAME=PATH", help="A domain corpus (JSONL or one document per line); repeatable. With --spark, PATH may be an hdfs://, s3a:// … URI or a glob.")
@click.option("--labelled", "labelled", multiple=True, type=_CorpusFile(), help="TSV file whose rows carry a domain label; repeatable (a URI or glob with --spark).")
@settings_options("dict_build", LabelledSpec, LABELLED_OPTIONS)
@click.option("--encoding", default="utf-8", show_default=True, help="Encoding of every corpus file (e.g. gb18030 for GBK text).")
@click.option("--text-field", "text_fields", default="text", show_default=True, help="JSONL text field(s), comma-separated.")
@click.option("--background", type=_CorpusFile(), default=None, help="Anti-domain corpus (default: the other domains).")
@settings_options("dict_build", DiscoverySettings, DISCOVERY_OPTIONS)
@settings_options("dict_build", BuildSettings, BUILD_OPTIONS)
@settings_options("dict_build", SparkBuildSettings, SPARK_OPTIONS)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Dictionary directory to write.")
def build(domain_specs, labelled, encoding, text_fields, background, out_dir, **values) -> None:
    """Build a dictionary from domain corpora and write it to --out."""
    from jingpai.keyword_dict import BuildError

    fields = tuple(f.strip() for f in text_fields.split(",") if f.strip())
    try:
        settings = settings_from(BuildSettings, values, BUILD_OPTIONS, discovery=settings_from(DiscoverySettings, values, DISCOVERY_OPTIONS))
        spec = settings_from(LabelledSpec, values, LABELLED_OPTIONS)
        where = settings_from(SparkBuildSettings, values, SPARK_OPTIONS)
        specs = [_parse_domain(value) for value in domain_specs]
        if not specs and not labelled:
            raise click.UsageError("give domain corpora with --domain NAME=PATH and/or --labelled FILE")
        inputs = dict(specs=specs, labelled=labelled, background=background, spec=spec, fields=fields, encoding=encoding)
        run = _build_spark if where.spark else _build_local
        sources: dict[str, list] = {}  # where each domain's documents came from, for error messages
        dictionary = run(**inputs, sources=sources, settings=settings, master=where.master)
    except BuildError as exc:
        origin = "; ".join(f"domain {d!r} was read from {', '.join(map(str, sources[d]))}" for d in exc.domains[:5] if d in sources)
        raise click.ClickException(f"{exc} ({origin})" if origin else str(exc)) from exc
    except ValueError as exc:  # settings checks and an unusable --encoding (corpus errors are JingpaiErrors)
        raise click.ClickException(str(exc)) from exc
    dictionary.save(out_dir)
    per = ", ".join(f"{d} {len(dictionary.domain_words(d))}" for d in dictionary.domain_names())
    click.echo(f"dictionary {dictionary.version}: {len(dictionary)} words ({per}) → {out_dir}")


def _build_local(*, specs, labelled, background, spec: LabelledSpec, fields: tuple[str, ...], encoding: str, sources, settings, master):  # noqa: ANN001, ANN202
    """The dictionary, built in this process; fills ``sources`` with ``{domain: files it was read from}``."""
    from jingpai.keyword_dict import build_dictionary

    _local_only([p for _, p in specs] + list(labelled) + ([background] if background else []))
    domains: dict[str, list[str]] = {}
    for name, path in specs:
        domains.setdefault(name, []).extend(read_documents(path, text_fields=fields, encoding=encoding))
        sources.setdefault(name, []).append(path)
    for path in labelled:
        for name, docs in read_labelled(path, spec, encoding=encoding).items():
            domains.setdefault(name, []).extend(docs)
            sources.setdefault(name, []).append(path)
    bg = list(read_documents(background, text_fields=fields, encoding=encoding)) if background else None
    click.echo(f"building from {len(domains)} domains ({sum(map(len, domains.values()))} documents) …", err=True)
    return build_dictionary(domains, background=bg, settings=settings)


def _build_spark(*, specs, labelled, background, spec: LabelledSpec, fields: tuple[str, ...], encoding: str, sources, settings, master):  # noqa: ANN001, ANN202
    """The dictionary, built as Spark jobs on ``master``; fills ``sources`` with ``{domain: inputs it was read from}``."""
    from jingpai.keyword_dict.spark_build import build_dictionary_spark
    from jingpai.keyword_dict.spark_corpus import Source
    from jingpai.spark import spark_session

    inputs = [Source("domain", str(path), name) for name, path in specs] + [Source("labelled", str(path)) for path in labelled]
    if background:
        inputs.append(Source("background", str(background)))
    session = spark_session(app_name="jingpai dict build", master=master)
    click.echo(f"building with Spark on {session.sparkContext.master} from {len(inputs)} input(s) …", err=True)
    try:
        return build_dictionary_spark(session, inputs, spec=spec, text_fields=fields, encoding=encoding, settings=settings, origins=sources)
    finally:
        session.stop()


def _load(path: Path):
    from jingpai.keyword_dict import Dictionary

    return Dictionary.load(path)


@dict_group.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--domain", default=None, help="Only this domain.")
@click.option("--top", "top", type=click.IntRange(min=1), default=20, show_default=True, help="Words per domain.")
def show(directory: Path, domain: str | None, top: int) -> None:
    """Print a dictionary's version, size and best words per domain."""
    d = _load(directory)
    click.echo(f"version {d.version}  created {d.created}  words {len(d)}")
    names = [domain] if domain else d.domain_names()
    for name in names:
        words = d.domain_words(name)
        click.echo(f"\n[{name}] {len(words)} words")
        for w in words[:top]:
            click.echo(f"  {w}\t{d.domains(w)[name]:.3f}\tfreq {d.freq(w)}")


@dict_group.command()
@click.argument("old", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("new", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--top", "top", type=click.IntRange(min=0), default=20, show_default=True, help="Examples listed per change kind.")
def diff(old: Path, new: Path, top: int) -> None:
    """Words added, removed and re-scored between two dictionaries."""
    a, b = _load(old), _load(new)
    rows_a = {(e.word, e.domain): e.score for e in a.entries()}
    rows_b = {(e.word, e.domain): e.score for e in b.entries()}
    added = sorted(set(rows_b) - set(rows_a), key=lambda k: -rows_b[k])
    removed = sorted(set(rows_a) - set(rows_b), key=lambda k: -rows_a[k])
    changed = sorted(
        (k for k in set(rows_a) & set(rows_b) if abs(rows_a[k] - rows_b[k]) > 1e-6),
        key=lambda k: -abs(rows_b[k] - rows_a[k]),
    )
    click.echo(f"{a.version} → {b.version}: +{len(added)} added, -{len(removed)} removed, ~{len(changed)} re-scored (word, domain) rows")
    for label, keys, fmt in (
        ("added", added, lambda k: f"{rows_b[k]:.3f}"),
        ("removed", removed, lambda k: f"{rows_a[k]:.3f}"),
        ("re-scored", changed, lambda k: f"{rows_a[k]:.3f} → {rows_b[k]:.3f}"),
    ):
        for k in keys[:top]:
            click.echo(f"  {label:<9} {k[0]}\t{k[1]}\t{fmt(k)}")
