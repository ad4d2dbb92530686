"""Smoke tests of the side-by-side benchmark.

The default suite runs it --quick with the engine direct, the bare aiohttp proxy (the floor),
the same proxy behind uvicorn (bare-asgi) and skyroute. The run with the LiteLLM proxy and the Portkey gateway installs them into
.bench-venvs on first use (about a minute from PyPI and npm), so it is marked ``peers`` and
left out of the default suite (``scripts/test -m peers`` runs it). Numbers are never
asserted: the benchmark prints them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from loadtests.peer_litellm import litellm_env, write_litellm_config

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_drives_direct_the_floor_and_skyroute_without_errors(
    tmp_path: Path,
) -> None:
    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_peers.py"), "--quick", "--peers",
         "bare,bare-asgi", "--duration", "1", "--json", out],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    seen = {(r["mode"], r["target"]) for r in data["results"]}
    assert seen == {(m, t) for m in ("nonstream", "stream")
                    for t in ("direct", "bare", "bare-asgi", "skyroute")}  # fmt: skip
    for r in data["results"]:
        assert r["requests"] > 0 and r["errors"] == 0, r
        # The load generator's column is this process alone, not the proxies added in.
        assert r["loadgen_cpu_ms_per_req"] > 0, r
    for mode in ("nonstream", "stream"):
        cell = data["floor_summary"][f"{mode}/c=8"]
        assert cell["bare"]["cpu_x_floor"] == 1.0
        assert cell["skyroute"]["cpu_ms_per_req"] > 0
        assert cell["bare-asgi"]["cpu_ms_per_req"] > 0
    assert "the bare proxy's" in proc.stdout


@pytest.mark.peers
def test_quick_benchmark_drives_every_peer_pinned_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_peers.py"), "--quick", "--pin",
         "--json", out],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    targets = ("direct", "bare", "bare-asgi", "skyroute", "portkey", "litellm")
    seen = {(r["mode"], r["target"]) for r in data["results"]}
    assert seen == {(m, t) for m in ("nonstream", "stream") for t in targets}
    for r in data["results"]:
        assert r["requests"] > 0 and r["errors"] == 0, r
        if r["target"] != "direct":
            assert r["proxy_cpu_ms_per_req"] > 0 and r["added_p99_ms"] is not None, r
    assert set(data["peak_rss_mb"]) == set(targets[1:])
    assert data["config"]["pinned"]["redis_pinned"] is True
    assert set(data["comparison"]) == {"nonstream/c=8", "stream/c=8"}
    assert "skyroute vs LiteLLM" in proc.stdout


def test_litellm_serves_the_engine_as_an_openai_deployment_without_telemetry_or_database(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "litellm.yaml"
    write_litellm_config(cfg, "http://127.0.0.1:9", "sk-master", "m", "org/up", 30.0)
    doc = yaml.safe_load(cfg.read_text())
    (deployment,) = doc["model_list"]
    assert deployment["model_name"] == "m"
    assert deployment["litellm_params"]["model"] == "openai/org/up"
    assert deployment["litellm_params"]["api_base"] == "http://127.0.0.1:9/v1"
    assert doc["litellm_settings"]["telemetry"] is False
    assert "database_url" not in doc["general_settings"]
    env = litellm_env({"DATABASE_URL": "postgresql://x", "PATH": "/bin"})
    assert "DATABASE_URL" not in env and env["LITELLM_TELEMETRY"] == "False"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
