"""``python -m bench <command>``: the benchmark entry point (``report`` writes docs/RESULTS.md; ``train`` trains report recipes only)."""

from __future__ import annotations

import click

from bench.report import report
from bench.train_cmd import train


@click.group()
def bench() -> None:
    """jingpai benchmarks and the evaluation report."""


bench.add_command(report)
bench.add_command(train)

if __name__ == "__main__":
    bench()
