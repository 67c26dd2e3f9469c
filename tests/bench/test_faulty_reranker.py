"""bench/faulty_reranker.py's verdict on one search: HTTP 200, the case's reason, the engine's order, within timeout_ms + 100 ms."""

from __future__ import annotations

from bench.faulty_reranker import Report, Row


def row(**change) -> Row:
    base = {"side": "gateway", "case": "infinity", "status": 200, "reranked": False, "reason": "reranker_bad_response",
            "expected": "reranker_bad_response", "engine_order": True, "elapsed_ms": 42.0}
    return Row(**{**base, **change})


def test_a_search_is_right_only_when_every_goal_holds() -> None:
    assert row().ok(3000)
    assert not row(status=500, reranked=None, reason=None).ok(3000)  # issue 53's Infinity: the gateway's 500
    assert not row(reranked=True, reason=None).ok(3000)  # negative indices taken
    assert not row(reason="reranker_error").ok(3000)
    assert not row(engine_order=False).ok(3000)
    assert row(elapsed_ms=3100.0).ok(3000) and not row(elapsed_ms=3101.0).ok(3000)  # timeout_ms + 100 ms
    assert row(case="valid_best_first", reranked=True, reason=None, expected="scores", engine_order=False).ok(3000)
    assert not row(case="valid_best_first", reranked=False, reason="reranker_bad_response", expected="scores").ok(3000)


def test_the_summary_names_the_slowest_search_and_the_rss_growth() -> None:
    report = Report(3000, rows=[row(), row(side="plugin", elapsed_ms=3041.0), row(case="trickle", elapsed_ms=3027.0, reason="x")],
                    rss={"gateway": (138.0, 138.4)})
    assert report.summary() == ("faulty reranker: 2 of 3 searches right (200, engine order, reason); slowest gateway 3027 ms, "
                                "plugin 3041 ms (timeout_ms 3000); gateway RSS +0.4 MB")
    assert report.lines()[-1] == "gateway RSS while answering 40 MB bodies: 138 MB before, peak 138 MB (+0.4 MB)"
    assert [line.endswith("FAIL") for line in report.lines()[1:4]] == [False, False, True]
