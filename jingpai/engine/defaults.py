"""Where jingpai looks for an engine when told nothing: light, so every ``--help`` can show it."""

#: where a locally started engine answers (`jingpai engine up`); the default of every --engine option
DEFAULT_ENGINE_URL = "http://127.0.0.1:9200"

__all__ = ["DEFAULT_ENGINE_URL"]
