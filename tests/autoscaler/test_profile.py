"""``skyroute profile``: a goodput profile measured against the simulated engine."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoscaler.profile import measure_profile
from router.policy import GoodputProfile
from simengine.perf_model import PROFILES
from tests.gateway.harness import Engine

SCALE = 0.5  # the engine sleeps half the modelled time: wall-clock ms = model ms x SCALE
ENGINE = PROFILES["a10g-llama-3.1-8b"]
SLO_MS = 45.0  # model ms: 16 sequences fit (TPOT 44.5 ms), 17 do not


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    started = Engine("a10g-llama-3.1-8b", "upstream-chat", SCALE, seed=5).start()
    yield started
    started.kill()


def test_the_measured_batch_and_goodput_match_the_engines_model(engine: Engine) -> None:
    measured = asyncio.run(measure_profile(engine.url, "upstream-chat", SLO_MS * SCALE))
    assert abs(measured.max_concurrency - ENGINE.max_running_within(SLO_MS)) <= 2
    expected = ENGINE.goodput_tokens_per_s(SLO_MS) / SCALE
    assert measured.tokens_per_s == pytest.approx(expected, rel=0.15)
    assert measured.prefill_tokens_per_s == pytest.approx(
        ENGINE.prefill_tokens_per_s / SCALE, rel=0.25
    )


def test_the_command_writes_a_snippet_the_policy_accepts(engine: Engine, tmp_path: Path) -> None:
    out = tmp_path / "snippet.yaml"
    subprocess.run(
        [sys.executable, "-m", "skyroute.autoscale_cmd", "profile", "--url", f"{engine.url}/v1",
         "--model", "upstream-chat", "--slo-tpot-ms", str(SLO_MS * SCALE), "--max-concurrency", "4",
         "--out", str(out)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    profile = GoodputProfile.model_validate(yaml.safe_load(out.read_text())["goodput"])
    assert profile.max_concurrency == 4
