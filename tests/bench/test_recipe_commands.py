"""Every report recipe's ``command`` (the ``jingpai train`` line docs/models.md and the report print as "how this
model was trained") must stay a line ``jingpai train`` accepts: known options, valid choices, config fields the
architecture has. Parsed only: no training, no data."""

from __future__ import annotations

import shlex

import click
import pytest

from bench.eval_models import RECIPES
from jingpai.commands.train import parse_config, train
from jingpai.reranker import registry

TRAIN_LINES = {key: recipe.command for key, recipe in RECIPES.items() if (recipe.command or "").startswith("jingpai train ")}


def parse(argv: list[str]) -> dict:
    """The options of one ``jingpai train`` argument list, each Choice value checked; raises click's usage errors."""
    ctx = click.Context(train)
    opts, args, _ = train.make_parser(ctx).parse_args(list(argv))
    if args:
        raise click.UsageError(f"unexpected arguments {args}")
    for param in train.params:
        value = opts.get(param.name)
        if value is not None and isinstance(param.type, click.Choice):
            for item in value if param.multiple else (value,):
                param.type.convert(item, param, ctx)
    return opts


def test_the_report_has_train_lines_for_its_cpu_recipes() -> None:
    # the recipes a CPU-only rerun of the report trains must say how: the esim reranker and the hybrid embedder
    assert {"zh-esim", "zh-emb", "zh-use-rank"} <= TRAIN_LINES.keys()


@pytest.mark.parametrize("key", sorted(TRAIN_LINES))
def test_recipe_command_is_a_valid_train_line(key: str) -> None:
    recipe = RECIPES[key]
    opts = parse(shlex.split(TRAIN_LINES[key])[2:])
    assert opts["model_name"] == recipe.arch
    fields = registry.get(recipe.arch).config_class.__dataclass_fields__
    unknown = sorted(set(parse_config(tuple(opts.get("config_items") or ()))) - set(fields))
    assert not unknown, f"{key}: --config {unknown} are not fields of {recipe.arch}'s config"
    settings = recipe.train_settings or {}
    # the line trains what the recipe trains: the same budget and learning rate where the recipe sets them
    if "max_minutes" in settings:
        assert float(opts["max_minutes"]) == settings["max_minutes"]
    if "lr" in settings:
        assert float(opts["lr"]) == settings["lr"]
    # a recipe that trains on from another's weights says so (and one that does not, does not)
    assert (opts.get("init_from") is not None) == (recipe.init_from is not None), key


def test_a_broken_line_is_caught() -> None:
    with pytest.raises(click.NoSuchOption, match="--bogus"):
        parse(["--model", "use-bi", "--bogus", "1"])
    with pytest.raises(click.BadParameter, match="'words' is not one of"):
        parse(["--model", "use-bi", "--batching", "words"])


def test_a_row_command_names_seeds_other_than_the_default():
    """The first of --seeds picks the trained run the judged section serves: a row measured on seed 2's models must
    rerun with them, and must not share seed 0's rerun command (the key a saved row is merged by)."""
    from bench.eval_common import DEFAULT_SEEDS, ReportSettings

    assert "--seeds" not in ReportSettings(seeds=DEFAULT_SEEDS).command("judged", "judged.a14.opensearch")
    assert "--seeds" not in ReportSettings(seeds=(0, 1)).command("judged", "judged.a14.opensearch")
    assert ReportSettings(seeds=(2,)).command("judged", "judged.a14.opensearch") == (
        "python -m bench report --sections judged --only judged.a14.opensearch --seeds 2")


@pytest.mark.parametrize("key", sorted(RECIPES))
def test_recipe_settings_are_train_settings(key: str) -> None:
    """What ``python -m bench train KEY`` hands the training loop is a valid TrainSettings, full and quick (a recipe
    once said ``patience: 0``, the command line's spelling of TrainSettings' None, and failed before its first step)."""
    from jingpai.reranker.train_settings import TrainSettings

    recipe = RECIPES[key]
    for opts in ({**(recipe.train_settings or {})}, {**(recipe.train_settings or {}), **(recipe.quick_settings or {})}):
        opts.setdefault("metric", "accuracy")
        TrainSettings(seed=0, progress=False, **opts)
