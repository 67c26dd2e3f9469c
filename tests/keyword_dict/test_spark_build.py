"""``dict build --spark``: the same dictionary as the local build, the same errors, on ``local[2]``.

One Spark session for the module (the JVM starts once). It reads files in small splits (256 KiB), so
a corpus file spans several tasks and the per-task parts (counts, first rows, line numbers) are merged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from jingpai.cli import cli
from jingpai.keyword_dict import BuildSettings, Dictionary, DiscoverySettings, build_dictionary
from jingpai.keyword_dict.corpus import CorpusReadError, LabelledSpec, read_documents, read_labelled

#: THUCNews class ids → the cnews sample's Chinese labels (the domains both corpora hold)
ZH = {"finance": "财经", "realty": "房产", "education": "教育", "science": "科技", "politics": "时政",
      "sports": "体育", "game": "游戏", "entertainment": "娱乐"}


@pytest.fixture(scope="module")
def session() -> Iterator:
    from jingpai.spark import spark_session

    conf = {"spark.sql.files.maxPartitionBytes": str(256 * 1024), "spark.ui.showConsoleProgress": "false"}
    spark = spark_session(app_name="jingpai-test-dict-build", master="local[2]", conf=conf)
    yield spark
    spark.stop()


@pytest.fixture(scope="module")
def domain_files(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One file per domain: the THUCNews titles (part 1) and cnews articles of that domain, JSONL and plain text alternately."""
    out = tmp_path_factory.mktemp("domains")
    classes = shared_data / "zh/thucnews_titles/classes.txt"
    titles = read_labelled(shared_data / "zh/thucnews_titles/part1.tsv", LabelledSpec(label_column=1, text_column=0, label_names=classes))
    articles = read_labelled(shared_data / "zh/cnews_sample/docs.tsv")
    files = {}
    for i, (name, zh) in enumerate(ZH.items()):
        docs = titles[name] + articles[zh]
        if i % 2:
            path = out / f"{name}.jsonl"
            path.write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
        else:
            path = out / f"{name}.txt"
            path.write_text("\n".join(docs) + "\n", encoding="utf-8")
        files[name] = path
    return files


def _spark(session, sources, **kwargs) -> Dictionary:
    from jingpai.keyword_dict.spark_build import build_dictionary_spark

    return build_dictionary_spark(session, sources, **kwargs)


def _sources(files: dict[str, Path]) -> list:
    from jingpai.keyword_dict.spark_corpus import Source

    return [Source("domain", str(path), name) for name, path in files.items()]


def _assert_same(local: Dictionary, spark: Dictionary, tmp_path: Path) -> None:
    """Every word, domain, count and score, and every file of the dictionary directory (but its creation time)."""
    assert len(spark) > 1000
    rows = {(e.word, e.domain): (e.freq, e.score) for e in local.entries()}
    assert {(e.word, e.domain): e.freq for e in spark.entries()} == {k: v[0] for k, v in rows.items()}
    assert max(abs(e.score - rows[e.word, e.domain][1]) for e in spark.entries()) <= 1e-9
    spark.created = local.created
    a, b = local.save(tmp_path / "local"), spark.save(tmp_path / "spark")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.spark
def test_spark_build_is_the_local_build(session, domain_files: dict[str, Path], tmp_path: Path) -> None:
    settings = BuildSettings(workers=1)
    local = build_dictionary({n: list(read_documents(p)) for n, p in domain_files.items()}, settings=settings)
    _assert_same(local, _spark(session, _sources(domain_files), settings=settings), tmp_path)


@pytest.mark.spark
def test_domains_larger_than_a_chunk_are_counted_by_ngram_key(session, domain_files: dict[str, Path], tmp_path: Path) -> None:
    # 40,000-character chunks: every domain is larger, so the Spark build shards its n-gram tables by key
    # and the local build streams chunk by chunk; both count exactly (the tables stay under max_table),
    # so they also agree with the one-chunk build
    small = BuildSettings(workers=1, discovery=DiscoverySettings(chunk_chars=40_000))
    files = {n: domain_files[n] for n in ("finance", "realty", "sports")}
    corpora = {n: list(read_documents(p)) for n, p in files.items()}
    local = build_dictionary(corpora, settings=small)
    assert local.to_tsv() == build_dictionary(corpora, settings=BuildSettings(workers=1)).to_tsv()
    _assert_same(local, _spark(session, _sources(files), settings=small), tmp_path)


@pytest.mark.spark
def test_labelled_file_with_label_names_and_a_glob(session, shared_data: Path, domain_files: dict[str, Path], tmp_path: Path) -> None:
    from jingpai.keyword_dict.spark_corpus import Source

    spec = LabelledSpec(label_column=1, text_column=0, label_names=shared_data / "zh/thucnews_titles/classes.txt")
    part1 = shared_data / "zh/thucnews_titles/part1.tsv"
    local = build_dictionary(read_labelled(part1, spec))
    _assert_same(local, _spark(session, [Source("labelled", str(part1))], spec=spec), tmp_path / "labelled")
    # a glob is read by Spark's reader: the two plain-text domains against a JSONL one
    glob = str(domain_files["finance"].parent / "[fp]*.txt")
    both = {"news": [*read_documents(domain_files["finance"]), *read_documents(domain_files["politics"])],
            "realty": list(read_documents(domain_files["realty"]))}
    sources = [Source("domain", glob, "news"), Source("domain", str(domain_files["realty"]), "realty")]
    _assert_same(build_dictionary(both), _spark(session, sources), tmp_path / "glob")


def _error(call) -> str:
    with pytest.raises(CorpusReadError) as caught:
        call()
    return str(caught.value)


@pytest.mark.spark
def test_bad_records_are_the_local_errors(session, domain_files: dict[str, Path], tmp_path: Path) -> None:
    from jingpai.keyword_dict.spark_corpus import Source

    good = domain_files["sports"].read_text(encoding="utf-8").splitlines()
    assert len("\n".join(good).encode()) > 256 * 1024  # the bad line is in a later task than the first
    for name, bad in (("broken.jsonl", "{\"text\": \"半截"), ("field.jsonl", "{\"title\": \"没有正文\"}")):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in good[:-5]) + bad + "\n", encoding="utf-8")
        local = _error(lambda: list(read_documents(path)))
        assert f"{path}:{len(good) - 4}: " in local
        assert _error(lambda: _spark(session, [Source("domain", str(path), "sports"), *_sources(domain_files)[:1]])) == local
    tsv = tmp_path / "labels.tsv"
    tsv.write_text("".join(f"体育\t{t}\n" for t in good[:-5]) + "没有文本的一行\n", encoding="utf-8")
    local = _error(lambda: read_labelled(tsv))
    assert f"{tsv}:{len(good) - 4}: expected at least 2 tab-separated columns" in local
    assert _error(lambda: _spark(session, [Source("labelled", str(tsv))])) == local
    nothing = str(tmp_path / "nothing-*.txt")
    assert _error(lambda: _spark(session, [Source("domain", nothing, "sports")])).startswith(
        f"corpus file {nothing} cannot be read by Spark: [PATH_NOT_FOUND] Path does not exist")
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes("\n".join(good[:50]).encode("gb18030"))
    local = _error(lambda: list(read_documents(gbk)))
    assert "it reads as GBK/GB18030" in local
    assert _error(lambda: _spark(session, [Source("domain", str(gbk), "sports"), *_sources(domain_files)[:1]])) == local


@pytest.mark.spark
def test_cli_spark_build_and_local_only_paths(session, domain_files: dict[str, Path], tmp_path: Path) -> None:
    # a background corpus as every domain's anti-domain
    args = [a for name in ("finance", "sports") for a in ("--domain", f"{name}={domain_files[name]}")]
    args += ["--background", str(domain_files["game"])]
    runner = CliRunner()
    local = runner.invoke(cli, ["dict", "build", *args, "--out", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    spark = runner.invoke(cli, ["dict", "build", *args, "--out", str(tmp_path / "spark")], env={"JINGPAI_DICT_BUILD_SPARK": "1",
                                                                                               "JINGPAI_DICT_BUILD_MASTER": "local[2]"})
    assert spark.exit_code == 0, spark.output
    assert "building with Spark on local[2]" in spark.output
    assert (tmp_path / "local/dictionary.tsv").read_bytes() == (tmp_path / "spark/dictionary.tsv").read_bytes()
    stats = [json.loads((tmp_path / side / "meta.json").read_text())["stats"] for side in ("local", "spark")]
    assert stats[0] == stats[1] and stats[0]["background_docs"] == len(list(read_documents(domain_files["game"])))
    remote = runner.invoke(cli, ["dict", "build", "--labelled", "hdfs://namenode/corpora/*.tsv", "--out", str(tmp_path / "x")])
    assert remote.exit_code == 2 and "hdfs://namenode/corpora/*.tsv is read by Spark only: add --spark" in remote.output


@pytest.mark.usefixtures("without_pyspark")
def test_spark_without_pyspark_is_one_line(tmp_path: Path) -> None:
    fin, spo = tmp_path / "fin.txt", tmp_path / "spo.txt"
    fin.write_text("基金净值上涨\n基金大涨\n", encoding="utf-8")
    spo.write_text("球队客场取胜\n球队训练\n", encoding="utf-8")
    r = CliRunner().invoke(cli, ["dict", "build", "--spark", "--domain", f"fin={fin}", "--domain", f"spo={spo}", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1 and not (tmp_path / "d").exists()
    assert r.output.strip().splitlines()[-1] == (
        "Error: --spark needs PySpark, which is not installed: pip install 'jingpai[spark]' (pyspark>=4.0,<4.1)"
    )
