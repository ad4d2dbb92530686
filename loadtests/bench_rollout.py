"""How fast a rollout catches a bad version, and what the version touches first.

    python loadtests/bench_rollout.py [--rate 50] [--runs 20] [--plan FILE] [--quick]

At ``--rate`` requests/s (Poisson arrivals; prompt and output lengths drawn from a real
trace: the Azure conversation trace in ../shared/data when present, else the sample in
loadtests/), a rollout of a new version over a stable one is replayed in simulated time
(``simulator.rollout``: the simulated engine's latency model, the gateways' counts, the
leader's judgement every second). For each regression of the new version (TPOT x1.2,
x1.5; 1 %, 5 % of its requests failing) the table gives the time to rollback and the
user requests the version answered first, as a number and as a share of the requests in
that window; for an identical version, how many of ``--runs`` rollouts (one seed each)
were rolled back (false alarms) and how long promotion took. The plan is
``router.rollout_plan.DEFAULT_PLAN`` unless ``--plan`` names one. Prints a markdown
table; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the project's packages
    sys.path.insert(0, str(ROOT))

from live.rollout_table import plan_from_yaml  # noqa: E402
from router.policy import SLOClass  # noqa: E402
from router.rollout import Stage  # noqa: E402
from router.rollout_plan import DEFAULT_PLAN, RolloutPlan  # noqa: E402
from simengine.perf_model import PROFILES  # noqa: E402
from simulator.rollout import (  # noqa: E402
    RolloutReplay,
    VersionModel,
    replay_rollout,
    replicas_for,
)
from simulator.trace import Trace, read_trace  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SAMPLE = ROOT / "loadtests" / "azure_conv_trace_sample.csv"
# The demo's interactive class (skyroute/fleet/demo-policy.yaml) on the demo's A10G
# engines: the fleet is sized so the stable version meets it at the rate.
SLO = SLOClass(ttft_ms=800, tpot_ms=60)
PROFILE = PROFILES["a10g-llama-3.1-8b"]
CASES = (("TPOT x1.2", 1.2, 0.0), ("TPOT x1.5", 1.5, 0.0), ("1 % errors", 1.0, 0.01),
         ("5 % errors", 1.0, 0.05))  # fmt: skip


def workload(rate: float, duration_s: float, seed: int, sizes: Trace) -> Trace:
    """Poisson arrivals at ``rate`` for ``duration_s``, sizes drawn from ``sizes``."""
    rng = np.random.default_rng(seed)
    n = int(rate * duration_s)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    pick = rng.integers(0, len(sizes), n)
    prompt = np.minimum(sizes.prompt_tokens[pick], 8000)
    output = np.clip(sizes.output_tokens[pick], 1, 1000)
    return Trace(arrivals, prompt.astype(np.int64), output.astype(np.int64), "poisson")


def one(plan: RolloutPlan, trace: Trace, factor: float, errors: float, seed: int,
        replicas: int) -> RolloutReplay:  # fmt: skip
    stable = VersionModel(PROFILE, replicas)
    canary = VersionModel(PROFILE, replicas, tpot_factor=factor, error_rate=errors)
    return replay_rollout(trace, plan, stable, canary, SLO, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests/s (50)")
    parser.add_argument("--runs", type=int, default=20, help="seeds per case (20)")
    parser.add_argument("--plan", type=Path, help="rollout plan YAML (default: the built-in)")
    parser.add_argument("--hours", type=float, default=2.0, help="trace length, h (2)")
    parser.add_argument("--quick", action="store_true", help="3 runs, 20 minutes (smoke)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.hours = 3, 1 / 3
    plan = plan_from_yaml(args.plan.read_text()) if args.plan else DEFAULT_PLAN
    sizes = read_trace(SHARED if SHARED.is_file() else SAMPLE)
    replicas = replicas_for(workload(args.rate, 600.0, 0, sizes), PROFILE)
    print(f"rate {args.rate:g} req/s, {replicas} replicas of {PROFILE.name} per version, "
          f"sizes from {Path(sizes.source).name}, {args.runs} seed(s) per case, "
          f"trace {args.hours:g} h; plan: "
          f"{'shadow ' + str(plan.shadow.share) + ', ' if plan.shadow else ''}"
          f"steps {[s.share for s in plan.steps]}, metrics "
          f"{[(m.name, m.allowed) for m in plan.judgement.metrics]}")  # fmt: skip
    started = time.monotonic()
    print(
        "\n| new version | rolled back | time to rollback s (median, max) | "
        "user requests it served (median, max) | share of the window's requests (max) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for name, factor, errors in CASES:
        runs = [one(plan, workload(args.rate, args.hours * 3600, s, sizes), factor, errors, s,
                    replicas) for s in range(args.runs)]  # fmt: skip
        back = [r for r in runs if r.stage is Stage.ROLLED_BACK]
        times = [r.decided_s for r in back if r.decided_s is not None]
        exposed = [r.exposed for r in runs]
        shares = [r.exposed / max(r.window, 1) for r in runs]
        print(
            f"| {name} | {len(back)}/{len(runs)} | "
            f"{_mm(times, '.0f')} | {_mm(exposed, '.0f')} | {max(shares):.3%} |"
        )
    same = [one(plan, workload(args.rate, args.hours * 3600, 1000 + s, sizes), 1.0, 0.0,
                1000 + s, replicas) for s in range(args.runs)]  # fmt: skip
    false = sum(r.stage is Stage.ROLLED_BACK for r in same)
    promoted = [r.decided_s for r in same if r.stage is Stage.PROMOTED and r.decided_s]
    print(
        f"| identical | {false}/{len(same)} (false alarms) | promoted in "
        f"{_mm(promoted, '.0f')} s | {_mm([r.exposed for r in same], '.0f')} | "
        f"{max(r.exposed / max(r.window, 1) for r in same):.3%} |"
    )
    print(f"\n{len(CASES) * args.runs + len(same)} replays in {time.monotonic() - started:.0f} s")


def _mm(values: list[float] | list[int], fmt: str) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):{fmt}}, {max(values):{fmt}}"


if __name__ == "__main__":
    main()
