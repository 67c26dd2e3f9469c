"""``jingpai dict build|show|diff`` through the real CLI."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from click.testing import CliRunner

from jingpai.cli import cli


def test_build_show_diff(tmp_path: Path, shared_data: Path) -> None:
    base = shared_data / "zh/thucnews_titles"
    runner = CliRunner()
    args = ["--label-column", "1", "--text-column", "0", "--label-names", str(base / "classes.txt")]
    r1 = runner.invoke(cli, ["dict", "build", "--labelled", str(base / "part1.tsv"), *args, "--out", str(tmp_path / "d1")])
    assert r1.exit_code == 0, r1.output
    meta = json.loads((tmp_path / "d1/meta.json").read_text())
    assert meta["params"]["discovery"]["max_n"] == 6 and meta["params"]["smoothing"] == 1.0
    assert f"dictionary {meta['version']}" in r1.output
    r2 = runner.invoke(cli, ["dict", "build", "--labelled", str(base / "part1.tsv"), *args, "--min-score", "2.0", "--out", str(tmp_path / "d2")])
    assert r2.exit_code == 0, r2.output
    shown = runner.invoke(cli, ["dict", "show", str(tmp_path / "d1"), "--domain", "sports", "--top", "3"])
    assert shown.exit_code == 0 and "[sports]" in shown.output and len(shown.output.splitlines()) == 6
    d = runner.invoke(cli, ["dict", "diff", str(tmp_path / "d1"), str(tmp_path / "d2"), "--top", "2"])
    assert d.exit_code == 0
    assert "+0 added" in d.output and "removed" in d.output


def test_domain_files_and_errors(tmp_path: Path) -> None:
    fin = tmp_path / "fin.jsonl"
    fin.write_text("\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in ["基金净值上涨", "基金经理调仓", "基金大涨"] * 2), encoding="utf-8")
    spo = tmp_path / "sports.txt"
    spo.write_text("\n".join(["球队客场取胜", "球队主场失利", "球队训练"] * 2), encoding="utf-8")
    runner = CliRunner()
    ok = runner.invoke(cli, ["dict", "build", "--domain", f"finance={fin}", "--domain", f"sports={spo}", "--out", str(tmp_path / "d")])
    assert ok.exit_code == 0, ok.output
    assert "基金" in (tmp_path / "d/keywords/finance.txt").read_text(encoding="utf-8")
    bad = runner.invoke(cli, ["dict", "build", "--domain", "finance", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "expected NAME=PATH, got 'finance'" in bad.output
    none = runner.invoke(cli, ["dict", "show", str(tmp_path)])
    assert none.exit_code == 1 and "dictionary.tsv is missing" in none.output
    unknown = runner.invoke(cli, ["dict", "show", str(tmp_path / "d"), "--domain", "x"])
    assert unknown.exit_code == 1 and "unknown domain 'x'; expected one of finance, sports" in unknown.output


FIN = ["基金净值上涨", "基金经理调仓", "基金大涨"] * 2
SPO = ["球队客场取胜", "球队主场失利", "球队训练"] * 2


def _build(*args: object):
    return CliRunner().invoke(cli, ["dict", "build", *map(str, args)])


def test_gbk_corpora_are_named_and_read_with_encoding(tmp_path: Path) -> None:
    fin, spo = tmp_path / "fin.txt", tmp_path / "sports.txt"
    fin.write_bytes("\n".join(FIN).encode("gbk"))
    spo.write_bytes("\n".join(SPO).encode("gbk"))
    domains = ["--domain", f"finance={fin}", "--domain", f"sports={spo}"]
    r = _build(*domains, "--out", tmp_path / "d")
    assert r.exit_code == 1 and not (tmp_path / "d").exists()
    assert (
        f"{fin}:1: not UTF-8: 6 of 6 non-blank lines cannot be decoded; it reads as GBK/GB18030 ('基金净值上涨'): "
        f"convert it with `iconv -f GB18030 -t UTF-8 {fin} > {fin}.utf8` or pass --encoding gb18030"
    ) in r.output
    ok = _build(*domains, "--encoding", "gb18030", "--out", tmp_path / "d")
    assert ok.exit_code == 0, ok.output
    assert "基金" in (tmp_path / "d/keywords/finance.txt").read_text(encoding="utf-8")
    wrong = _build("--domain", f"finance={fin}", "--domain", f"sports={spo}", "--encoding", "utf-16", "--out", tmp_path / "x")
    assert wrong.exit_code == 1 and "encoding 'utf-16' is not supported (lines are split on the byte \\n)" in wrong.output
    unknown = _build(*domains, "--encoding", "klingon", "--out", tmp_path / "x")
    assert unknown.exit_code == 1 and "unknown encoding 'klingon'; expected a Python codec name" in unknown.output


def test_gbk_labelled_file_is_named_not_taken_for_one_domain(tmp_path: Path, caplog) -> None:
    # before: the ASCII header was the only decodable row → "needs an anti-domain (got only 'label')"
    tsv = tmp_path / "titles.tsv"
    rows = [f"{t}\tfinance" for t in FIN] + [f"{t}\tsports" for t in SPO]
    tsv.write_bytes("\n".join(["title\tlabel", *rows]).encode("gbk"))
    r = _build("--labelled", tsv, "--label-column", "1", "--text-column", "0", "--out", tmp_path / "d")
    assert r.exit_code == 1 and "anti-domain" not in r.output
    assert f"{tsv}:2: not UTF-8: 12 of 13 non-blank lines cannot be decoded; it reads as GBK/GB18030" in r.output
    with caplog.at_level("WARNING", logger="jingpai.keyword_dict.corpus"):
        ok = _build("--labelled", tsv, "--label-column", "1", "--text-column", "0", "--encoding", "gbk", "--out", tmp_path / "d")
    assert ok.exit_code == 0, ok.output
    assert f"{tsv}:1: skipped as a header row: its label 'label' labels no other row" in caplog.text
    assert json.loads((tmp_path / "d/meta.json").read_text())["stats"]["domains"].keys() == {"finance", "sports"}


def test_binary_compressed_and_directory_inputs_say_what_they_are(tmp_path: Path) -> None:
    spo = tmp_path / "sports.txt"
    spo.write_text("\n".join(SPO), encoding="utf-8")
    png = tmp_path / "fin.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 20)
    r = _build("--domain", f"finance={png}", "--domain", f"sports={spo}", "--out", tmp_path / "d")
    assert r.exit_code == 1
    assert f"corpus file {png} looks binary, not text (NUL byte at offset 8); give a UTF-8 text file" in r.output
    gz = tmp_path / "fin.txt.gz"
    gz.write_bytes(gzip.compress("\n".join(FIN).encode()))
    r = _build("--domain", f"finance={gz}", "--domain", f"sports={spo}", "--out", tmp_path / "d")
    assert r.exit_code == 1 and f"corpus file {gz} is gzip-compressed; decompress it first (gunzip -k {gz})" in r.output
    folder = tmp_path / "corpora"
    folder.mkdir()
    (folder / "fin.txt").write_text("\n".join(FIN), encoding="utf-8")
    r = _build("--domain", f"finance={folder}", "--domain", f"sports={spo}", "--out", tmp_path / "d")
    assert r.exit_code == 1 and "does not exist" not in r.output
    assert f"corpus file {folder} is a directory (holding fin.txt), not a file; give one file per corpus" in r.output


def test_empty_labelled_file_is_named(tmp_path: Path) -> None:
    empty, blank = tmp_path / "empty.tsv", tmp_path / "blank.tsv"
    empty.write_text("")
    blank.write_text("\n  \n")
    r = _build("--labelled", empty, "--out", tmp_path / "d")
    assert r.exit_code == 1 and f"labelled corpus {empty} is empty" in r.output and "--domain" not in r.output
    r = _build("--labelled", blank, "--out", tmp_path / "d")
    assert r.exit_code == 1 and f"labelled corpus {blank} has no rows: every line is blank" in r.output


def test_single_line_corpus_is_an_error_naming_the_file(tmp_path: Path) -> None:
    one = tmp_path / "fin.txt"
    text = " ".join(FIN * 20_000)  # ~2 MB on one line
    one.write_text(text, encoding="utf-8")
    spo = tmp_path / "sports.txt"
    spo.write_text("\n".join(SPO), encoding="utf-8")
    r = _build("--domain", f"finance={one}", "--domain", f"sports={spo}", "--out", tmp_path / "d")
    assert r.exit_code == 1 and not (tmp_path / "d").exists()
    assert (
        f"domain 'finance' has 1 document(s), fewer than min_df=2, so none of its words can be kept: its longest document "
        f"is {len(text):,} characters — each line is one document (one JSON object per line in .jsonl); split the text "
        f"into one document per line (domain 'finance' was read from {one})"
    ) in r.output


def test_swapped_label_and_text_columns_are_one_error(tmp_path: Path) -> None:
    tsv = tmp_path / "titles.tsv"
    rows = [f"{t}{i}\tfinance" for i, t in enumerate(FIN * 3)] + [f"{t}{i}\tsports" for i, t in enumerate(SPO * 3)]
    tsv.write_text("\n".join(rows), encoding="utf-8")
    r = _build("--labelled", tsv, "--out", tmp_path / "d")
    assert r.exit_code == 1 and not (tmp_path / "d").exists()
    assert r.output.count("\n") == 1, r.output  # one line, not one warning per one-row "domain"
    assert (
        f"{tsv}: 36 distinct labels in 36 rows: nearly every row has a label of its own, so the label and text columns "
        f"look swapped (line 1: label '基金净值上涨0' in column 0, text 'finance' in column 1); try --label-column 1 --text-column 0"
    ) in r.output
    ok = _build("--labelled", tsv, "--label-column", "1", "--text-column", "0", "--out", tmp_path / "d")
    assert ok.exit_code == 0, ok.output


def test_dictionary_without_words_is_an_error(tmp_path: Path) -> None:
    fin = tmp_path / "fin.txt"
    fin.write_text("\n".join(FIN), encoding="utf-8")
    r = _build("--domain", f"finance={fin}", "--domain", f"copy={fin}", "--out", tmp_path / "d")
    assert r.exit_code == 1 and not (tmp_path / "d").exists()
    assert re.search(
        r"domain 'finance' keeps no word: none of its \d+ candidate words scores diff-idf >= min_score=0.5 against its "
        r"anti-domain \(is it a copy of another domain or of the background\?\)", r.output
    ), r.output
    assert f"(domain 'finance' was read from {fin}; domain 'copy' was read from {fin})" in r.output
