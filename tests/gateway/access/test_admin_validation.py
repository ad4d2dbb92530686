"""The admin API checks what it is given as strictly as the policy loader: a key's
lifetime is finite and bounded, a tenant names only regions, client regions and SLO
classes the policy has. Refusals are OpenAI-shaped 400s naming the field."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.access.conftest import admin, tenant_name
from tests.gateway.harness import ADMIN_TOKEN, Gateway


@pytest.mark.parametrize(
    "expires",
    ["1e999", "1e12", "-5", "0", '"soon"'],
    ids=["overflows-to-inf", "beyond-ten-years", "negative", "zero", "not-a-number"],
)
def test_a_key_lifetime_must_be_finite_and_bounded(pair: list[Gateway], expires: str) -> None:
    name = tenant_name("lifetime")
    assert admin(pair[0], "PUT", f"/admin/tenants/{name}", {}).status_code == 200
    # Sent as written: a JSON number that overflows to infinity cannot come from json.dumps.
    reply = httpx.post(
        f"{pair[0].base}/admin/keys",
        content=f'{{"tenant": "{name}", "expires_in_s": {expires}}}',
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"},
        timeout=10,
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ({"allowed_regions": ["aws:mars-1"]}, "allowed_regions"),
        ({"client_region": "atlantis"}, "client_region"),
        ({"default_slo": "instant"}, "default_slo"),
    ],
)
def test_a_tenant_may_only_name_what_the_policy_has(
    pair: list[Gateway], spec: dict[str, object], param: str
) -> None:
    reply = admin(pair[0], "PUT", f"/admin/tenants/{tenant_name('refs')}", spec)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_a_key_request_with_an_unknown_field_is_refused(pair: list[Gateway]) -> None:
    name = tenant_name("fields")
    admin(pair[0], "PUT", f"/admin/tenants/{name}", {})
    reply = admin(pair[0], "POST", "/admin/keys", {"tenant": name, "expire_in_s": 60})
    assert reply.status_code == 400
