"""Policy reloads swap atomically; an invalid policy is refused and the old one stays."""

from __future__ import annotations

import httpx
import openai
import yaml

from tests.gateway.conftest import CHAT, Fleet
from tests.gateway.harness import API_KEY, Gateway, wait_for

MESSAGES = [{"role": "user", "content": "reload"}]


def _pool_of(client: openai.OpenAI) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model=CHAT, messages=MESSAGES, max_tokens=2
    )  # type: ignore[arg-type]
    return raw.headers["x-skyroute-pool"]


def test_invalid_policy_reload_is_refused_and_old_policy_keeps_routing(
    client: openai.OpenAI, gateway: Gateway, fleet: Fleet
) -> None:
    good = fleet.policy_path.read_text()
    broken = good.replace("usd_per_gpu_hour: 0.4", "usd_per_gpu_hour: -0.4", 1)
    assert broken != good
    fleet.policy_path.write_text(broken)

    reply = gateway.admin("POST", "/admin/policy/reload")

    assert reply.status_code == 400
    body = reply.json()
    assert body["error"]["code"] == "invalid_policy"
    problem = body["problems"][0]
    assert problem["path"] == "pools[0].price.usd_per_gpu_hour"
    assert broken.splitlines()[problem["line"] - 1].strip().startswith("usd_per_gpu_hour")
    assert _pool_of(client) == "gcp:us-central1:cheap"
    assert gateway.admin("GET", "/readyz").json()["policy_version"] == 1


def test_broken_policy_file_is_not_picked_up_by_the_file_watcher(
    client: openai.OpenAI, gateway: Gateway, fleet: Fleet
) -> None:
    fleet.policy_path.write_text("pools: [this is: not, a policy\n")
    # The watcher (0.2 s polls) logs the refusal: wait for that, not for a time.
    wait_for(lambda: "policy reload refused" in gateway.logs(), "the watcher's refusal")
    assert _pool_of(client) == "gcp:us-central1:cheap"
    assert gateway.admin("GET", "/readyz").json()["policy_version"] == 1


def test_valid_policy_change_is_applied_without_restart(
    client: openai.OpenAI, gateway: Gateway, fleet: Fleet
) -> None:
    doc = yaml.safe_load(fleet.policy_path.read_text())
    doc["pools"][0]["price"]["usd_per_gpu_hour"] = 5.0  # the cheap pool is now the dearest
    fleet.policy_path.write_text(yaml.safe_dump(doc, sort_keys=False))

    reply = gateway.admin("POST", "/admin/policy/reload")

    # The file watcher may apply the change first; either way it is version 2, once.
    assert reply.status_code == 200
    assert reply.json()["version"] == 2
    assert _pool_of(client) == "aws:us-east-1:mid"
    again = gateway.admin("POST", "/admin/policy/reload").json()
    assert (again["status"], again["version"]) == ("unchanged", 2)


def test_admin_reload_refuses_the_client_key(gateway: Gateway) -> None:
    reply = httpx.post(
        f"{gateway.base}/admin/policy/reload", headers={"Authorization": f"Bearer {API_KEY}"}
    )
    assert reply.status_code == 401
    assert reply.json()["error"]["type"] == "authentication_error"
