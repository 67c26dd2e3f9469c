"""The rerank service's Prometheus metrics (:class:`ServiceMetrics`), one registry per app."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class ServiceMetrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("jingpai_rerank_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.request_seconds = Histogram("jingpai_rerank_request_seconds", "HTTP request latency", ["route"], registry=r)
        self.pairs = Counter("jingpai_rerank_pairs", "(query, document) pairs scored, chunks included", registry=r)
        self.embedded = Counter("jingpai_rerank_embedded_texts", "texts embedded (/embed, /v1/embeddings)", registry=r)
        self.batches = Counter("jingpai_rerank_batches", "forward passes run", registry=r)
        self.failed_batches = Counter("jingpai_rerank_failed_batches", "forward passes that raised", registry=r)
        self.queue_timeouts = Counter("jingpai_rerank_queue_timeouts", "requests answered 429 (overloaded) after waiting too long", registry=r)
        buckets_n = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        self.batch_pairs = Histogram("jingpai_rerank_batch_pairs", "pairs (texts, when embedding) per forward pass", buckets=buckets_n, registry=r)
        self.batch_requests = Histogram("jingpai_rerank_batch_requests", "requests merged into one forward pass", buckets=buckets_n, registry=r)
        self.batch_tokens = Histogram(
            "jingpai_rerank_batch_tokens", "padded tokens per forward pass",
            buckets=(64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072), registry=r,
        )
        # padding waste = 1 - real / padded (what length bucketing and batch shaping keep small)
        self.padded_tokens = Counter("jingpai_rerank_padded_tokens", "token positions computed, padding included", registry=r)
        self.real_tokens = Counter("jingpai_rerank_real_tokens", "token positions that hold a real token", registry=r)
        self.queue_seconds = Histogram("jingpai_rerank_queue_seconds", "time from arrival to the first batch", registry=r)
        self.inference_seconds = Histogram("jingpai_rerank_inference_seconds", "featurize + forward time per batch", registry=r)
        self.keywords = Counter(
            "jingpai_rerank_given_keywords", "texts sent with their keywords: taken by the model, or found again (another "
            "dictionary version, or a model without keywords)", ["outcome"], registry=r,
        )

    def given_keywords(self, *, taken: int, sent: int) -> None:
        """Count a request's texts sent with keywords: ``taken`` of the ``sent`` were used."""
        self.keywords.labels(outcome="taken").inc(taken)
        self.keywords.labels(outcome="not_taken").inc(sent - taken)

    def padding_waste(self) -> float | None:
        """Share of the computed token positions that were padding (``None`` before the first batch)."""
        padded = self.padded_tokens._value.get()
        return None if not padded else 1.0 - self.real_tokens._value.get() / padded


__all__ = ["ServiceMetrics"]
