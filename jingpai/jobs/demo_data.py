"""The demo's data steps: its keyword dictionary, the corpora it indexes and indexing them.

- dictionary: :func:`jingpai.keyword_dict.build_dictionary` over the THUCNews titles in the data directory
  (when present) plus the shipped demo corpus's categories, cached under the cache dir;
- corpora: the given one, else ``<data dir>/zh/cnews_sample/docs.tsv`` (converted to JSONL), else the
  shipped demo corpus; the shipped corpus of ambiguous names is always indexed too (``<index>-entities``), and
  without a given corpus the A14 stock-news passages when the data directory has them (``<index>-a14``: type a
  listed company's short name and watch rerank lift the passages that are really about the company).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jingpai.jobs.demo_settings import DemoError, DemoSettings, Echo

logger = logging.getLogger(__name__)

DEMO_CORPUS = Path(__file__).resolve().parent / "demo_corpus" / "news.jsonl"
#: bump when the dictionary recipe changes, so cached dictionaries are rebuilt
DICT_RECIPE = "demo-dict-1"
CNEWS = Path("zh") / "cnews_sample" / "docs.tsv"
THUCNEWS = Path("zh") / "thucnews_titles"
A14 = Path("zh") / "a14_stock_news" / "articles.jsonl"


def fingerprint(paths: Iterable[Path], extra: str = "") -> str:
    """A short hash of the files' paths, sizes and mtimes plus ``extra``: the cache key of what is built from them."""
    digest = hashlib.sha1(extra.encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.resolve()}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:12]


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file.

    Raises:
        DemoError: a line is not a JSON object (file and line named).
    """
    from jingpai.textio import numbered_lines

    records = []
    for line in numbered_lines(path):
        if line.error is not None:
            raise DemoError(str(line.error)) from line.error
        if not line.text.strip():
            continue
        try:
            record = json.loads(line.text)
        except json.JSONDecodeError as exc:
            raise DemoError(f"{path}:{line.number}: malformed JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise DemoError(f"{path}:{line.number}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records


def build_demo_dictionary(settings: DemoSettings, echo: Echo) -> tuple[Any, Path]:
    """``(Dictionary, directory)``: THUCNews title domains (if present) + the shipped corpus's categories, cached."""
    from jingpai.keyword_dict import Dictionary, DictionaryError, build_dictionary
    from jingpai.keyword_dict.corpus import LabelledSpec, read_labelled

    titles = settings.resolved_data_dir / THUCNEWS
    sources = [DEMO_CORPUS]
    has_titles = (titles / "part1.tsv").is_file() and (titles / "classes.txt").is_file()
    if has_titles:
        sources += [titles / "part1.tsv", titles / "classes.txt"]
    directory = settings.demo_dir / f"dict-{fingerprint(sources, DICT_RECIPE)}"
    if (directory / "meta.json").exists():
        try:
            dictionary = Dictionary.load(directory)
            echo(f"      cached dictionary {dictionary.version} ({len(dictionary)} words) from {directory}")
            return dictionary, directory
        except DictionaryError as exc:
            logger.warning("cached dictionary at %s is unusable (%s); rebuilding it", directory, exc)
    domains: dict[str, list[str]] = {}
    if has_titles:
        spec = LabelledSpec(label_column=1, text_column=0, label_names=titles / "classes.txt")
        domains.update(read_labelled(titles / "part1.tsv", spec))
        echo(f"      THUCNews titles: {sum(len(v) for v in domains.values())} titles in {len(domains)} domains from {titles}")
    else:
        logger.info("no THUCNews titles at %s; building the dictionary from the demo corpus only", titles)
        echo(f"      no THUCNews titles at {titles}: using the demo corpus's categories only")
    for record in read_jsonl(DEMO_CORPUS):
        domains.setdefault(str(record["category"]), []).append(f"{record['title']}\n{record['content']}")
    build_logger = logging.getLogger("jingpai.keyword_dict.build")
    level = build_logger.level
    # the shipped corpus's categories hold 3-37 documents each: the per-domain "coarse scores" warnings are
    # expected here, so the console gets one note instead of one warning per category
    build_logger.setLevel(logging.ERROR)
    try:
        dictionary = build_dictionary(domains)
    finally:
        build_logger.setLevel(level)
    small = sorted(name for name, docs in domains.items() if len(docs) < 20)
    if small:
        logger.info("demo dictionary: domains %s have < 20 documents; their diff-idf scores are coarse", small)
    dictionary.save(directory)
    echo(f"      built dictionary {dictionary.version}: {len(dictionary)} words in {len(dictionary.domain_names())} domains")
    return dictionary, directory


_SENTENCE_END = re.compile(r"[。！？!?]")


def cnews_title(article: str, *, max_chars: int = 40) -> str:
    """A title for a cnews article: its first sentence, cut to ``max_chars`` characters."""
    match = _SENTENCE_END.search(article)
    first = article[: match.start()] if match else article
    first = first.strip()
    return first if len(first) <= max_chars else first[:max_chars] + "…"


def convert_cnews(source: Path, target: Path) -> int:
    """Write ``label<TAB>article`` lines of the cnews sample as JSONL ``{id, title, content, category}``.

    Returns:
        The number of documents written.

    Raises:
        DemoError: a line without a tab or with an empty label/article (file and line named).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    count = 0
    with source.open(encoding="utf-8") as fh, partial.open("w", encoding="utf-8") as out:
        for number, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            label, sep, article = line.partition("\t")
            if not sep or not label.strip() or not article.strip():
                raise DemoError(f"{source}:{number}: expected `label<TAB>article` with both non-empty")
            record = {"id": f"cnews-{number:05d}", "title": cnews_title(article.strip()), "content": article.strip(), "category": label.strip()}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    partial.replace(target)
    return count


def convert_a14(source: Path, target: Path) -> int:
    """Write the A14 passages (JSONL ``{id, text}``) as JSONL ``{id, content}`` (the demo indexes ``title``/``content``).

    Returns:
        The number of passages written.

    Raises:
        DemoError: a line that is not a JSON object with a string ``id`` and a non-empty string ``text`` (file and
            line named).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    count = 0
    with source.open(encoding="utf-8") as fh, partial.open("w", encoding="utf-8") as out:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DemoError(f"{source}:{number}: not JSON ({exc.msg})") from exc
            if not (isinstance(record, dict) and isinstance(record.get("id"), str) and isinstance(record.get("text"), str)
                    and record["text"].strip()):
                raise DemoError(f"{source}:{number}: expected an object with a string `id` and a non-empty string `text`")
            out.write(json.dumps({"id": record["id"], "content": record["text"].strip()}, ensure_ascii=False) + "\n")
            count += 1
    partial.replace(target)
    return count


@dataclass(frozen=True)
class CorpusChoice:
    """One corpus to index: file, index alias, id field and where it came from."""

    path: Path
    index: str
    id_field: str | None
    origin: Literal["given", "cnews", "a14", "shipped"]


def choose_corpora(settings: DemoSettings, echo: Echo) -> list[CorpusChoice]:
    """The main corpus (given / cnews sample / shipped), the A14 passages when present and no corpus is given, and,
    when the main one is not it, the shipped one (last: the UI opens on it)."""
    from jingpai.indexer.readers import CorpusError, SourceRecord, read_corpus

    cnews = settings.resolved_data_dir / CNEWS
    if settings.corpus is not None:
        path = Path(settings.corpus)
        try:
            first = next((r for r in read_corpus(path) if isinstance(r, SourceRecord)), None)
        except CorpusError as exc:
            raise DemoError(f"index step: {exc}") from exc
        if first is None:
            raise DemoError(f"index step: corpus {path} holds no readable record")
        main = CorpusChoice(path, settings.index, "id" if "id" in first.fields else None, "given")
    elif cnews.is_file():
        target = settings.demo_dir / "corpora" / f"cnews-{fingerprint([cnews])}.jsonl"
        if not target.exists():
            count = convert_cnews(cnews, target)
            echo(f"      converted {count} cnews articles from {cnews}")
        main = CorpusChoice(target, settings.index, "id", "cnews")
    else:
        main = CorpusChoice(DEMO_CORPUS, settings.index, "id", "shipped")
    choices = [main]
    a14 = settings.resolved_data_dir / A14
    if settings.corpus is None and a14.is_file():
        target = settings.demo_dir / "corpora" / f"a14-{fingerprint([a14])}.jsonl"
        if not target.exists():
            count = convert_a14(a14, target)
            echo(f"      converted {count} A14 stock-news passages from {a14}")
        choices.append(CorpusChoice(target, f"{settings.index}-a14", "id", "a14"))
    if main.origin != "shipped":
        choices.append(CorpusChoice(DEMO_CORPUS, f"{settings.index}-entities", "id", "shipped"))
    return choices


def index_corpora(engine: Any, corpora: list[CorpusChoice], dictionary: Any, settings: DemoSettings, echo: Echo) -> None:
    """Index each corpus with the demo dictionary (resuming into an existing physical index)."""
    from jingpai.indexer.pipeline import IndexingError, IndexSettings, index_corpus
    from jingpai.indexer.readers import CorpusError

    for choice in corpora:
        index_settings = IndexSettings(
            index=choice.index, id_field=choice.id_field, quarantine_dir=settings.demo_dir / "quarantine", progress=settings.progress
        )
        try:
            report = index_corpus(engine, [choice.path], index_settings, dictionary=dictionary)
        except (IndexingError, CorpusError) as exc:
            raise DemoError(f"index step ({choice.path}): {exc}") from exc
        echo(f"      {choice.index} ← {choice.path} ({choice.origin}): {report.summary()}")
        if report.rejected:
            echo(f"      {report.rejected} records rejected, see {report.quarantine_file}")


def read_jsonl_or_records(path: Path) -> list[dict]:
    """Corpus records of any format the indexer reads (bad lines are skipped: the indexer quarantines them)."""
    from jingpai.indexer.readers import SourceRecord, read_corpus

    return [r.fields for r in read_corpus(path) if isinstance(r, SourceRecord)]


__all__ = [
    "A14", "CNEWS", "DEMO_CORPUS", "DICT_RECIPE", "THUCNEWS", "CorpusChoice", "build_demo_dictionary", "choose_corpora", "cnews_title",
    "convert_a14", "convert_cnews", "fingerprint", "index_corpora", "read_jsonl", "read_jsonl_or_records",
]
