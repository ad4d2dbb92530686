"""Schemathesis against a running gateway's own OpenAPI document (``/openapi.json``):
for every operation, a bounded number of generated requests, valid ones and (where the
operation takes input) invalid ones, sent with the right credential. No answer may be
a 5xx, and no documented answer may break its schema.

Generation is derandomized, so a run is repeatable and a failure reproduces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.figures import report
from tests.gateway.access.conftest import NO_DRAIN_DELAY
from tests.gateway.conftest import CHAT, EMBED
from tests.gateway.harness import (
    ADMIN_TOKEN,
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    write_policy,
)

POSITIVE_EXAMPLES = 50
NEGATIVE_EXAMPLES = 25
OPERATIONS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("POST", "/admin/policy/reload"),
    ("GET", "/admin/pools"),
    ("GET", "/admin/pools/{pool_id}"),
    ("GET", "/admin/dashboard/data"),
    ("GET", "/admin/dashboard/fleet"),
    ("POST", "/admin/pools/{pool_id}/drain"),
    ("POST", "/admin/pools/{pool_id}/uncordon"),
    ("POST", "/admin/pools/{pool_id}/replicas/drain"),
    ("POST", "/admin/pools/{pool_id}/replicas/uncordon"),
    ("GET", "/admin/tenants"),
    ("PUT", "/admin/tenants/{name}"),
    ("DELETE", "/admin/tenants/{name}"),
    ("POST", "/admin/keys"),
    ("GET", "/admin/keys"),
    ("DELETE", "/admin/keys/{key_id}"),
    ("GET", "/admin/usage"),
    ("POST", "/admin/rollouts"),
    ("GET", "/admin/rollouts"),
    ("GET", "/admin/rollouts/{model}"),
    ("POST", "/admin/rollouts/{model}/{action}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
]
EXAMPLES_RUN: dict[str, int] = {}
# Conformance, not only "no 5xx": every status code and content type an answer has is
# documented, documented headers are there, answers match their schema, invalid input
# is refused (4xx), and a request without its credential is refused.
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


@pytest.fixture(scope="module")
def target(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[tuple[Gateway, Any]]:
    """A replica of its own (generated admin calls change tenants and keys) in front of
    engines that never sleep (generated requests ask for up to 8192 tokens), and the
    OpenAPI document it serves, loaded by schemathesis."""
    tmp = tmp_path_factory.mktemp("schemathesis")
    chat = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.0, seed=1).start()
    embed = Engine("a10g-bge-large", "upstream-embed", 0.0, seed=2).start()
    gw: Gateway | None = None
    try:
        pools = [
            pool("gcp:us-central1:chat", chat, provider="gcp", region="us-central1", model=CHAT, usd_per_gpu_hour=0.4),
            pool("aws:us-east-1:embed", embed, provider="aws", region="us-east-1", model=EMBED, usd_per_gpu_hour=1.0),
        ]  # fmt: skip
        doc = policy_doc(pools, [CHAT, EMBED])
        doc["models"][EMBED]["kind"] = "embedding"
        policy = write_policy(tmp / "policy.yaml", doc)
        gw = Gateway(policy, redis_url, unique_prefix(), extra_env=NO_DRAIN_DELAY).start()
        yield gw, schemathesis.openapi.from_url(f"{gw.base}/openapi.json")
    finally:
        if gw is not None:
            gw.stop()
        chat.kill()
        embed.kill()
        report(
            f"schemathesis: {sum(EXAMPLES_RUN.values())} generated requests over "
            f"{len(EXAMPLES_RUN)} operation/mode runs (at most {POSITIVE_EXAMPLES} valid and "
            f"{NEGATIVE_EXAMPLES} invalid per operation)"
        )


def _credential(path: str) -> dict[str, str]:
    token = API_KEY if path.startswith("/v1/") else ADMIN_TOKEN
    return {"Authorization": f"Bearer {token}"}


def _fuzz(target: tuple[Gateway, Any], method: str, path: str, mode: GenerationMode) -> None:
    gw, schema = target
    operation = schema[path][method]
    headers = _credential(path)
    # Most generated model names are unknown (a 404); a third of the time use a served
    # one instead, so that generated bodies also reach routing and the engines.
    models = st.sampled_from([None, None, CHAT, EMBED])
    ran = 0

    @hypothesis.settings(
        max_examples=POSITIVE_EXAMPLES if mode is GenerationMode.POSITIVE else NEGATIVE_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode), model=models)
    def run(case: Any, model: str | None) -> None:
        nonlocal ran
        ran += 1
        # Only valid bodies: a served name would make an invalid one valid.
        if (
            mode is GenerationMode.POSITIVE
            and model is not None
            and isinstance(case.body, dict)
            and "model" in case.body
        ):
            case.body["model"] = model
        case.call_and_validate(
            base_url=gw.base,
            headers=headers,
            checks=CONFORMANCE,
            timeout=30,
        )

    try:
        run()
    except hypothesis.errors.Unsatisfiable:
        pytest.skip(f"schemathesis generates no {mode.value} request for {method} {path}")
    finally:
        EXAMPLES_RUN[f"{mode.value} {method} {path}"] = ran


def test_every_operation_in_the_schema_is_fuzzed(target: tuple[Gateway, Any]) -> None:
    served = {
        (method.upper(), path)
        for path, item in target[1].raw_schema["paths"].items()
        for method in item
    }
    assert served == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_valid_requests_get_no_5xx_and_schema_conformant_answers(
    target: tuple[Gateway, Any], method: str, path: str
) -> None:
    _fuzz(target, method, path, GenerationMode.POSITIVE)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_invalid_requests_get_no_5xx_and_schema_conformant_answers(
    target: tuple[Gateway, Any], method: str, path: str
) -> None:
    _fuzz(target, method, path, GenerationMode.NEGATIVE)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_streamed_answer_conforms_to_its_documented_schema(
    target: tuple[Gateway, Any], path: str
) -> None:
    gw, schema = target
    body: dict[str, Any] = {"model": CHAT, "max_tokens": 2, "stream": True}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    case = schema[path]["POST"].Case(body=body, media_type="application/json")
    case.call_and_validate(
        base_url=gw.base, headers=_credential(path), checks=[response_schema_conformance]
    )


@pytest.mark.parametrize("query", [{"to_s": 1e17}, {"from_s": -1e17, "to_s": 0}])
def test_usage_with_a_time_beyond_datetimes_range_is_not_a_server_error(
    target: tuple[Gateway, Any], query: dict[str, float]
) -> None:
    gw, schema = target
    case = schema["/admin/usage"]["GET"].Case(query={"tenant": "t", **query})
    case.call_and_validate(
        base_url=gw.base, headers=_credential("/admin/usage"), checks=[not_a_server_error]
    )
