"""Print the environment-variable table of docs/configuration.md from the real click commands.

Usage: ``.venv/bin/python scripts/config_table.py > /tmp/table.md`` and paste it between the markers
(``tests/test_configuration_doc.py`` fails when the doc and the commands disagree).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jingpai.cli import cli  # noqa: E402


def walk(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Option]]:
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, name), (*path, name))
        return
    for param in command.params:
        if isinstance(param, click.Option) and param.envvar:
            yield " ".join(path), param


def rows() -> list[tuple[str, str, str, str]]:
    out = []
    for command, param in walk(cli, ("jingpai",)):
        names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
        flag = "/".join(param.opts + param.secondary_opts)
        unset = param.default is None or type(param.default).__name__ == "Sentinel"  # click >= 8.2: UNSET
        default = "" if unset or param.is_flag and not param.default else str(param.default)
        if isinstance(param.default, tuple):
            default = ",".join(map(str, param.default))
        out.append((f"`{names[0]}`", f"`{command} {flag}`", f"`{default}`" if default else "", ", ".join(f"`{n}`" for n in names[1:])))
    return out


def table() -> str:
    lines = ["| variable | option | default | also read |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
