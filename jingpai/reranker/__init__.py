"""Matching models, training, evaluation and the rerank service."""
