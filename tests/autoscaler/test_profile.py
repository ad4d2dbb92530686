"""``skyroute profile``: a goodput profile measured against the simulated engine."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoscaler.profile import RequestTiming, _decoding, measure_profile
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
    """The search ends on a level that met the TPOT target next to one that missed it,
    and the figures agree with the engine's model. The engine sleeps at least its
    modelled time, and a busy machine only adds to it; the batch is the requests seen
    decoding together, not those in flight (a loaded client or a prefill queue keeps
    some of them from decoding, which once let 24 in flight meet a target that 17
    sequences miss). So each figure is held tightly from above and loosely from below
    (on a loaded 2-core VM the batch came out at 11 of 16: the levels around the target
    are 0.5 ms of TPOT apart)."""
    slo_ms = SLO_MS * SCALE
    measured = asyncio.run(measure_profile(engine.url, "upstream-chat", slo_ms))
    levels = {level.concurrency: level for level in measured.levels}
    best = levels[measured.in_flight]
    assert best.tpot_p90_ms <= slo_ms
    assert levels[measured.in_flight + 1].tpot_p90_ms > slo_ms
    assert 1 <= measured.max_concurrency <= measured.in_flight
    assert measured.tokens_per_s == pytest.approx(
        measured.max_concurrency * 1000.0 / best.tpot_mean_ms
    )
    fits = ENGINE.max_running_within(SLO_MS)
    assert fits // 2 <= measured.max_concurrency <= fits + 2
    goodput = ENGINE.goodput_tokens_per_s(SLO_MS) / SCALE
    assert goodput * 0.5 <= measured.tokens_per_s <= goodput * 1.15
    prefill = ENGINE.prefill_tokens_per_s / SCALE
    assert prefill * 0.5 <= measured.prefill_tokens_per_s <= prefill * 1.25


def test_requests_that_did_not_decode_together_are_not_a_batch() -> None:
    # Four requests in flight, but two decode after the other two have finished (a
    # client that sent them late, or a prefill queue): a batch of two, not four.
    early = [RequestTiming(5.0, 10.0, 8, 32, first_s=0.0, last_s=1.0) for _ in range(2)]
    late = [RequestTiming(5.0, 10.0, 8, 32, first_s=2.0, last_s=3.0) for _ in range(2)]
    assert _decoding(early + late) == 2.0
    assert _decoding(early) == 2.0
    assert _decoding(early[:1]) == 1.0


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
