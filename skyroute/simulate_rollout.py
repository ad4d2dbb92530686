"""``skyroute simulate --rollout PLAN``: replay the trace through a rollout of a new
version (``simulator.rollout``) and print what it touched before the decision."""

from __future__ import annotations

import argparse
from pathlib import Path

from live.rollout_table import plan_from_yaml
from router.policy import Policy
from router.rollout_plan import DEFAULT_PLAN, RolloutPlan
from simulator.errors import SimulationError
from simulator.rollout import VersionModel, replay_rollout, replicas_for
from simulator.spec import demo_profile
from simulator.trace import Trace


def _plan(name: str) -> RolloutPlan:
    if name == "default":
        return DEFAULT_PLAN
    try:
        return plan_from_yaml(Path(name).read_text())
    except (OSError, ValueError) as exc:
        raise SimulationError(f"rollout plan {name}: {exc}") from exc


def run_rollout(args: argparse.Namespace, policy: Policy, trace: Trace) -> int:
    """Replay ``trace`` through a rollout of a version ``--canary-tpot`` times slower
    and failing ``--canary-errors`` of its requests; print the moves and the exposure."""
    chat = [m for m, spec in policy.models.items() if spec.kind == "chat"]
    model = args.model or chat[0]
    if model not in policy.models:
        raise SimulationError(f"model {model!r} is not in the policy")
    spec = policy.models[model]
    slo = policy.slo_classes[args.slo_class or spec.default_slo]
    pools = [p for p in policy.pools if p.model == model and p.version in (None, spec.version)]
    profile = demo_profile(pools[0])
    replicas = replicas_for(trace, profile)
    plan = _plan(args.rollout)
    stable = VersionModel(profile, replicas)
    canary = VersionModel(profile, replicas, args.canary_tpot, args.canary_errors)
    out = replay_rollout(trace, plan, stable, canary, slo, seed=args.seed)
    t0 = float(trace.arrival_s[0]) if len(trace) else 0.0
    print(f"rollout of {model} on {replicas} x {profile.name} per version, new version TPOT "
          f"x{args.canary_tpot:g}, {args.canary_errors:.1%} failing; {len(trace)} requests "
          f"over {trace.duration_s:.0f} s")  # fmt: skip
    for t in out.transitions:
        print(f"  +{t.at_s - t0:7.0f}s {t.from_stage} -> {t.to_stage} (step {t.step + 1}): "
              f"{t.reason}")  # fmt: skip
        for line in t.evidence:
            print(f"            {line}")
    decided = f"after {out.decided_s:.0f} s" if out.decided_s is not None else "(trace ended)"
    print(f"final stage: {out.stage} {decided}")
    print(
        f"user requests the new version served: {out.exposed} of {out.window} "
        f"({out.exposed / max(out.window, 1):.3%}); shadow copies: {out.shadow}"
    )
    return 0
