"""Versions of a model in the policy: the checks on them, and the route keys they compile to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from base.errors import PolicyError
from router.compiled import compile_policy, route_key
from router.policy import Policy
from router.policy_loader import parse_policy
from router.scoring import RouteRequest, rank
from router.snapshot import Snapshot

FIXTURE = Path(__file__).parent.parent / "fixtures" / "router_policy.yaml"
BIG = "llama-3.1-70b"
H100, A100 = "aws:us-east-1:h100-llama70b", "gcp:us-central1:a100-llama70b"


def _doc(**versions: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())
    for p in doc["pools"]:
        if p["id"] in versions and versions[p["id"]] is not None:
            p["version"] = versions[p["id"]]
    return doc


def _problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(yaml.safe_dump(doc), "test.yaml")
    return [f"{p.path}: {p.message}" for p in info.value.problems]


def test_a_versioned_model_routes_its_serving_version_unless_a_version_is_asked_for() -> None:
    doc = _doc(**{H100: "v1", A100: "v2"})
    doc["models"][BIG]["version"] = "v1"
    policy = Policy.model_validate(doc)
    compiled = compile_policy(policy)

    ids = compiled.pool_ids
    assert [ids[i] for i in compiled.by_model[BIG]] == [H100]
    assert [ids[i] for i in compiled.by_model[route_key(BIG, "v2")]] == [A100]
    assert [ids[i] for i in compiled.by_model[route_key(BIG, "v1")]] == [H100]
    assert compiled.versions[BIG] == ("v1", "v2")
    assert BIG not in {m for m in compiled.versions if m != BIG}

    snapshot = Snapshot.empty(compiled)
    request = RouteRequest(BIG, 100, 50, "interactive", "us-east")
    assert [r.pool_id for r in rank(request, compiled, snapshot).explain()] == [H100]
    canary = RouteRequest(BIG, 100, 50, "interactive", "us-east", version="v2")
    assert [r.pool_id for r in rank(canary, compiled, snapshot).explain()] == [A100]


def test_versions_must_be_complete_and_name_the_serving_one() -> None:
    no_serving = _doc(**{H100: "v1", A100: "v2"})
    assert any("models.llama-3.1-70b.version" in p and "say which one" in p
               for p in _problems(no_serving))  # fmt: skip

    unknown = _doc(**{H100: "v1", A100: "v2"})
    unknown["models"][BIG]["version"] = "v3"
    assert any("no pool serves version 'v3'" in p for p in _problems(unknown))

    partial = _doc(**{H100: "v1"})
    partial["models"][BIG]["version"] = "v1"
    assert any(p.startswith("pools[1].version") for p in _problems(partial))
