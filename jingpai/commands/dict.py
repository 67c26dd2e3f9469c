"""``jingpai dict build|show|diff``."""

from __future__ import annotations

import logging
from pathlib import Path

import click

logger = logging.getLogger(__name__)


def _parse_domain(value: str) -> tuple[str, Path]:
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise click.BadParameter(f"expected NAME=PATH, got {value!r}", param_hint="--domain")
    return name.strip(), Path(path.strip())


@click.group(name="dict")
def dict_group() -> None:
    """Build, show and compare domain keyword dictionaries."""


@dict_group.command()
@click.option("--domain", "domain_specs", multiple=True, metavar="NAME=PATH", help="A domain corpus (JSONL or one document per line); repeatable.")
@click.option("--labelled", "labelled", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="TSV file whose rows carry a domain label; repeatable.")
@click.option("--label-column", type=click.IntRange(min=0), default=0, show_default=True, help="0-based label column of --labelled files.")
@click.option("--text-column", type=click.IntRange(min=0), default=1, show_default=True, help="0-based text column of --labelled files.")
@click.option("--label-names", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="File naming label ids 0,1,… one per line (e.g. THUCNews classes.txt).")
@click.option("--encoding", default="utf-8", show_default=True, help="Encoding of every corpus file (e.g. gb18030 for GBK text).")
@click.option("--text-field", "text_fields", default="text", show_default=True, help="JSONL text field(s), comma-separated.")
@click.option("--background", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="Anti-domain corpus (default: the other domains).")
@click.option("--min-n", type=click.IntRange(min=1), default=2, show_default=True, help="Shortest new word, in characters (a Latin/digit run counts as one).")
@click.option("--max-n", type=click.IntRange(min=1), default=6, show_default=True, help="Longest new word.")
@click.option("--min-count", type=click.IntRange(min=1), default=5, show_default=True, help="Minimum n-gram occurrences in the domain.")
@click.option("--min-pmi", type=float, default=3.0, show_default=True, help="Minimum PMI of the weakest split.")
@click.option("--min-entropy", type=float, default=1.0, show_default=True, help="Minimum left and right neighbour entropy.")
@click.option("--known-words/--no-known-words", default=True, show_default=True, help="Also score the segmenter's own words.")
@click.option("--smoothing", "smoothing", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True, help="λ in diff-idf.")
@click.option("--min-score", type=float, default=0.5, show_default=True, help="diff-idf threshold.")
@click.option("--min-df", type=click.IntRange(min=1), default=2, show_default=True, help="Minimum documents in the domain containing the word.")
@click.option("--top-n", type=click.IntRange(min=1), default=5000, show_default=True, help="Words kept per domain.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Dictionary directory to write.")
def build(domain_specs, labelled, label_column, text_column, label_names, encoding, text_fields, background, min_n, max_n, min_count,
          min_pmi, min_entropy, known_words, smoothing, min_score, min_df, top_n, out_dir) -> None:
    """Build a dictionary from domain corpora and write it to --out."""
    from jingpai.keyword_dict import BuildError, BuildSettings, DiscoverySettings, build_dictionary
    from jingpai.keyword_dict.corpus import CorpusReadError, LabelledSpec, read_documents, read_labelled

    fields = tuple(f.strip() for f in text_fields.split(",") if f.strip())
    try:
        settings = BuildSettings(
            discovery=DiscoverySettings(min_n=min_n, max_n=max_n, min_count=min_count, min_pmi=min_pmi, min_entropy=min_entropy),
            known_words=known_words,
            smoothing=smoothing,
            min_score=min_score,
            min_df=min_df,
            top_n=top_n,
        )
        domains: dict[str, list[str]] = {}
        sources: dict[str, list[Path]] = {}  # where each domain's documents came from, for error messages
        for spec in domain_specs:
            name, path = _parse_domain(spec)
            domains.setdefault(name, []).extend(read_documents(path, text_fields=fields, encoding=encoding))
            sources.setdefault(name, []).append(path)
        for path in labelled:
            for name, docs in read_labelled(path, LabelledSpec(label_column, text_column, label_names), encoding=encoding).items():
                domains.setdefault(name, []).extend(docs)
                sources.setdefault(name, []).append(path)
        if not domains:
            raise click.UsageError("give domain corpora with --domain NAME=PATH and/or --labelled FILE")
        bg = list(read_documents(background, text_fields=fields, encoding=encoding)) if background else None
        click.echo(f"building from {len(domains)} domains ({sum(map(len, domains.values()))} documents) …", err=True)
        try:
            dictionary = build_dictionary(domains, background=bg, settings=settings)
        except BuildError as exc:
            origin = "; ".join(f"domain {d!r} was read from {', '.join(map(str, sources[d]))}" for d in exc.domains[:5] if d in sources)
            raise click.ClickException(f"{exc} ({origin})" if origin else str(exc)) from exc
    except (ValueError, CorpusReadError) as exc:
        raise click.ClickException(str(exc)) from exc
    dictionary.save(out_dir)
    per = ", ".join(f"{d} {len(dictionary.domain_words(d))}" for d in dictionary.domain_names())
    click.echo(f"dictionary {dictionary.version}: {len(dictionary)} words ({per}) → {out_dir}")


def _load(path: Path):
    from jingpai.keyword_dict import Dictionary, DictionaryError

    try:
        return Dictionary.load(path)
    except DictionaryError as exc:
        raise click.ClickException(str(exc)) from exc


@dict_group.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--domain", default=None, help="Only this domain.")
@click.option("--top", "top", type=click.IntRange(min=1), default=20, show_default=True, help="Words per domain.")
def show(directory: Path, domain: str | None, top: int) -> None:
    """Print a dictionary's version, size and best words per domain."""
    from jingpai.keyword_dict import DictionaryError

    d = _load(directory)
    click.echo(f"version {d.version}  created {d.created}  words {len(d)}")
    try:
        names = [domain] if domain else d.domain_names()
        for name in names:
            words = d.domain_words(name)
            click.echo(f"\n[{name}] {len(words)} words")
            for w in words[:top]:
                click.echo(f"  {w}\t{d.domains(w)[name]:.3f}\tfreq {d.freq(w)}")
    except DictionaryError as exc:
        raise click.ClickException(str(exc)) from exc


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
