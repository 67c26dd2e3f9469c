"""``python -m bench train KEY…``: train report recipes (:data:`bench.eval_models.RECIPES`) without evaluating them.

The report trains a recipe the first time a table needs it and reuses the saved folder (``<models-dir>/<key>-s<seed>``,
stamped with the recipe) afterwards. This command does only the first half, so the GPU-sized recipes can be trained
on a lent GPU machine and their folders copied into ``out/models``, where the report's CPU run then finds them:

    python -m bench train zh-gpu-bi zh-gpu-kw --device cuda --models-dir /tmp/models --work-dir out/work

A recipe that mines training windows through the engine needs them cached in ``<work-dir>/windows`` already (mine
them where an engine runs: ``python -m bench report`` or :func:`bench.eval_models.window_pairs`).

A model trained elsewhere with the recipe's ``jingpai train`` line joins the report with ``--adopt``:

    python -m bench train a14-bge-cross --adopt /tmp/a14-cross
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import click

from bench.eval_common import REPO, ReportSettings


@click.command()
@click.argument("keys", nargs=-1, required=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Torch device (default: CUDA when available).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--models-dir", type=click.Path(file_okay=False, path_type=Path), default=REPO / "out" / "models", show_default=True)
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=REPO / "out" / "work", show_default=True)
@click.option("--quick", is_flag=True, help="The recipes' quick settings (tiny slices: a smoke test).")
@click.option("--retrain", is_flag=True, help="Train again even when a saved run exists.")
@click.option("--adopt", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Do not train: copy this folder (trained as the one recipe KEY says, e.g. by its `jingpai train` line) into the "
                   "recipe's saved-run folder and stamp it, so the report uses it.")
def train(keys: tuple[str, ...], device: str | None, seed: int, models_dir: Path, work_dir: Path, quick: bool, retrain: bool,
          adopt: Path | None) -> None:
    """Train report recipes (in the order given: a recipe's start_from first) and print each one's result."""
    from bench.eval_models import RECIPES, adopt_model, get_model

    unknown = [k for k in keys if k not in RECIPES]
    if unknown:
        raise click.UsageError(f"unknown recipe(s) {', '.join(unknown)}; expected some of {', '.join(sorted(RECIPES))}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = ReportSettings(mode="quick" if quick else "full", models_dir=models_dir, work_dir=work_dir / ("quick" if quick else ""),
                              device=device, retrain=retrain)
    if adopt is not None:
        if len(keys) != 1:
            raise click.UsageError(f"--adopt takes one recipe KEY, got {len(keys)}: {' '.join(keys)}")
        click.echo(json.dumps({"key": keys[0], "folder": str(adopt_model(keys[0], adopt, settings, seed=seed)), "adopted_from": str(adopt)}))
        return
    for key in keys:
        started = time.perf_counter()
        _, info = get_model(key, settings, seed=seed)
        info = {**info, "key": key, "seconds": round(time.perf_counter() - started, 1)}
        click.echo(json.dumps(info))
