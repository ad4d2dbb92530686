"""The README's demo command brings up Redis, the fleet and a working gateway."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai

from skyroute.embedded_redis import free_port
from tests.gateway.harness import wait_until

KEY = "sk-demo-smoke-0123456789"


def test_demo_serves_openai_requests_across_the_fleet_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    env |= {"SKYROUTE_API_KEY": KEY, "SKYROUTE_PORT": str(port),
            "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip
    context_file = tmp_path / "config" / "skyroute" / "context.json"
    log = (tmp_path / "demo.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from skyroute.cli import main; main()", "demo"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(f"http://127.0.0.1:{port}/readyz", timeout_s=60)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=30
        )
        with client:
            raw = client.chat.completions.with_raw_response.create(
                model="llama-3.1-8b", messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
            assert raw.status_code == 200
            assert raw.headers["x-skyroute-provider"] in {"aws", "gcp", "azure"}
            assert len(list(client.models.list())) == 3
        # The operator commands find the demo through its context alone.
        assert context_file.exists()
        pools = subprocess.run(
            [sys.executable, "-c", "from skyroute.cli import main; main()", "pools"],
            env=env | {"SKYROUTE_PORT": "1"}, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert pools.returncode == 0, pools.stderr
        assert "aws:us-east-1" in pools.stdout
        _every_subcommand_works_from_the_context(env | {"SKYROUTE_PORT": "1"}, context_file)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        log.close()
    output = (tmp_path / "demo.log").read_text()
    assert KEY in output  # printed once for the operator to copy
    assert f"curl -s http://127.0.0.1:{port}/v1/chat/completions" in output
    assert not context_file.exists()  # a stopped demo leaves no context pointing at it


def _every_subcommand_works_from_the_context(env: dict[str, str], context_file: Path) -> None:
    """Each operator subcommand, with nothing but the demo's context: exit 0, no traceback."""
    pool = "aws:us-east-1:h100-llama70b"
    policy = json.loads(context_file.read_text())["policy"]
    commands = [
        ["pools", "--output", "json"],
        ["tenants"],
        ["tenants", "create", "smoke-tenant", "--rpm", "60"],
        ["tenants", "update", "smoke-tenant", "--tpm", "6000"],
        ["keys", "create", "--tenant", "smoke-tenant"],
        ["keys", "list", "--tenant", "smoke-tenant"],
        ["usage", "--tenant", "default", "--output", "json"],
        ["explain", "--model", "llama-3.1-8b", "--prompt-tokens", "100"],
        ["prices", "show"],
        ["pool", "drain", pool],
        ["pool", "uncordon", pool],
        ["tenants", "delete", "smoke-tenant"],
        ["policy", "check", policy],
    ]
    for command in commands:
        result = subprocess.run(
            [sys.executable, "-c", "from skyroute.cli import main; main()", *command],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, (command, result.stderr)
        assert "Traceback" not in result.stderr, command
