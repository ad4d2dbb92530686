"""No key material in any log line: traffic with every kind of credential (the bootstrap
key, keys created through the admin API and the CLI, revoked and expired keys, the
admin token as Bearer and as Basic, wrong keys in every header shape) goes through a
real gateway logging at DEBUG, in JSON and in plain text; then its whole output, from
start to shutdown, is scanned for the secrets and for anything shaped like an
``sk-`` key."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.access.conftest import (
    access_policy,
    admin,
    create_key,
    openai_client,
    post_chat,
    put_tenant,
    replicas,
    tenant_name,
)
from tests.gateway.conftest import CHAT, EMBED, Fleet
from tests.gateway.harness import ADMIN_TOKEN, API_KEY, Gateway

SK_TOKEN = re.compile(r"sk-[A-Za-z0-9_\-]+")
WRONG_KEYS = ["sk-wrong-0123456789abcdef", "sk-x", "sk-proj-AbCdEf0123456789_-zz"]


@dataclass
class Scanned:
    log: str
    secrets: list[str]
    requests: int


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _traffic(gw: Gateway) -> tuple[list[str], int]:
    """Send the traffic; return every secret it used and how many requests reached a pool."""
    tenant = tenant_name("logscan")
    put_tenant([gw], tenant)
    created = create_key(gw, tenant, name="created")["secret"]
    revoked = create_key(gw, tenant, name="revoked")
    expiring = create_key(gw, tenant, name="expiring", expires_in_s=0.5)
    env = {**os.environ, "SKYROUTE_ADMIN_URL": gw.base, "SKYROUTE_ADMIN_TOKEN": ADMIN_TOKEN}
    cli_out = subprocess.run(
        [sys.executable, "-c", "from skyroute.cli import main; main()", "keys", "create",
         "--tenant", tenant],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    from_cli = next(ln.split()[1] for ln in cli_out.splitlines() if ln.startswith("secret"))
    forwarded = 0
    for key in (API_KEY, created, revoked["secret"], from_cli):
        with openai_client(gw, key) as client:
            client.chat.completions.create(
                model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            with client.chat.completions.create(
                model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
            ) as stream:
                for _ in stream:
                    pass
            client.embeddings.create(model=EMBED, input="x")
            client.models.list()
            forwarded += 3
    assert admin(gw, "DELETE", f"/admin/keys/{revoked['id']}").is_success
    # Revocation takes effect within a second (a replica may reuse a verdict briefly).
    deadline = time.monotonic() + 2
    while post_chat(gw, revoked["secret"]).status_code != 401 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(max(expiring["expires_s"] - time.time(), 0) + 0.1)
    refused: list[dict[str, Any]] = []
    for key in (revoked["secret"], expiring["secret"], *WRONG_KEYS, ADMIN_TOKEN):
        refused.append({"Authorization": f"Bearer {key}"})
    for key in WRONG_KEYS:
        refused += [
            {"Authorization": f"Token {key}"},
            {"Authorization": key},
            {"Authorization": _basic("", key)},
            {"Authorization": f"Bearer {key} {key}"},
            {"X-Api-Key": key},
        ]
    refused.append({"Authorization": f"Bearer {created}", "X-Pad": "p" * 20_000})  # 431
    for headers in refused:
        reply = httpx.post(
            f"{gw.base}/v1/chat/completions",
            json={"model": CHAT, "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
            timeout=10,
        )
        assert reply.status_code in (401, 431), (headers, reply.status_code)
    for token in (ADMIN_TOKEN, API_KEY, created, *WRONG_KEYS):
        for path in ("/admin/tenants", f"/admin/keys?tenant={tenant}", "/metrics"):
            admin(gw, "GET", path, token=token)
    for credential in (_basic("admin", ADMIN_TOKEN), _basic("", WRONG_KEYS[0])):
        httpx.get(f"{gw.base}/admin/pools", headers={"Authorization": credential}, timeout=10)
    assert post_chat(gw, API_KEY, model="no-such-model").status_code == 404
    secrets = [API_KEY, ADMIN_TOKEN, created, revoked["secret"], expiring["secret"], from_cli]
    return secrets + WRONG_KEYS, forwarded


@pytest.fixture(scope="module", params=["json", "text"])
def scanned(
    request: pytest.FixtureRequest,
    access_fleet: Fleet,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scanned]:
    """The whole log of a DEBUG-level replica that served the traffic and shut down."""
    env = {"SKYROUTE_LOG_LEVEL": "DEBUG", "SKYROUTE_LOG_JSON": str(request.param == "json")}
    tmp = tmp_path_factory.mktemp(f"logscan-{request.param}")
    with replicas(tmp, access_policy(access_fleet), redis_url, 1, **env) as (gw,):
        secrets, forwarded = _traffic(gw)
        gw.stop()
        yield Scanned(gw.logs(), secrets, forwarded)


def test_the_log_covers_the_traffic(scanned: Scanned) -> None:
    # The scan below means something only if the requests were logged at all.
    assert scanned.log.count('"request"') + scanned.log.count(": request") >= scanned.requests


def test_no_secret_appears_in_any_log_line(scanned: Scanned) -> None:
    # A secret, or its random part without the prefix (when that part is long enough
    # not to occur by chance).
    needles = set(scanned.secrets) | {
        s.removeprefix("sk-") for s in scanned.secrets if len(s) >= 16
    }
    leaked = [
        (needle, line) for line in scanned.log.splitlines() for needle in needles if needle in line
    ]
    assert leaked == []


def test_no_sk_token_appears_in_any_log_line(scanned: Scanned) -> None:
    assert [line for line in scanned.log.splitlines() if SK_TOKEN.search(line)] == []


def test_no_basic_credential_appears_in_any_log_line(scanned: Scanned) -> None:
    encoded = [_basic("admin", ADMIN_TOKEN).split()[1], _basic("", WRONG_KEYS[0]).split()[1]]
    assert [line for line in scanned.log.splitlines() if any(e in line for e in encoded)] == []


def test_a_key_shaped_request_id_is_masked_in_the_json_access_log(
    access_fleet: Fleet, redis_url: str, tmp_path: Path
) -> None:
    leaked_id = "sk-live-0123456789abcdefABCDEF"
    with replicas(tmp_path, access_policy(access_fleet), redis_url, 1) as (gw,):
        reply = httpx.post(
            f"{gw.base}/v1/chat/completions",
            json={"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            headers={"Authorization": f"Bearer {API_KEY}", "x-request-id": leaked_id},
            timeout=30,
        )
        gw.stop()
    assert reply.status_code == 200
    assert leaked_id not in gw.logs()
