"""``skyroute autoscale --once --dry-run`` prints the plan and changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.autoscaler.conftest import RedisTarget, make_policy, pool_doc


def test_once_dry_run_prints_the_plan_as_a_table(target: RedisTarget, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    doc = pool_doc("aws:us-east-1:a")
    policy.write_text(yaml.safe_dump(make_policy([doc]).model_dump(mode="json")))
    env = {**os.environ, "SKYROUTE_REDIS_URL": target.url, "SKYROUTE_REDIS_PREFIX": target.prefix,
           "SKYROUTE_CLOUD_ADAPTER_FOR": '{"aws": "fake"}'}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "skyroute.autoscale_cmd", "autoscale", "--once", "--dry-run",
         "--policy", str(policy)],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["pool", "buy", "$/h", "tok/s"]
    assert any(line.startswith("aws:us-east-1:a ") for line in lines)
    assert "history too short" in done.stdout
