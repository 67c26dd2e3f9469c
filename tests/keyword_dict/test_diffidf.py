"""diff-idf from document frequencies, and the dictionary build over real domain corpora."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jingpai.keyword_dict import BuildError, BuildSettings, build_dictionary, extract_keywords
from jingpai.keyword_dict.corpus import CorpusReadError, LabelledSpec, read_documents, read_labelled
from jingpai.keyword_dict.diffidf import VocabularyIndex, diff_idf, document_frequencies, domain_document_frequencies


def test_formula_matches_the_paper() -> None:
    got = diff_idf(df_domain=50, n_domain=100, df_anti=5, n_anti=900, smoothing=0.5)
    assert got == pytest.approx(math.log(900 / 5.5) - math.log(100 / 50.5))
    with pytest.raises(ValueError, match="smoothing λ must be > 0, got 0"):
        diff_idf(1, 1, 1, 1, smoothing=0)


def test_document_frequency_counts_documents_on_unit_boundaries() -> None:
    df, n = document_frequencies(["GDP增长GDP", "GDPR法规", "中国GDP"], ["GDP", "中国", "增长"])
    assert n == 3
    assert df == {"GDP": 2, "增长": 1, "中国": 1}


def test_document_frequencies_do_not_depend_on_chunking(shared_data: Path) -> None:
    docs = [line.split("\t", 1)[1] for line in (shared_data / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[:60]]
    # Han words of 2 to 7 characters cut from the documents (a substring test is then the reference)
    han = [w for d in docs[::7] for w in (d[i : i + n] for i, n in zip(range(5, 60, 9), (2, 3, 4, 5, 6, 7) * 2))]
    han = [w for w in dict.fromkeys(han) if all("\u4e00" <= ch <= "\u9fff" for ch in w)]
    vocabulary = ["NBA", "不存在的词", "A-股", *han]
    index = VocabularyIndex.build(vocabulary)
    whole, n = domain_document_frequencies(docs, index)
    chunked, n_chunked = domain_document_frequencies(docs, index, chunk_chars=3000)
    assert n == n_chunked == 60 and whole.tolist() == chunked.tolist()
    assert whole[1] == whole[2] == 0 and len(han) > 20 and {len(w) for w in han} >= {2, 5, 7}
    assert whole[3:].tolist() == [sum(w in d for d in docs) for w in han]


def test_known_words_counted_per_chunk_equal_per_document(shared_data: Path) -> None:
    from collections import Counter

    from jingpai.keyword_dict.build import _known_words
    from jingpai.keyword_dict.segment import Segmenter
    from jingpai.keyword_dict.text import is_candidate_word

    docs = [line.split("\t", 1)[1] for line in (shared_data / "zh/cnews_sample/docs.tsv").read_text(encoding="utf-8").splitlines()[:80]]
    segmenter = Segmenter()
    per_doc = Counter(t for d in docs for t in segmenter.cut(d))
    expected = {w: c for w, c in per_doc.items() if c >= 3 and is_candidate_word(w)}
    assert _known_words(docs, 3, 20_000) == expected and len(expected) > 100


def test_workers_are_spawned_while_other_threads_run(caplog) -> None:
    import threading

    from jingpai.keyword_dict.build import _start_method

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with caplog.at_level("INFO", logger="jingpai.keyword_dict.build"):
            assert _start_method() == "spawn"
    finally:
        stop.set()
        thread.join()
    assert "threads running: worker processes are spawned, not forked" in caplog.text


def test_domain_word_scores_high_and_shared_word_low() -> None:
    fin = ["基金净值上涨", "基金经理调仓", "今天基金大涨", "市场很好"] * 3
    spo = ["球队客场取胜", "球队主场失利", "今天球队训练", "市场很好"] * 3
    d = build_dictionary({"finance": fin, "sports": spo}, settings=BuildSettings(min_score=0.5, min_df=2))
    assert "基金" in d.domain_words("finance")
    assert "球队" in d.domain_words("sports")
    assert "市场" not in d  # equally common in both domains: diff-idf 0
    assert d.params["smoothing"] == 1.0


def test_build_needs_an_anti_domain() -> None:
    with pytest.raises(BuildError, match="give at least two domains or a background corpus \\(got only 'finance'\\)"):
        build_dictionary({"finance": ["基金"]})
    with pytest.raises(BuildError, match="domain 'sports' has no documents"):
        build_dictionary({"finance": ["基金"], "sports": []})


def test_thucnews_dictionary_finds_the_papers_keywords(shared_data: Path) -> None:
    base = shared_data / "zh/thucnews_titles"
    domains = read_labelled(base / "part1.tsv", LabelledSpec(label_column=1, text_column=0, label_names=base / "classes.txt"))
    assert set(domains) == set((base / "classes.txt").read_text().split())
    d = build_dictionary(domains)
    words = [w for w, _ in extract_keywords("哪些因素会影响中国的GDP", d)]
    assert "GDP" in words and "中国" in words
    assert d.domain_words("sports")[:50].count("巴萨") == 1
    assert "stocks" in d.domains("GDP")
    assert d.stats["domains"]["sports"]["docs"] == 1000


def test_corpus_readers_name_the_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "a.jsonl"
    bad.write_text('{"text": "一"}\n{"title": "二"}\n', encoding="utf-8")
    with pytest.raises(CorpusReadError, match=r"a.jsonl:2: expected a string in field\(s\) text"):
        list(read_documents(bad))
    tsv = tmp_path / "l.tsv"
    tsv.write_text("体育\t湖人赢球\n只有一列\n", encoding="utf-8")
    with pytest.raises(CorpusReadError, match=r"l.tsv:2: expected at least 2 tab-separated columns"):
        read_labelled(tsv)
    names = tmp_path / "names.txt"
    names.write_text("finance\nsports\n")
    ids = tmp_path / "ids.tsv"
    ids.write_text("基金\t0\n球队\t7\n", encoding="utf-8")
    with pytest.raises(CorpusReadError, match=r"ids.tsv:2: label '7' is not an id 0..1"):
        read_labelled(ids, LabelledSpec(label_column=1, text_column=0, label_names=names))


def test_parallel_build_gives_the_same_dictionary(shared_data: Path) -> None:
    base = shared_data / "zh/thucnews_titles"
    domains = read_labelled(base / "part2.tsv", LabelledSpec(label_column=1, text_column=0, label_names=base / "classes.txt"))
    small = {name: docs[:300] for name, docs in list(domains.items())[:3]}
    one = build_dictionary(small, settings=BuildSettings(workers=1))
    two = build_dictionary(small, settings=BuildSettings(workers=2))
    assert len(one) > 50 and one.version == two.version
    assert "workers" not in one.params


def test_undecodable_and_empty_input_is_reported(tmp_path: Path, caplog) -> None:
    f = tmp_path / "docs.txt"
    f.write_bytes("基金净值\n".encode() * 100 + b"\xff\xfe bad\n" + "球队\n".encode())
    with caplog.at_level("WARNING", logger="jingpai.keyword_dict.corpus"):
        assert list(read_documents(f)) == ["基金净值"] * 100 + ["球队"]
    assert "docs.txt: skipped 1 line(s) that are not valid UTF-8: line 101" in caplog.text
    # past 1 % of the lines it is not corruption but another encoding: an error, not a skip
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes("基金净值\n".encode() * 98 + "球队训练\n".encode("gbk") * 2)
    with pytest.raises(CorpusReadError, match=r"gbk.txt:99: not UTF-8: 2 of 100 non-blank lines cannot be decoded; it reads as GBK/GB18030 \('球队训练'\)"):
        list(read_documents(gbk))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(CorpusReadError, match="corpus file .*empty.txt is empty"):
        list(read_documents(empty))
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    with pytest.raises(CorpusReadError, match="corpus file .*blank.jsonl has no documents: every line is blank"):
        list(read_documents(blank))
    with pytest.raises(CorpusReadError, match="corpus file .*missing.txt does not exist"):
        list(read_documents(tmp_path / "missing.txt"))


def test_labelled_header_row_is_skipped_and_swapped_ids_are_hinted(tmp_path: Path, caplog) -> None:
    tsv = tmp_path / "l.tsv"
    tsv.write_text("label\ttext\n体育\t湖人赢球\n体育\t火箭输球\n财经\t基金上涨\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="jingpai.keyword_dict.corpus"):
        assert read_labelled(tsv) == {"体育": ["湖人赢球", "火箭输球"], "财经": ["基金上涨"]}
    assert "l.tsv:1: skipped as a header row: its label 'label' labels no other row" in caplog.text
    names = tmp_path / "names.txt"
    names.write_text("finance\nsports\n")
    swapped = tmp_path / "swapped.tsv"
    swapped.write_text("0\t基金\n1\t球队\n", encoding="utf-8")
    with pytest.raises(CorpusReadError, match=r"swapped.tsv:1: label '基金' is not an id 0..1 of .*names.txt; column 0 holds '0': "
                       r"are the label and text columns swapped\? try --label-column 0 --text-column 1"):
        read_labelled(swapped, LabelledSpec(label_column=1, text_column=0, label_names=names))
    header = tmp_path / "header.tsv"
    header.write_text("text\tlabel\n基金\t0\n", encoding="utf-8")
    with pytest.raises(CorpusReadError, match=r"header.tsv:1: label 'label' is not an id 0..1 of .*names.txt; is it a header row\? remove it"):
        read_labelled(header, LabelledSpec(label_column=1, text_column=0, label_names=names))


def test_few_documents_warn_once(caplog) -> None:
    with caplog.at_level("WARNING", logger="jingpai.keyword_dict.build"):
        build_dictionary(
            {"finance": ["基金净值上涨"] * 3, "sports": ["球队客场取胜"] * 3, "tech": ["芯片新品发布"] * 4}, settings=BuildSettings(min_df=1)
        )
    assert [r.getMessage() for r in caplog.records] == [
        "3 domain(s) have fewer than 20 documents, so their diff-idf scores will be coarse: 'finance' 3, 'sports' 3, 'tech' 4"
    ]


def test_domain_that_cannot_keep_a_word_is_an_error() -> None:
    with pytest.raises(BuildError, match=r"domain 'sports' has 1 document\(s\), fewer than min_df=2, so none of its words can be kept: "
                       r"give it more documents or lower --min-df") as info:
        build_dictionary({"finance": ["基金净值上涨"] * 3, "sports": ["球队客场取胜"]})
    assert info.value.domains == ("sports",)
    with pytest.raises(BuildError, match=r"domain 'ids' keeps no word: its 4 documents \(4 characters\) hold no Chinese or Latin word "
                       r"frequent enough to score \(min_count=5\)") as info:
        build_dictionary({"finance": ["基金净值上涨", "基金经理调仓"] * 3, "ids": ["3", "7"] * 2})
    assert info.value.domains == ("ids",)
