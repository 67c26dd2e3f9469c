"""The evaluation report entry point (``python -m bench report``) end to end on a tiny configuration:
real engine, real ``jingpai dict build``/``jingpai index``, real gateway and rerank service, a word model
trained for a few steps, and the metrics from the one evaluation module."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import eval_common
from bench.__main__ import bench
from bench.eval_common import AUGMENTED_BM25, RAW_BM25, ReportSettings, Row, Table, load_tables, save_table
from bench.eval_import import parse_printed
from bench.eval_microblog import read_trec_run, rerank_run
from bench.report import summarize
from bench.eval_models import RECIPE_FILE, RECIPES, get_model
from jingpai.reranker.data import LabeledPair
from jingpai.engine.client import Engine


@pytest.fixture(scope="session")
def report_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Work and model folders shared by both engines' runs (the dictionary and model are built once)."""
    root = tmp_path_factory.mktemp("report")
    return {"work": root / "work", "models": root / "models"}


@pytest.mark.engine
def test_quick_retrieval_report_writes_tables(engine: Engine, shared_data: Path, report_dirs, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    results, out = tmp_path / "results", tmp_path / "RESULTS.md"
    args = ["report", "--quick", "--sections", "retrieval", "--only", f"retrieval.afqmc.{engine.kind}", f"--{engine.kind}", engine.url,
            "--no-start-engines", "--device", "cpu", "--results-dir", str(results), "--work-dir", str(report_dirs["work"]),
            "--models-dir", str(report_dirs["models"]), "--out", str(out), "--no-plots"]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output

    saved = json.loads((results / f"retrieval-afqmc-{engine.kind}.json").read_text(encoding="utf-8"))
    assert saved["meta"]["engine"] == f"{engine.kind} {engine.version}"
    assert [r["cells"]["method"].split(" ")[0] for r in saved["rows"]] == ["BM25,", "BM25", "+", "+"]
    assert "replace" in saved["rows"][2]["cells"]["method"] and "linear fusion" in saved["rows"][3]["cells"]["method"]
    tuning = json.loads((results / "retrieval-tuning.json").read_text(encoding="utf-8"))
    assert any("(chosen)" in r["cells"]["fusion"] for r in tuning["rows"])
    for row in saved["rows"]:
        assert row["cells"]["queries"] == 40
        ps = [row["cells"][f"P@{k}"] for k in (1, 3, 5, 10)]
        assert all(0.0 <= p <= 1.0 for p in ps)
        assert ps == sorted(ps), f"P@k must not fall as k grows: {ps}"
        assert row["command"].startswith("python -m bench report --sections retrieval --quick --only retrieval.afqmc.")
    # raw BM25 finds the paraphrase of some queries in the top 10 (a broken pipeline finds none)
    assert saved["rows"][0]["cells"]["P@10"] > 0.2
    text = out.read_text(encoding="utf-8")
    assert f"Question retrieval — AFQMC dev, {engine.kind} (quick)" in text
    assert f"--only retrieval.afqmc.{engine.kind}.rerank" in text
    assert "_Not run yet: `python -m bench report --sections qa`._" in text


def test_unknown_section_is_rejected() -> None:
    result = CliRunner().invoke(bench, ["report", "--sections", "retrieval,nope", "--render-only"])
    assert result.exit_code == 2
    assert "unknown section(s) ['nope']; expected some of retrieval, hybrid, judged, microblog, qa, negatives, speed" in result.output


def test_saving_a_rerun_row_replaces_only_that_row(tmp_path: Path) -> None:
    def table(rows: list[Row]) -> Table:
        return Table(key="qa-x", section="qa", title="t", columns=["model", "MAP"], rows=rows, meta={"command": "c"})

    save_table(table([Row({"model": "a", "MAP": 0.1}, "cmd a"), Row({"model": "b", "MAP": 0.2}, "cmd b")]), tmp_path)
    save_table(table([Row({"model": "b", "MAP": 0.3}, "cmd b"), Row({"model": "c", "MAP": 0.4}, "cmd c")]), tmp_path)
    [loaded] = load_tables(tmp_path)
    assert [(r.cells["model"], r.cells["MAP"]) for r in loaded.rows] == [("a", 0.1), ("b", 0.3), ("c", 0.4)]


def _retrieval_table(*methods: tuple[str, float]) -> Table:
    cells = lambda p1: {f"P@{k}": p1 for k in (1, 3, 5, 10)}  # noqa: E731
    return Table(key="retrieval-lcqmc-opensearch", section="retrieval", title="Question retrieval — LCQMC dev, opensearch (full)",
                 columns=["method", "P@1", "P@3", "P@5", "P@10"], meta={"command": "c"},
                 rows=[Row({"method": m, **cells(p1)}, "cmd") for m, p1 in methods])


def test_summary_compares_reranks_with_the_augmented_row_wherever_it_stands() -> None:
    # an `--only …augment --only …rerank…` run has no raw BM25 row: the rerank rows are still compared with the
    # augmented row, and no line calls anything "raw BM25"
    only = _retrieval_table(("+ rerank top 20, m, replace (model score alone)", 0.40), (AUGMENTED_BM25, 0.50),
                            ("+ rerank top 20, m, linear fusion w=0.8", 0.55))
    lines = summarize([only])
    assert [line.split(": ", 1)[1].split(" vs ")[0] for line in lines] == [
        "+ rerank top 20, m, replace (model score alone)", "+ rerank top 20, m, linear fusion w=0.8"]
    assert "P@1 -0.100" in lines[0] and "below augmented BM25 at some P@k" in lines[0]
    assert "P@1 +0.050" in lines[1] and "every P@k ≥ augmented BM25" in lines[1]
    full = _retrieval_table((RAW_BM25, 0.45), (AUGMENTED_BM25, 0.50), ("+ rerank top 20, m, linear fusion w=0.8", 0.55))
    first, rerank = summarize([full])
    assert f"{AUGMENTED_BM25} vs raw BM25: P@1 +0.050" in first and "P@1 +0.050" in rerank
    assert summarize([_retrieval_table((RAW_BM25, 0.45))]) == []  # nothing to compare with


def test_printed_rows_are_imported_with_their_table_and_stats() -> None:
    printed = "\n".join([
        "- **hardware**: Xeon, 16 cores; GPU NVIDIA H100",
        "| model | seeds | MAP | rerun |",
        "|---|---|---|---|",
        "| hcan | 3 | 0.6156 ± 0.0013 (n=3) | `python -m bench report --sections qa --only qa.trecqa.hcan --device cuda` |",
    ])
    [table] = parse_printed(printed)
    assert table.key == "qa-trecqa"
    assert table.meta["hardware"] == "Xeon, 16 cores; GPU NVIDIA H100"
    assert table.rows[0].cells["MAP"] == {"mean": 0.6156, "std": 0.0013, "n": 3}
    assert table.rows[0].cells["seeds"] == 3


# ---------------------------------------------------------------------------------------------- re-running rows on other data (issue #15)

VALID_KEYS = "retrieval.lcqmc, retrieval.afqmc, retrieval.bq, qa.trecqa, qa.wikiqa, microblog.2011, microblog.2012, negatives.pawsx"


@pytest.mark.parametrize(("value", "message"), [
    ("nope.x=/tmp", f"unknown data key 'nope.x'; valid keys: {VALID_KEYS}"),
    ("qa.wikiqa", f"expected KEY=PATH, got 'qa.wikiqa'; valid keys: {VALID_KEYS}"),
    ("qa.wikiqa=/no/such/folder", "qa.wikiqa=/no/such/folder: the path does not exist (expected a folder: a.toks, b.toks, sim.txt, id.txt)"),
])
def test_bad_data_options_are_usage_errors_naming_key_and_valid_keys(value: str, message: str) -> None:
    result = CliRunner().invoke(bench, ["report", "--render-only", "--data", value])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_training_overrides_must_be_positive() -> None:
    result = CliRunner().invoke(bench, ["report", "--render-only", "--max-steps", "0"])
    assert result.exit_code == 2
    assert "--max-steps" in result.output


def test_settings_validate_once_and_resolve_data(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(eval_common, "DATA_DIR", tmp_path)
    with pytest.raises(ValueError, match=f"unknown data key\\(s\\) qa.nope; valid keys: {VALID_KEYS}"):
        ReportSettings(data={"qa.nope": tmp_path})
    with pytest.raises(ValueError, match="data qa.wikiqa=/no/such: the path does not exist"):
        ReportSettings(data={"qa.wikiqa": Path("/no/such")})
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1"):
        ReportSettings(max_steps=0)
    with pytest.raises(ValueError, match="unknown microblog first stage 'rm3'; expected one of ql, bm25, both"):
        ReportSettings(microblog_first_stage="rm3")  # type: ignore[arg-type]

    (tmp_path / "zh" / "lcqmc").mkdir(parents=True)
    (tmp_path / "zh" / "lcqmc" / "dev.tsv").write_text("a\tb\t1\n", encoding="utf-8")
    mine = tmp_path / "mine.tsv"
    mine.write_text("c\td\t0\n", encoding="utf-8")
    settings = ReportSettings(mode="quick", data={"retrieval.afqmc": mine}, max_steps=5, batch_size=4)
    assert settings.data_file("retrieval.lcqmc", ("zh", "lcqmc", "dev.tsv")) == tmp_path / "zh" / "lcqmc" / "dev.tsv"
    assert settings.data_file("retrieval.lcqmc") == tmp_path / "zh" / "lcqmc" / "dev.tsv"
    assert settings.data_file("retrieval.afqmc", ("zh", "afqmc", "dev.tsv")) == mine  # the override wins, the default is not read
    with pytest.raises(eval_common.ReportError, match="unknown data key 'retrieval.x'"):
        settings.data_file("retrieval.x")
    with pytest.raises(eval_common.ReportError, match="is missing"):
        settings.data_file("qa.wikiqa")
    assert settings.train_overrides() == {"max_steps": 5, "batch_size": 4}
    # a row's rerun command carries its section's --data and every training override
    assert settings.command("retrieval", "retrieval.afqmc.opensearch") == (
        f"python -m bench report --sections retrieval --quick --only retrieval.afqmc.opensearch --data retrieval.afqmc={mine} "
        "--max-steps 5 --batch-size 4")
    assert settings.command("qa") == "python -m bench report --sections qa --quick --max-steps 5 --batch-size 4"
    assert "(rows are not the recipes' own runs)" in eval_common.base_meta(settings, "qa", data="d", model="m")["overrides"]


def test_gpu_sized_rows_run_on_cpu_with_shortened_training() -> None:
    assert eval_common.gpu_recipe_skip(ReportSettings(), "cpu", gpu_sized=True)
    assert not eval_common.gpu_recipe_skip(ReportSettings(max_steps=50), "cpu", gpu_sized=True)
    assert not eval_common.gpu_recipe_skip(ReportSettings(epochs=1), "cpu", gpu_sized=True)
    assert not eval_common.gpu_recipe_skip(ReportSettings(mode="quick"), "cpu", gpu_sized=True)
    assert not eval_common.gpu_recipe_skip(ReportSettings(), "cuda", gpu_sized=True)
    assert not eval_common.gpu_recipe_skip(ReportSettings(), "cpu", gpu_sized=False)
    note = eval_common.gpu_skip_note(ReportSettings(), "qa", "qa.trecqa.cross", "cross", steps=295)
    assert "about 295 optimizer steps" in note and "--only qa.trecqa.cross --max-steps 200" in note


#: a word-model recipe small enough to train in about a second (its quick settings differ from its full ones)
TINY = replace(RECIPES["trecqa-hcan"], dev=None, config={"encoder": "deep", "num_layers": 1, "filters": 8, "hidden": 8, "mlp_hidden": 8, "max_doc_words": 12,
                                                             "max_query_words": 6, "embedding_dim": 16})


def _tiny_pairs() -> list[LabeledPair]:
    return [LabeledPair(f"question {i % 5}", f"answer {i} words {i % 3}", float(i % 2), qid=str(i % 5), docid=str(i)) for i in range(24)]


def test_overrides_reach_train_settings(tmp_path: Path, monkeypatch) -> None:
    """--epochs/--max-steps/--batch-size go on top of the recipe's quick settings; the rest stays the recipe's."""
    import jingpai.reranker.train as train_module

    seen = []

    class Stop(Exception):
        pass

    def fake_train(model, pairs, dev, ts, *, out_dir):
        seen.append(ts)
        raise Stop

    monkeypatch.setattr(train_module, "train", fake_train)
    for overrides in ({}, {"epochs": 2, "max_steps": 7, "batch_size": 8}):
        settings = ReportSettings(mode="quick", models_dir=tmp_path / "models", work_dir=tmp_path / "work", device="cpu", **overrides)
        with pytest.raises(Stop):
            get_model("tiny", settings, recipe=TINY, train_pairs=_tiny_pairs)
    quick, overridden = seen
    assert (quick.epochs, quick.max_steps, quick.batch_size) == (1, 30, 32)  # the recipe's quick settings
    assert (overridden.epochs, overridden.max_steps, overridden.batch_size) == (2, 7, 8)
    assert overridden.lr == TINY.train_settings["lr"] and overridden.metric == TINY.train_settings["metric"]


def test_saved_model_stamp_includes_overrides(tmp_path: Path) -> None:
    """A changed override trains again (own folder, stamp naming the overrides); the same one reuses the saved model."""
    base = {"mode": "quick", "models_dir": tmp_path / "models", "work_dir": tmp_path / "work", "device": "cpu", "batch_size": 4}
    _, first = get_model("tiny", ReportSettings(**base, max_steps=1), recipe=TINY, train_pairs=_tiny_pairs)
    _, again = get_model("tiny", ReportSettings(**base, max_steps=1), recipe=TINY, train_pairs=_tiny_pairs)
    _, changed = get_model("tiny", ReportSettings(**base, max_steps=2), recipe=TINY, train_pairs=_tiny_pairs)
    assert (first["trained_now"], again["trained_now"], changed["trained_now"]) == (True, False, True)
    assert (first["steps"], changed["steps"]) == (1, 2)
    assert first["folder"] != changed["folder"] and first["folder"].endswith("tiny-quick-s0-b4-m1")
    stamp = json.loads((Path(first["folder"]) / RECIPE_FILE).read_text())
    assert stamp["overrides"] == {"batch_size": 4, "max_steps": 1}
    # without overrides the stamp keeps its old form, so models saved before these options are still reused
    _, plain = get_model("tiny", ReportSettings(**{**base, "batch_size": None}), recipe=TINY, train_pairs=_tiny_pairs)
    assert "overrides" not in json.loads((Path(plain["folder"]) / RECIPE_FILE).read_text())


def test_ql_run_reader_parses_the_provided_2011_run(shared_data: Path, tmp_path: Path) -> None:
    run = read_trec_run(shared_data / "en" / "microblog" / "trec-2011" / "id.txt")
    assert len(run) == 49
    assert sum(len(docs) for docs in run.values()) == 39_780
    assert run["1"][:2] == [("30198105513140224", 11.451906), ("30407896273526784", 10.798553)]
    for docs in run.values():  # rank order of a QL run: scores do not rise
        scores = [s for _, s in docs]
        assert scores == sorted(scores, reverse=True)
    bad = tmp_path / "run.txt"
    bad.write_text("1 Q0 d1 1 2.0 tag\n1 Q0 d2 two 1.0 tag\n", encoding="utf-8")
    with pytest.raises(eval_common.ReportError, match=r"run.txt:2: not a TREC run line"):
        read_trec_run(bad)


class _OverlapModel:
    """Stands in for the Microblog reranker: scores a pair by shared words (no training, no checkpoint)."""

    name = "overlap"

    def predict(self, pairs, batch_size: int = 64):
        return [float(len(set(q.lower().split()) & set(d.lower().split()))) for q, d in pairs]


def test_rerank_run_resorts_the_top_depth() -> None:
    ranked = {"1": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "2": [("a", 1.0)]}
    out = rerank_run(_OverlapModel(), ranked, {"1": "red fox"}, {"a": "blue", "b": "red fox", "c": "red"}, depth=2)
    assert out == {"1": [("b", 2.0), ("a", 0.0)]}  # c is below the depth; query 2 is not asked


def test_microblog_ql_first_stage_needs_no_engine(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    """--microblog-first-stage ql reranks the provided QL run and reports it beside the run's own MAP, with
    --data naming the year's folder (threaded into the table and the rerun command)."""
    from bench import eval_microblog

    monkeypatch.setattr(eval_common, "DATA_DIR", shared_data)
    monkeypatch.setattr(eval_microblog, "get_model", lambda key, settings, seed=0: (_OverlapModel(), {}))
    folder = shared_data / "en" / "microblog" / "trec-2011"
    results, out = tmp_path / "results", tmp_path / "RESULTS.md"
    args = ["report", "--quick", "--sections", "microblog", "--only", "microblog.2011", "--microblog-first-stage", "ql",
            "--data", f"microblog.2011={folder}", "--no-start-engines", "--device", "cpu", "--results-dir", str(results),
            "--work-dir", str(tmp_path / "work"), "--models-dir", str(tmp_path / "models"), "--out", str(out), "--no-plots"]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    saved = json.loads((results / "microblog-2011.json").read_text(encoding="utf-8"))
    runs = [r["cells"]["run"] for r in saved["rows"]]
    assert runs[:3] == ["query likelihood (provided run, full depth)", "query likelihood (provided run, top 20)",
                        "query likelihood top 20 reranked by mb2011-cross (in process), replace (model score alone)"]
    assert len(runs) == 4 and runs[3].startswith("query likelihood top 20 reranked by mb2011-cross (in process), linear fusion w=")
    # the weight was tuned on 2012's held-out queries (the other year), and the note shows the whole curve
    note = next(n for n in saved["notes"] if n.startswith("QL rerank (in process): engine weight w tuned on TREC Microblog 2012"))
    assert "MAP by w: 0: " in note and ", 0.9: " in note
    for row in saved["rows"]:
        assert row["cells"]["queries"] == 8 and 0.0 < row["cells"]["MAP"] <= 1.0
        assert row["command"].startswith(f"python -m bench report --sections microblog --quick --only microblog.2011 --data microblog.2011={folder}")
    assert saved["meta"]["data"].startswith(f"{folder} (--data microblog.2011")
    assert "provided QL run MAP" in out.read_text(encoding="utf-8")


def test_an_only_run_leaves_the_published_report_alone(tmp_path: Path) -> None:
    published = eval_common.REPO / "docs" / "RESULTS.md"
    before = published.read_bytes()
    results = tmp_path / "results"
    args = ["report", "--sections", "qa", "--only", "qa.nosuchset", "--results-dir", str(results), "--models-dir", str(tmp_path / "m"),
            "--work-dir", str(tmp_path / "w"), "--no-plots", "--device", "cpu"]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    assert "--only: docs/RESULTS.md is left as it is; `--render-only` publishes" in result.output
    assert (results / "RESULTS.md").is_file()
    assert published.read_bytes() == before
