"""Run several routing policies through the same workload, fleet and scaler, plus the bounds.

The integer bound's MILP runs in a worker thread while the policies are simulated: HiGHS
releases the GIL, so on two cores it costs little wall-clock time.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from simulator import baselines  # noqa: F401  (registers the cost-aware baselines)
from simulator.bound import CHUNK_S, Bound, lower_bound
from simulator.engine import Progress, RunResult, SimConfig, Workload, simulate
from simulator.metrics import Series, Summary, summarize
from simulator.policies import RoutingPolicy
from simulator.relaxation import Relaxation, relaxation_bound
from simulator.scaler import ReactiveScaler, Scaler
from simulator.spec import FleetSpec

# The share of the attainable SLO attainment the valid bound (b) must reach.
RELAXATION_TARGET = 0.99

POLICIES: tuple[str, ...] = (
    "round-robin",
    "least-latency",
    "cheapest-only",
    "least-queue",
    "cheapest-free-slot",
    "litellm-cost-cooldown",
    "llm-d-weighted",
    "least-latency-budget",
    "skyroute",
)


@dataclass(frozen=True, eq=False)
class Comparison:
    """Every policy's run, summary and series (same order), and the offline bounds: the
    LP relaxation and (unless skipped) the integer bound, both fluid and for serving
    every request, and ``relaxation``, the valid bound for ``RELAXATION_TARGET`` of the
    attainable SLO (``simulator.relaxation``)."""

    spec: FleetSpec
    work: Workload
    config: SimConfig
    bound: Bound
    integer_bound: Bound | None
    runs: list[RunResult]
    summaries: list[Summary]
    series: list[Series]
    seconds: float
    relaxation: Relaxation | None = None


def policy_rng(seed: int, name: str) -> np.random.Generator:
    """A policy's own random stream: depends on the seed and its name, not on which
    other policies run."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def compare(
    spec: FleetSpec,
    work: Workload,
    config: SimConfig,
    names: Sequence[str] = POLICIES,
    *,
    scaler: Callable[[], Scaler] = ReactiveScaler,
    window_s: float = 60.0,
    block_s: float | None = 120.0,
    progress: Progress | None = None,
    on_policy: Callable[[str], None] | None = None,
    integer_bound: Bound | None = None,
    chunk_s: float | None = CHUNK_S,
) -> Comparison:
    """Run each policy in ``names`` with a fresh ``scaler()`` and summarise against the
    bounds over ``window_s`` windows; the integer bound uses blocks of ``block_s`` (None:
    skip it) and chunks of ``chunk_s`` on long traces (``bound.lower_bound``) unless
    ``integer_bound`` is given, already solved. Raises SimulationError on
    an unknown name or a failed solve."""
    started = time.perf_counter()
    routers = [RoutingPolicy.create(name, spec, policy_rng(config.seed, name)) for name in names]
    bound = lower_bound(spec, work, window_s)
    with ThreadPoolExecutor(max_workers=1) as pool:
        relaxed = pool.submit(relaxation_bound, spec, work, RELAXATION_TARGET, window_s)
        pending = (
            None
            if block_s is None or integer_bound is not None
            else pool.submit(
                lower_bound, spec, work, window_s, integer=True, block_s=block_s, chunk_s=chunk_s
            )
        )
        runs = []
        for router in routers:
            if on_policy is not None:
                on_policy(router.name)
            runs.append(simulate(spec, work, router, scaler(), config, progress))
        if on_policy is not None and pending is not None and not pending.done():
            on_policy("integer bound")
        integer = integer_bound if pending is None else pending.result()
        relaxation = relaxed.result()
    summaries, series = [], []
    for run in runs:
        summary, ser = summarize(
            spec, work, run, window_s, bound.total_usd, integer.total_usd if integer else None
        )
        summaries.append(summary)
        series.append(ser)
    return Comparison(
        spec, work, config, bound, integer, runs, summaries, series,
        time.perf_counter() - started, relaxation,
    )  # fmt: skip
