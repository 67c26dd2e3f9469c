"""Where jingpai looks for an engine when told nothing: light, so every ``--help`` can show it."""

#: where a locally started engine answers (`jingpai engine up`); the default of every --engine option
DEFAULT_ENGINE_URL = "http://127.0.0.1:9200"

__all__ = ["AUTH_ENV", "DEFAULT_ENGINE_URL"]

#: the environment variables of jingpai.engine.client.EngineAuth, shared by every engine-using command (each
#: command also reads its own JINGPAI_<COMMAND>_ENGINE_… first)
AUTH_ENV: dict[str, str] = {"user": "JINGPAI_ENGINE_USER", "password": "JINGPAI_ENGINE_PASSWORD", "api_key": "JINGPAI_ENGINE_API_KEY",
                            "ca_file": "JINGPAI_ENGINE_CA_FILE"}
