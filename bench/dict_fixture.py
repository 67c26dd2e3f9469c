"""A real dictionary for benchmarks: built from THUCNews titles (part1) in ../shared/data."""

from __future__ import annotations

from pathlib import Path

from bench.common import DATA_DIR
from jingpai.keyword_dict import Dictionary, build_dictionary
from jingpai.keyword_dict.corpus import LabelledSpec, read_labelled


def thucnews_dictionary(out: Path | None = None) -> Dictionary:
    """Build (and optionally save) the 10-domain THUCNews title dictionary."""
    base = DATA_DIR / "zh" / "thucnews_titles"
    domains = read_labelled(base / "part1.tsv", LabelledSpec(label_column=1, text_column=0, label_names=base / "classes.txt"))
    dictionary = build_dictionary(domains)
    if out is not None:
        dictionary.save(out)
    return dictionary
