"""``skyroute simulate --in-pool``: replay a trace with prompt block ids (the Mooncake
JSONL format, ``hash_ids``) through each in-pool replica choice (``simulator.inpool``)
on the pools of one model, and print what each achieved.

The fleet is the policy's pools of ``--model`` scaled to the trace's mean load
(``simulator.spec.auto_scale``: the cheapest pool at its max replicas carries it, the
others keep their initial replicas), so the choices are compared where replicas are
busy enough for the choice to matter. ``loadtests/bench_inpool.py`` prints the same
table for the Mooncake trace in ../shared, with the issue's targets.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from router.policy import Policy
from simulator.errors import SimulationError
from simulator.inpool import POLICIES, InPoolResult, InPoolSetup, simulate_in_pool
from simulator.prefix_trace import PrefixTrace, read_prefix_jsonl
from simulator.spec import FleetSpec, auto_scale

Row = dict[str, float | str]


def in_pool_fleet(trace: PrefixTrace, policy: Policy, model: str) -> tuple[InPoolSetup, float]:
    """The pools of ``model`` scaled to ``trace``'s mean load, and the scale used."""
    duration = max(trace.trace.duration_s, 1e-9)
    scale = auto_scale(
        policy,
        float(trace.output_tokens.sum()) / duration,
        mean_prompt_tokens_per_s=float(trace.prompt_tokens.sum()) / duration,
        model=model,
    )
    spec = FleetSpec.build(policy, model=model, scale=scale)
    return InPoolSetup.from_fleet(spec), scale


def _row(r: InPoolResult) -> Row:
    return {
        "policy": r.policy,
        "hit_rate": round(r.hit_rate, 4),
        "ttft_p50_ms": round(r.ttft_ms(50), 1),
        "ttft_p99_ms": round(r.ttft_ms(99), 1),
        "slo_attainment": round(r.slo_attainment, 4),
        "cost_usd": round(r.cost_usd, 4),
        "imbalance": round(r.imbalance, 3),
    }


def in_pool_table(
    trace: PrefixTrace,
    policy: Policy,
    model: str,
    seed: int,
    name: str,
    say: Callable[[str], None] = print,
) -> list[Row]:
    """Replay ``trace`` once per in-pool choice; print (through ``say``) the fleet and
    one row per choice: prefix-cache hit rate, TTFT p50/p99 (ms), SLO attainment (the
    model's default class), provisioned cost (USD) and load imbalance (max / mean
    time-averaged in-flight per replica). Returns the rows."""
    setup, scale = in_pool_fleet(trace, policy, model)
    say(f"trace {name}: {len(trace)} requests over {trace.trace.duration_s:.0f} s "
        f"(timestamps read as {trace.trace.time_unit}), fleet scale {scale:g}")  # fmt: skip
    for p in setup.pools:
        say(f"  {p.id:<36} {p.replicas} replicas x {p.profile.batch_slots} slots, "
            f"{p.kv_blocks} blocks cached, ${p.usd_per_replica_hour:.2f}/h each")  # fmt: skip
    say(f"{'policy':<16} {'hit rate':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'SLO met':>8} "
        f"{'cost $':>7} {'imbal.':>7}")  # fmt: skip
    rows = []
    for choice in POLICIES:
        row = _row(simulate_in_pool(trace, setup, choice, seed))
        rows.append(row)
        say(f"{row['policy']:<16} {row['hit_rate']:>8.3f} {row['ttft_p50_ms']:>9.0f} "
            f"{row['ttft_p99_ms']:>9.0f} {row['slo_attainment']:>8.3f} "
            f"{row['cost_usd']:>7.2f} {row['imbalance']:>7.2f}")  # fmt: skip
    return rows


def run_in_pool(args: argparse.Namespace, policy: Policy) -> int:
    """``skyroute simulate --in-pool``: the table for ``args.trace``; 0 on success.
    Raises SimulationError (unreadable trace, unknown model)."""
    chat = [m for m, spec in policy.models.items() if spec.kind == "chat"]
    model = args.model or chat[0]
    if model not in policy.models:
        raise SimulationError(f"model {model!r} is not in the policy")
    trace = read_prefix_jsonl(args.trace, args.time_unit)
    if args.max_requests is not None:
        trace = trace.head(args.max_requests)
    if not len(trace):
        raise SimulationError(f"trace {args.trace} holds no request")
    in_pool_table(trace, policy, model, args.seed, Path(args.trace).name)
    return 0
