"""jingpai (精排): domain dictionaries, dictionary-augmented indexing and neural reranking for
Elasticsearch and OpenSearch, Chinese first."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jingpai")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
