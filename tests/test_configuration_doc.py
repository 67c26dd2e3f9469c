"""docs/configuration.md lists every environment variable of every command, as the commands define them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- env-table:begin -->", "<!-- env-table:end -->"


def load_generator():
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_is_the_commands_own() -> None:
    text = DOC.read_text(encoding="utf-8")
    documented = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert documented == load_generator().table().strip(), "regenerate with: .venv/bin/python scripts/config_table.py"


def test_every_variable_follows_the_scheme_or_is_a_listed_shared_one() -> None:
    generator = load_generator()
    # the engine's address and credentials are one set for every command that talks to it (docs/security.md)
    shared = {"JINGPAI_ENGINE_URL", "JINGPAI_ENGINE_USER", "JINGPAI_ENGINE_PASSWORD", "JINGPAI_ENGINE_API_KEY", "JINGPAI_ENGINE_CA_FILE",
              "JINGPAI_CACHE_DIR", "JINGPAI_DATA_DIR"}
    # read by `tune` and `plugin` before the scheme existed (they sit next to a gateway's settings)
    older = {"JINGPAI_GATEWAY_ENGINE", "JINGPAI_GATEWAY_RERANKER"}
    for variable, option, _, also in generator.rows():
        name = variable.strip("`")
        # JINGPAI_<COMMAND>_<OPTION>; a group's sub-commands may share the group's prefix (JINGPAI_ENGINE_KIND)
        words = option.strip("`").split(" --")[0].split()[1:]
        prefixes = ["_".join(words[:n]).replace("-", "_").upper() for n in range(1, len(words) + 1)]
        assert any(name.startswith(f"JINGPAI_{p}_") for p in prefixes) or name in shared, (name, option)
        assert all(a.strip(" `") in shared | older for a in also.split(",") if a.strip()), (name, also)
