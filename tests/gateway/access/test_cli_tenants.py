"""``skyroute tenants create|update|delete|list`` against a running gateway pair, the way
an operator runs them (only the admin URL and credential in the environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.gateway.access.conftest import admin, tenant_name
from tests.gateway.harness import ADMIN_TOKEN, Gateway


def _skyroute(gw: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    env |= {"SKYROUTE_ADMIN_URL": gw.base, "SKYROUTE_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.run(
        [sys.executable, "-c", "from skyroute.cli import main; main()", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_tenants_create_update_list_and_delete(pair: list[Gateway]) -> None:
    name = tenant_name("cli")

    created = _skyroute(pair[0], "tenants", "create", name, "--rpm", "30", "--budget-usd", "5")
    assert created.returncode == 0, created.stderr
    again = _skyroute(pair[0], "tenants", "create", name)
    assert again.returncode == 1 and "exists" in again.stderr

    updated = _skyroute(pair[0], "tenants", "update", name, "--tpm", "9000")
    assert updated.returncode == 0, updated.stderr
    stored = admin(pair[0], "GET", "/admin/tenants").json()[name]
    # update changes only the fields it names.
    assert (stored["rpm"], stored["tpm"], stored["budget_usd"]) == (30, 9000, 5.0)

    listed = _skyroute(pair[0], "tenants", "--output", "json")
    assert json.loads(listed.stdout)[name]["tpm"] == 9000
    table = _skyroute(pair[0], "tenants")
    assert any(line.startswith(name) for line in table.stdout.splitlines())

    deleted = _skyroute(pair[0], "tenants", "delete", name)
    assert deleted.returncode == 0, deleted.stderr
    assert name not in admin(pair[0], "GET", "/admin/tenants").json()
    missing = _skyroute(pair[0], "tenants", "update", name, "--rpm", "1")
    assert missing.returncode == 1 and "no tenant" in missing.stderr


def test_an_invalid_tenant_is_refused_in_one_line(pair: list[Gateway]) -> None:
    result = _skyroute(pair[0], "tenants", "create", tenant_name("bad"), "--rpm", "0")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("skyroute: 400 ")
