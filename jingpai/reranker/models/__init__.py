"""One module per architecture; see jingpai.reranker.registry."""
