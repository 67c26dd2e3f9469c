"""The rerank service's OpenAPI schema agrees with its behaviour: schemathesis against the real app.

A tiny real cross-encoder behind the real FastAPI app, driven in-process through schemathesis's ASGI
transport by its own engine — the examples, coverage (boundary and negative values) and fuzzing phases the
``schemathesis run`` CLI runs, with every check (server errors, documented status codes, content types and
response schemas, schema-valid data accepted, schema-invalid data rejected). The run is bounded and
reproducible: a fixed seed, derandomized generation, a few examples per operation and no example database.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import schemathesis
import torch
from fastapi import FastAPI
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import StopReason, events, from_schema
from schemathesis.generation import GenerationMode

from jingpai.reranker import registry
from jingpai.reranker.base import Reranker
from jingpai.reranker.service import ServiceSettings, create_app

# no max-time: with one, schemathesis keeps fuzzing until it runs out; max-examples bounds the run instead
# (about 10 s here). Health checks judge generation speed on a busy machine, not the service: off.
CONFIG = """
seed = 17
suppress-health-check = ["all"]
[generation]
mode = "all"
max-examples = 50
deterministic = true
database = "none"
[output.sanitization]
enabled = false
[checks]
enabled = true
[phases.stateful]
enabled = false
"""

FUSION_PARAMETERS = ("fusion", "fusion_weight", "rrf_k")


def parallel_scores(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """Make a valid ``/rerank`` case meet the rules JSON Schema cannot state: ``scores`` and ``keywords.words``
    parallel to ``texts``.

    (Fusion parameters need ``scores`` too.) The schema's descriptions state the rules; ``test_service.py`` and
    ``test_keyword_serving.py`` pin the 422s for breaking them; invalid cases are left as generated.
    """
    body = case.body
    if (
        case.operation.path == "/rerank"
        and case.meta is not None
        and case.meta.generation.mode == GenerationMode.POSITIVE
        and isinstance(body, dict)
        and isinstance(body.get("texts"), list)
    ):
        scores = body.get("scores")
        if isinstance(scores, list):
            body["scores"] = (scores + [0.0] * len(body["texts"]))[: len(body["texts"])]
        elif any(body.get(name) is not None for name in FUSION_PARAMETERS) and body.get("fusion") != "replace":
            body["scores"] = [float(i) for i in range(len(body["texts"]))]
        keywords = body.get("keywords")
        if isinstance(keywords, dict) and isinstance(keywords.get("words"), list):
            keywords["words"] = (keywords["words"] + [None] * len(body["texts"]))[: len(body["texts"])]
    return case


def documents_carry_their_fields(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """Make a valid Cohere case meet the rule JSON Schema cannot state here: an object document carries ``text``,
    or each field ``rank_fields`` names (``test_cohere_contract.py`` pins the 422s for breaking it)."""
    body = case.body
    if (
        case.operation.path in ("/v1/rerank", "/v2/rerank")
        and case.meta is not None
        and case.meta.generation.mode == GenerationMode.POSITIVE
        and isinstance(body, dict)
        and isinstance(body.get("documents"), list)
    ):
        fields = body.get("rank_fields") if isinstance(body.get("rank_fields"), list) else ["text"]
        for doc in body["documents"]:
            if isinstance(doc, dict):
                for name in fields:
                    if isinstance(name, str) and not isinstance(doc.get(name), str):
                        doc[name] = "x"
    return case


def fix_cases(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    return documents_carry_their_fields(context, parallel_scores(context, case))


SCORING = ["POST /rerank", "POST /v1/rerank", "POST /v2/rerank", "POST /opensearch/text_similarity"]


@pytest.fixture(scope="module")
def app(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    torch.manual_seed(0)
    saved = registry.create("cross", base=str(tiny_bert_dir), max_length=32, device="cpu").save(
        tmp_path_factory.mktemp("schema-served") / "tiny-cross"
    )
    # the default limits: generated requests stay far below them, so a 413 would be a finding, not a limit
    return create_app(ServiceSettings(model_name="tiny-cross", dtype="fp32", warmup=False), Reranker.load(saved, device="cpu"))


@pytest.mark.timeout(60)
def test_every_route_behaves_as_its_openapi_schema_says(app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_str(CONFIG))
    schema.hook("map_case")(fix_cases)
    failures: dict[tuple[str, str, str], str] = {}  # (operation, check, title) → how to reproduce it
    sent: Counter[tuple[str, GenerationMode]] = Counter()
    errors: list[str] = []
    finished = None
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for node in event.recorder.cases.values():
                sent[event.recorder.label, node.value.meta.generation.mode] += 1
            for case_id, checks in event.recorder.checks.items():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        response = event.recorder.interactions[case_id].response
                        answer = f"{response.status_code} {response.content!r}" if response is not None else "no response"
                        key = (event.recorder.label, check.name, failure.title)
                        failures.setdefault(key, f"{failure.message}\n    {check.failure_info.code_sample}\n    → {answer}")
        elif isinstance(event, events.NonFatalError | events.FatalError):
            errors.append(repr(event))
        elif isinstance(event, events.EngineFinished):
            finished = event
    report = "\n".join(f"{op} [{check}] {title}: {how}" for (op, check, title), how in sorted(failures.items()))
    assert not failures, f"{len(failures)} schema/behaviour disagreements:\n{report}"
    assert not errors
    assert finished is not None and finished.stop_reason == StopReason.COMPLETED
    for op in SCORING:  # every scoring route got valid and invalid requests
        assert sent[op, GenerationMode.POSITIVE] >= 5 and sent[op, GenerationMode.NEGATIVE] >= 5, (op, sent)


def test_the_schema_names_the_served_model_and_documents_every_error_status(app: FastAPI) -> None:
    spec = app.openapi()
    cohere = spec["components"]["schemas"]["CohereRerankRequest"]["properties"]
    assert cohere["model"]["anyOf"] == [{"const": "tiny-cross", "type": "string"}, {"type": "null"}]
    assert cohere["documents"]["minItems"] == 1
    statuses = {"200", "400", "413", "422", "429", "500", "503"}
    for path, failed, body in (
        ("/rerank", {"424"}, "ErrorBody"), ("/v1/rerank", set(), "CohereErrorBody"), ("/v2/rerank", set(), "CohereErrorBody"),
        ("/opensearch/text_similarity", set(), "ErrorBody"),
    ):
        responses = spec["paths"][path]["post"]["responses"]
        assert set(responses) == statuses | failed
        for status in statuses - {"200"} | failed:
            assert responses[status]["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{body}"}
    tei = spec["components"]["schemas"]["TeiRerankRequest"]["properties"]
    assert tei["truncation_direction"]["enum"] == ["Right", "Left", "right", "left"]
    error_type = spec["components"]["schemas"]["ErrorBody"]["properties"]["error_type"]
    assert {"Validation", "Tokenizer", "Overloaded", "Backend", "Unhealthy"} <= set(error_type["enum"])
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's 422 shape is never sent
