"""Jobs that span core packages: the layer between the core (keyword_dict, indexer, reranker, plugin,
engine) and the commands/UI on top.

A job combines components that must not know each other: scoring an index's entities with a model
(indexer + reranker), sampling training negatives through the engine (reranker + engine), the demo's
end-to-end build. Core packages never import this package.
"""
