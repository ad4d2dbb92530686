"""The README's demo, end to end: one ``skyroute demo`` on free ports serves OpenAI
requests, every operator subcommand works from nothing but the context it writes (a
fresh HOME and XDG_CONFIG_HOME, no ``SKYROUTE_*`` variable), a price change moves
traffic, and a burst makes the autoscaler grow the EU L4 pool with local engines and
shrink it again, which the dashboard API shows.

One demo process serves every test of the module (it takes tens of seconds to start).
Its autoscaler runs with shorter intervals than the demo's own (injected through the
environment); every wait is on a condition with a bounded deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from skyroute.embedded_redis import free_port
from tests.figures import report
from tests.gateway.harness import wait_for, wait_until
from tests.skyroute.import_audit import audit_env, extra_closure, imported_distributions

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-demo-smoke-0123456789"
EU_POOL = "gcp:europe-west4:l4-llama8b"
FAST = {
    "SKYROUTE_AUTOSCALE_INTERVAL_S": "3",
    "SKYROUTE_AUTOSCALE_COOLDOWN_S": "10",
    "SKYROUTE_AUTOSCALE_SCALE_DOWN_WINDOW_S": "10",
}


@dataclass
class Demo:
    """A running demo: its gateway URL, the CLI's environment and the context file."""

    base: str
    cli_env: dict[str, str]
    context_file: Path
    log: Path
    imports: Path
    admin_token: str = ""

    def cli(self, *words: str, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from skyroute.cli import main; main()", *words],
            env=self.cli_env, capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip

    def admin(self, path: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        return httpx.get(f"{self.base}{path}", headers=headers, timeout=10)

    def chat(self, region: str = "aws:us-east-1") -> httpx.Response:
        body = {"model": "llama-3.1-8b", "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
        headers = {"Authorization": f"Bearer {KEY}", "x-skyroute-client-region": region}
        return httpx.post(
            f"{self.base}/v1/chat/completions", json=body, headers=headers, timeout=30
        )


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    env |= {"HOME": str(tmp / "home"), "XDG_CONFIG_HOME": str(tmp / "config"),
            "XDG_DATA_HOME": str(tmp / "data")}  # fmt: skip
    # Every process of the demo and of the CLI writes down what it imports.
    env |= audit_env(tmp / "imports")
    (tmp / "home").mkdir(exist_ok=True)
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    tmp = tmp_path_factory.mktemp("demo")
    port = free_port()
    env = _clean_env(tmp) | {"SKYROUTE_API_KEY": KEY, "SKYROUTE_PORT": str(port)} | FAST
    log_path = tmp / "demo.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from skyroute.cli import main; main()", "demo"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    context_file = tmp / "config" / "skyroute" / "context.json"
    made = Demo(
        f"http://127.0.0.1:{port}", _clean_env(tmp), context_file, log_path, tmp / "imports"
    )
    try:
        wait_until(f"{made.base}/readyz", timeout_s=240)
        admin_file = json.loads(context_file.read_text())["admin_token_file"]
        made.admin_token = Path(admin_file).read_text().strip()
        yield made
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
        log.close()
    output = log_path.read_text()
    assert KEY in output  # printed once for the operator to copy
    assert f"curl -s {made.base}/v1/chat/completions" in output
    assert not context_file.exists()  # a stopped demo leaves no context pointing at it
    assert "Traceback" not in output


def test_demo_serves_openai_requests_across_the_fleet(demo: Demo) -> None:
    client = openai.OpenAI(base_url=f"{demo.base}/v1", api_key=KEY, max_retries=0, timeout=30)
    with client:
        raw = client.chat.completions.with_raw_response.create(
            model="llama-3.1-8b", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert raw.status_code == 200
        assert raw.headers["x-skyroute-provider"] in {"aws", "gcp", "azure"}
        assert len(list(client.models.list())) == 3
    assert demo.context_file.exists()


SUBCOMMANDS = [
    ["pools"],
    ["pools", "--output", "json"],
    ["pool", "drain", "aws:us-east-1:h100-llama70b"],
    ["pool", "uncordon", "aws:us-east-1:h100-llama70b"],
    ["tenants"],
    ["usage", "--tenant", "default", "--output", "json"],
    ["explain", "--model", "llama-3.1-8b", "--prompt-tokens", "100"],
    ["prices", "show"],
    ["prices", "refresh", "--feed", "static", "--force"],
    ["autoscale", "--once", "--dry-run"],
    ["policy", "check", "{policy}"],
]


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=lambda w: " ".join(w[:2]))
def test_subcommand_works_from_the_demo_context_alone(demo: Demo, words: list[str]) -> None:
    policy = json.loads(demo.context_file.read_text())["policy"]
    result = demo.cli(*(w.replace("{policy}", policy) for w in words))
    assert result.returncode == 0, (words, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert result.stdout.strip()


def _ok(demo: Demo, *words: str) -> str:
    result = demo.cli(*words)
    assert result.returncode == 0, (words, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    return result.stdout


def test_tenant_and_key_lifecycle_from_the_demo_context_alone(demo: Demo) -> None:
    _ok(demo, "tenants", "create", "smoke-tenant", "--rpm", "60")
    _ok(demo, "tenants", "update", "smoke-tenant", "--tpm", "6000")
    created = _ok(demo, "keys", "create", "--tenant", "smoke-tenant")
    key_id = created.split("key id", 1)[1].split()[0]
    assert key_id in _ok(demo, "keys", "list", "--tenant", "smoke-tenant")
    _ok(demo, "keys", "revoke", key_id)
    _ok(demo, "tenants", "delete", "smoke-tenant")


def test_replica_drain_and_uncordon_from_the_demo_context_alone(demo: Demo) -> None:
    pool = "aws:us-east-1:h100-llama70b"
    address = demo.admin(f"/admin/pools/{pool}").json()["replicas"][0]["address"]
    _ok(demo, "replica", "drain", pool, address)
    _ok(demo, "replica", "uncordon", pool, address)


@pytest.mark.parametrize(
    "words",
    [
        ["pool", "drain", "no:such:pool"],
        ["prices", "set", "no:such:pool", "1.0"],
        ["prices", "set", "gcp:europe-west4:l4-llama8b", "-3"],
    ],
    ids=["drain-unknown-pool", "price-unknown-pool", "price-negative"],
)
def test_a_failing_subcommand_is_one_line_and_exit_1(demo: Demo, words: list[str]) -> None:
    result = demo.cli(*words)
    assert result.returncode == 1, (words, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("skyroute:")


def test_a_price_set_from_the_cli_moves_traffic(demo: Demo) -> None:
    """The US llama-3.1-8b traffic takes the cheapest pool per token, azure's A100; priced
    at 20 USD per GPU-hour it costs more per token than aws's A10G, so traffic moves."""
    assert demo.chat().headers.get("x-skyroute-provider") == "azure"
    result = demo.cli("prices", "set", "azure:eastus:a100-llama8b", "20")
    assert result.returncode == 0, result.stderr
    assert "20 USD per GPU-hour" in result.stdout
    try:
        wait_for(
            lambda: demo.chat().headers.get("x-skyroute-provider") == "aws",
            "US llama-3.1-8b traffic to move to aws",
            timeout_s=30,
        )
    finally:
        # Back to the catalog price (3.673 USD per instance-hour, 1 GPU).
        assert demo.cli("prices", "set", "azure:eastus:a100-llama8b", "3.673").returncode == 0
    wait_for(
        lambda: demo.chat().headers.get("x-skyroute-provider") == "azure",
        "US llama-3.1-8b traffic to move back to azure",
        timeout_s=30,
    )


def test_a_burst_grows_the_local_pool_and_it_shrinks_after(demo: Demo) -> None:
    result = demo.cli(
        "load", "--output", "json", "--warmup-s", "10", "--burst-s", "30",
        "--concurrency", "12", "--cooldown-s", "150",
        timeout_s=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["ok"] > 0
    pool = summary["pools"][EU_POOL]
    assert pool["peak"] > pool["before"], summary
    assert pool["end"] == pool["before"], summary
    assert summary["scale_up_s"] is not None and summary["scale_down_s"] is not None
    report(
        f"demo burst: {EU_POOL} {pool['before']:g} -> {pool['peak']:g} -> {pool['end']:g} "
        f"replicas; scale-up {summary['scale_up_s']} s after the burst started, scale-down "
        f"{summary['scale_down_s']} s after it ended"
    )

    # The dashboard API recorded it: more ready replicas, then as many as before. Its
    # history samples the gateway's snapshot every 2 s, so its newest sample may trail
    # what the load command read last.
    def samples() -> list[dict[str, Any]]:
        fleet: list[dict[str, Any]] = demo.admin("/admin/dashboard/fleet").json()["samples"]
        return fleet

    sizes = [s["ready"][EU_POOL] for s in samples()]
    assert max(sizes) > sizes[0]
    wait_for(
        lambda: samples()[-1]["ready"][EU_POOL] == sizes[0],
        "the dashboard's newest sample to show the pool back at its size",
        timeout_s=30,
    )
    costs = [s["usd_per_hour"] for s in samples()]
    assert max(costs) > costs[-1]  # the extra replicas cost while they ran


@pytest.mark.parametrize(
    "words",
    [["load"], ["prices", "set", "gcp:europe-west4:l4-llama8b", "1.0"], ["pools"]],
    ids=["load", "prices-set", "pools"],
)
def test_without_a_demo_or_variables_a_subcommand_says_what_to_do(
    tmp_path: Path, words: list[str]
) -> None:
    env = _clean_env(tmp_path) | {"SKYROUTE_PORT": str(free_port())}  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-c", "from skyroute.cli import main; main()", *words],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("skyroute:"), lines


# Imported when present, and run without: opentelemetry's SDK reads process figures from
# psutil; httpx, aiohttp and urllib3 decode brotli; httpx's own command line (click is a
# dependency of uvicorn) uses rich and pygments; starlette and anyio ask sniffio which
# async library runs.
OPTIONAL = {"psutil", "brotli", "rich", "pygments", "sniffio"}


def test_the_demo_imports_only_what_its_extra_installs(demo: Demo) -> None:
    """Last in the module, so the audit has seen every process the tests above ran: the
    gateway, the engines, both sidecars through a burst and a scale-down, and every CLI
    subcommand. ``scripts/demo`` installs ``.[demo]``; anything else they import would
    be missing on a fresh machine (the sidecars' boto3 and scipy were, once)."""
    imported = imported_distributions(demo.imports)
    # The audit saw the gateway, the engines and the autoscaler.
    assert {"fastapi", "aiohttp", "scipy"} <= imported.keys()
    installed = extra_closure(ROOT / "pyproject.toml", "demo") | OPTIONAL
    missing = {dist: sorted(tops) for dist, tops in imported.items() if dist not in installed}
    assert not missing, missing
