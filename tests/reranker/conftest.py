"""Fixtures for the reranker tests: a tiny random BERT checkpoint whose vocabulary covers real text."""

from __future__ import annotations

import csv
from itertools import islice
from pathlib import Path

import pytest

from jingpai.reranker.tiny import build_tiny_checkpoint


def read_tsv_pairs(path: Path, limit: int, *, skip_header: bool = False) -> list[tuple[str, str, int]]:
    """The first ``limit`` ``s1 s2 label`` rows of a shared-data TSV file."""
    rows: list[tuple[str, str, int]] = []
    with path.open(encoding="utf-8") as fh:
        lines = iter(fh)
        if skip_header:
            next(lines)
        for line in islice(lines, limit):
            parts = line.rstrip("\n").split("\t")
            rows.append((parts[-3], parts[-2], int(float(parts[-1]))))
    return rows


def sample_texts(shared_data: Path) -> list[str]:
    """A slice of real Chinese and English text (queries, documents) from the shared data."""
    texts: list[str] = []
    for rel, limit in (("zh/afqmc/train.tsv", 1500), ("zh/lcqmc/dev.tsv", 1000), ("zh/stsb/dev.tsv", 300)):
        for s1, s2, _ in read_tsv_pairs(shared_data / rel, limit):
            texts += [s1, s2]
    for s1, s2, _ in read_tsv_pairs(shared_data / "zh/pawsx/dev.tsv", 300, skip_header=True):
        texts += [s1, s2]
    for rel in ("en/trecqa/train/a.toks", "en/trecqa/train/b.toks", "en/wikiqa/dev/b.toks"):
        with (shared_data / rel).open(encoding="utf-8") as fh:
            texts += [line.strip() for line in islice(fh, 500)]
    return texts


@pytest.fixture(scope="session")
def tiny_bert_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random ``BertModel`` + ``BertTokenizer`` checkpoint built once per session."""
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-bert"), sample_texts(shared_data), seed=0)

