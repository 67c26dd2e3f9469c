"""``python -m bench <command>``: the benchmark entry point (``report`` writes docs/RESULTS.md)."""

from __future__ import annotations

import click

from bench.report import report


@click.group()
def bench() -> None:
    """jingpai benchmarks and the evaluation report."""


bench.add_command(report)

if __name__ == "__main__":
    bench()
