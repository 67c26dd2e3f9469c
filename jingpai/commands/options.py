"""Click options generated from a component's settings dataclass, so each default lives in one place.

A command lists, per settings field, only how the field looks on the command line (:class:`Opt`: the
flag, the help line, a narrower click type). The default, the Python type and the environment variable
come from the dataclass and from one naming scheme::

    JINGPAI_<COMPONENT>_<OPTION>        e.g. JINGPAI_SERVE_MAX_BATCH_TOKENS for `jingpai serve --max-batch-tokens`

(docs/configuration.md has the table). Older names a deployment may still set are listed as
``Opt.env_aliases``: they are read after the scheme's name and their use is logged.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class S:
    ...     window: int = 20
    ...     progress: bool = True
    >>> spec = {"window": Opt(help="Hits reranked."), "progress": Opt(flag="--no-progress", negate=True)}
    >>> @click.command()
    ... @settings_options("demo", S, spec)
    ... def cmd(**values):
    ...     click.echo(settings_from(S, values, spec))
    >>> from click.testing import CliRunner
    >>> CliRunner().invoke(cmd, ["--window", "5", "--no-progress"]).output
    'S(window=5, progress=False)\\n'
    >>> CliRunner().invoke(cmd, [], env={"JINGPAI_DEMO_WINDOW": "7", "JINGPAI_DEMO_NO_PROGRESS": "1"}).output
    'S(window=7, progress=False)\\n'
"""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import click

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_MISSING = dataclasses.MISSING


class ModelDir(click.ParamType):
    """A model folder that exists, or a pretrained catalogue name (``bge-small-zh``), as a :class:`~pathlib.Path`.

    The name is resolved where the model loads (:func:`jingpai.reranker.pretrained.resolve`), which
    converts a cached jar on first use or says how to install it.
    """

    name = "model"

    def __init__(self, *, exists: bool = True) -> None:
        self.exists = exists  # False: the command checks the folder itself (with its own message)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        from jingpai.reranker.pretrained import CATALOGUE  # stdlib only: --help stays light

        if isinstance(value, Path):
            return value
        if str(value) in CATALOGUE and not Path(value).exists():
            return Path(value)
        return click.Path(exists=self.exists, file_okay=False, path_type=Path).convert(value, param, ctx)


#: the click type of every ``--model`` that loads a saved model, a cross-encoder folder or a catalogue name
MODEL_DIR = ModelDir()


@dataclass(frozen=True)
class Opt:
    """How one settings field appears on the command line (everything else comes from the dataclass).

    Args:
        flag: the option's long name (default: ``--`` + the field name with dashes); may be a click
            on/off pair such as ``"--expose-internals/--no-expose-internals"``.
        help: the help line.
        type: a click type narrower than the field's annotation (``click.IntRange(min=1)``).
        metavar: shown instead of the type name.
        negate: a ``--no-x`` flag for a field that defaults to ``True`` (its parameter is ``no_x``).
        multiple: the option may be repeated (field type ``tuple[...]``).
        csv: the field is a tuple given as one comma-separated value (``--text-fields title,content``).
        required: the option must be given (the field has no default or its default is not for CLIs).
        show_default: show the default in ``--help`` (never for on/off flags).
        show_envvar: show the environment variable in ``--help``.
        env_aliases: older environment variables still read after the scheme's name (use is logged).
        from_cli: converts the parsed CLI value to the field's value (after ``csv``).
    """

    flag: str | None = None
    help: str | None = None
    type: Any = None
    metavar: str | None = None
    negate: bool = False
    multiple: bool = False
    csv: bool = False
    required: bool = False
    show_default: bool = True
    show_envvar: bool = False
    env_aliases: tuple[str, ...] = ()
    from_cli: Callable[[Any], Any] | None = None


def env_name(component: str, flag: str) -> str:
    """The scheme's environment variable of ``flag`` (its first long name) in ``component``.

    >>> env_name("serve", "--max-batch-tokens")
    'JINGPAI_SERVE_MAX_BATCH_TOKENS'
    >>> env_name("gateway", "--expose-internals/--no-expose-internals")
    'JINGPAI_GATEWAY_EXPOSE_INTERNALS'
    """
    long = flag.split("/")[0].lstrip("-")
    return f"JINGPAI_{component}_{long}".upper().replace("-", "_")


def field_default(cls: type, name: str) -> Any:
    """The default of dataclass field ``name`` (``dataclasses.MISSING`` when it has none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not _MISSING:
                return f.default
            if f.default_factory is not _MISSING:
                return f.default_factory()
            return _MISSING
    raise KeyError(f"{cls.__name__} has no field {name!r}; its fields: {', '.join(f.name for f in dataclasses.fields(cls))}")


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _click_type(tp: Any) -> Any:
    tp = _strip_optional(tp)
    if typing.get_origin(tp) is Literal:
        return click.Choice([str(a) for a in typing.get_args(tp)])
    if typing.get_origin(tp) is tuple:
        return _click_type(typing.get_args(tp)[0])
    if tp is Path:
        return click.Path(path_type=Path)
    return {int: click.INT, float: click.FLOAT, str: click.STRING, bool: click.BOOL}.get(tp, click.STRING)


def _alias_callback(component: str, name: str, flag: str, aliases: tuple[str, ...]) -> Callable[..., Any]:
    primary = env_name(component, flag)

    def note_alias(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if ctx.get_parameter_source(param.name or name) is click.core.ParameterSource.ENVIRONMENT and primary not in os.environ:
            used = next((a for a in aliases if a in os.environ), None)
            if used is not None:
                logger.warning("%s is read from the older variable %s; set %s instead", flag.split("/")[0], used, primary)
        return value

    return note_alias


def _param_name(name: str, opt: Opt) -> str:
    return f"no_{name}" if opt.negate else name


def _option(component: str, cls: type, hints: Mapping[str, Any], name: str, opt: Opt) -> Callable[[F], F]:
    flag = opt.flag or "--" + name.replace("_", "-")
    default = field_default(cls, name)
    tp = _strip_optional(hints[name])
    # a plain name where there is one: click and the compose checks read ``param.envvar`` as a string
    envvar: str | list[str] = [env_name(component, flag), *opt.env_aliases] if opt.env_aliases else env_name(component, flag)
    kwargs: dict[str, Any] = {"help": opt.help, "envvar": envvar, "show_envvar": opt.show_envvar}
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    if opt.env_aliases:
        kwargs["callback"] = _alias_callback(component, name, flag, opt.env_aliases)
    if tp is bool and "/" not in flag:
        # a plain switch. A ``--no-x`` flag is its own parameter ``no_x`` (set by --no-x or by
        # JINGPAI_…_NO_X=1) that cli_values inverts: a flag_value=False switch would read "1" as True
        return click.option(flag, _param_name(name, opt), is_flag=True, default=False, **kwargs)
    if tp is bool:
        kwargs.update(default=default, show_default=opt.show_default)
        return click.option(flag, name, **kwargs)
    kwargs["type"] = opt.type if opt.type is not None else _click_type(tp)
    if opt.required:
        # no default at all: click counts even default=None as a given value of a required option
        kwargs["required"] = True
    elif default is _MISSING:
        kwargs["default"] = None
    elif opt.multiple:
        kwargs.update(multiple=True, default=tuple(default or ()))
    elif opt.csv:
        kwargs["default"] = ",".join(map(str, default)) if default else None
        kwargs["show_default"] = opt.show_default and bool(default)
    else:
        kwargs["default"] = default
        kwargs["show_default"] = opt.show_default and default is not None
    if opt.multiple:
        kwargs["multiple"] = True
    return click.option(flag, name, **kwargs)


#: the older engine-URL variable every engine-using command still reads after its own
SHARED_ENGINE_ENV = "JINGPAI_ENGINE_URL"


def engine_option(component: str, *, required: bool = False, help: str | None = None) -> Callable[[F], F]:
    """``--engine URL`` (parameter ``engine_url``) for a command that talks to Elasticsearch/OpenSearch, with the
    credential options of :func:`engine_auth_options` (read back with :func:`engine_auth`).

    Read from ``JINGPAI_<COMPONENT>_ENGINE``, then from the shared :data:`SHARED_ENGINE_ENV` (which the
    docker compose file sets once for every command run in the container); defaults to a local node.
    """
    from jingpai.engine.defaults import DEFAULT_ENGINE_URL

    primary = env_name(component, "--engine")
    url = click.option(
        "--engine", "engine_url", required=required, default=None if required else DEFAULT_ENGINE_URL,
        show_default=not required, envvar=[primary, SHARED_ENGINE_ENV],
        help=help or f"Engine URL [env {primary} or {SHARED_ENGINE_ENV}].",
    )
    auth = engine_auth_options(component)
    return lambda func: url(auth(func))


#: the credential options of an engine-using command: flag, EngineAuth field, help
_AUTH_OPTIONS = (
    ("--engine-user", "user", "User the engine authenticates (HTTP basic; with --engine-password)."),
    ("--engine-password", "password", "That user's password (prefer the environment variable: a command line is visible to "
                                      "other users of the machine)."),
    ("--engine-api-key", "api_key", "Elasticsearch API key (encoded id:key), instead of a user and password."),
    ("--engine-ca-file", "ca_file", "PEM file of the CA that signed an https:// engine's certificate (default: the system's CAs)."),
)
_AUTH_META = "jingpai.engine_auth"


def engine_auth_options(component: str) -> Callable[[F], F]:
    """``--engine-user``, ``--engine-password``, ``--engine-api-key`` and ``--engine-ca-file``, each read from
    ``JINGPAI_<COMPONENT>_ENGINE_…`` then the shared ``JINGPAI_ENGINE_…`` (:data:`jingpai.engine.defaults.AUTH_ENV`).

    They add no parameters to the command: :func:`engine_auth` builds the
    :class:`~jingpai.engine.client.EngineAuth` they give, so every command connects with the same rules.
    """
    from jingpai.engine.defaults import AUTH_ENV as shared

    def remember(field_name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
        def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
            if value is not None:
                ctx.meta.setdefault(_AUTH_META, {})[field_name] = value
        return callback

    decorators = []
    for flag, field_name, text in _AUTH_OPTIONS:
        primary = env_name(component, flag)
        envvars = [primary] if primary == shared[field_name] else [primary, shared[field_name]]
        decorators.append(click.option(
            flag, expose_value=False, default=None, callback=remember(field_name), envvar=envvars, show_envvar=False,
            type=click.Path(dir_okay=False, path_type=Path) if field_name == "ca_file" else str,
            metavar="FILE" if field_name == "ca_file" else ("KEY" if field_name == "api_key" else "TEXT"),
            help=f"{text} [env {' or '.join(envvars)}]",
        ))

    def apply(func: F) -> F:
        for decorate in reversed(decorators):
            func = decorate(func)
        return func

    return apply


def engine_auth():  # noqa: ANN201 - an EngineAuth (imported lazily: the client loads httpx)
    """The :class:`~jingpai.engine.client.EngineAuth` the running command's ``--engine-*`` options gave.

    Raises:
        jingpai.engine.client.EngineAccessError: a user without a password, both a user and a key, a missing CA file.
    """
    from jingpai.engine.client import EngineAuth

    ctx = click.get_current_context(silent=True)
    values = dict(ctx.meta.get(_AUTH_META, {})) if ctx is not None else {}
    return EngineAuth(**values)


def settings_options(component: str, cls: type, spec: Mapping[str, Opt]) -> Callable[[F], F]:
    """Add one click option per ``spec`` entry (in ``spec``'s order) for the fields of dataclass ``cls``.

    Args:
        component: the command's name in the environment scheme (``serve`` → ``JINGPAI_SERVE_*``).
        cls: the settings dataclass; defaults and types are read from it.
        spec: field name → :class:`Opt`.
    """
    hints = typing.get_type_hints(cls)
    unknown = [n for n in spec if n not in hints]
    if unknown:
        raise KeyError(f"{cls.__name__} has no field(s) {', '.join(unknown)}; its fields: {', '.join(hints)}")
    decorators = [_option(component, cls, hints, name, opt) for name, opt in spec.items()]

    def apply(func: F) -> F:
        for decorate in reversed(decorators):
            func = decorate(func)
        return func

    return apply


def cli_values(values: Mapping[str, Any], spec: Mapping[str, Opt]) -> dict[str, Any]:
    """The settings-field values among a command's parsed ``values`` (``None`` left out: field default).

    Comma-separated options become tuples and ``Opt.from_cli`` is applied.
    """
    out: dict[str, Any] = {}
    for name, opt in spec.items():
        param = _param_name(name, opt)
        if param not in values:
            continue
        value = values[param]
        if value is None:
            continue
        if opt.negate:
            out[name] = not value
            continue
        if opt.csv and isinstance(value, str):
            value = tuple(v.strip() for v in value.split(",") if v.strip())
        elif opt.multiple:
            value = tuple(value)
        if opt.from_cli is not None:
            value = opt.from_cli(value)
        out[name] = value
    return out


def settings_from(cls: type[T], values: Mapping[str, Any], spec: Mapping[str, Opt], **extra: Any) -> T:
    """Build ``cls`` from a command's parsed option ``values`` plus ``extra`` fields (which win)."""
    return cls(**{**cli_values(values, spec), **extra})


__all__ = ["SHARED_ENGINE_ENV", "Opt", "cli_values", "engine_auth", "engine_auth_options", "engine_option", "env_name", "field_default", "settings_from", "settings_options"]
