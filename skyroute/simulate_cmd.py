"""``skyroute simulate``: replay a trace through routing policies on a simulated fleet.

Prints the comparison table (five policies and the offline bound), writes
``<out>/result.json``, ``<out>/table.md`` and PNG plots, and shows a progress bar on
stderr for long runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from autoscaler.config import DEFAULT_HEADROOM, ScalerConfig
from live.policy_file import load_policy
from router.policy import Policy
from simulator.bound import CHUNK_S, lower_bound
from simulator.compare import POLICIES, RELAXATION_TARGET, Comparison, compare
from simulator.engine import SimConfig, Workload
from simulator.errors import SimulationError
from simulator.hindsight import HindsightScaler
from simulator.progress import ProgressBar
from simulator.reference import Reference, achievable_reference
from simulator.report import format_table, write_json, write_plots
from simulator.scaler import ReactiveScaler, Scaler, StaticScaler
from simulator.spec import FleetSpec, auto_scale, parse_fraction
from simulator.trace import TIME_UNITS, read_trace
from simulator.variants import VARIANTS, variant
from skyroute.simulate_planner import PlannerScaler, sim_config

_LONG_RUN = 20_000  # request-runs above which the progress bar is shown


def _reactive(policy: Policy, spec: FleetSpec, planner: ScalerConfig) -> Callable[[], Scaler]:
    return ReactiveScaler


def _static(policy: Policy, spec: FleetSpec, planner: ScalerConfig) -> Callable[[], Scaler]:
    return StaticScaler


def _planner(policy: Policy, spec: FleetSpec, planner: ScalerConfig) -> Callable[[], Scaler]:
    return partial(PlannerScaler.build, policy, spec, planner)


HINDSIGHT = "hindsight"  # needs the workload and the bound, so it is built in run()

# --scaler NAME -> a factory of fresh scalers (one per policy run) for the fleet.
SCALERS: dict[str, Callable[[Policy, FleetSpec, ScalerConfig], Callable[[], Scaler]]] = {
    "reactive": _reactive,
    "planner": _planner,
    "static": _static,
}


def parse_weights(text: str) -> dict[str, float]:
    """``"aws:us-east-1=0.6,gcp:us-central1=0.4"`` -> weights. Raises SimulationError."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        region, sep, weight = item.rpartition("=")
        try:
            out[region] = float(weight)
        except ValueError:
            sep = ""
        if not sep or not region:
            raise SimulationError(f"bad client region weight {item!r}; want REGION=WEIGHT")
    return out


def _reference_json(ref: Reference | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {
        "threshold": ref.threshold,
        "best": None if ref.best is None else asdict(ref.best),
        "candidates": [asdict(c) for c in ref.candidates],
    }


def _reference_text(ref: Reference, cmp: Comparison) -> str:
    """The achievable reference (a) and each policy's gap to it."""
    if ref.best is None:
        return f"\nachievable reference (a): no searched fleet reached {100 * ref.threshold:.2f} %"
    usd = ref.best.usd
    gaps = ", ".join(
        f"{s.policy} {100 * (s.provisioned_usd / usd - 1):+.1f}%" for s in cmp.summaries
    )
    return (
        f"\nachievable reference (a), not a bound: ${usd:.2f} at "
        f"{100 * ref.best.attainment:.2f} % ({ref.best.label}). Gap to it: {gaps}."
    )


def _headroom(text: str) -> float:
    value = float(text)
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(f"headroom must be >= 1, got {text}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``simulate`` to the ``skyroute`` command line."""
    p = subparsers.add_parser(
        "simulate",
        help="replay a request trace through routing policies on a simulated fleet",
        description=__doc__,
    )
    p.add_argument(
        "--trace", required=True, help="Azure CSV or JSONL (timestamp, input_length, output_length)"
    )
    p.add_argument(
        "--time-unit",
        choices=TIME_UNITS,
        default="auto",
        help="unit of numeric trace timestamps (Mooncake's are ms); 'auto' detects it from "
        "their magnitude and median gap, and the output says which was used",
    )
    p.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        default="original",
        help="reshape the trace into a stress variant (simulator/variants.py)",
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="also search for the achievable reference (a): the cheapest fleet of a fixed "
        "search (clairvoyant plans derated, fixed fleets) reaching 99 %% of the attainable "
        "SLO, replayed with skyroute's routing (slower)",
    )
    p.add_argument("--policy", help="routing policy YAML (default: the demo fleet)")
    p.add_argument("--model", help="model the trace asks for (default: the first chat model)")
    p.add_argument("--slo-class", help="SLO class of every request (default: the model's)")
    p.add_argument("--speedup", type=float, default=1.0, help="divide inter-arrival times by this")
    p.add_argument("--max-requests", type=int, help="replay only the first N requests")
    p.add_argument(
        "--client-regions",
        help='weights, e.g. "aws:us-east-1=0.6,gcp:us-central1=0.2,aws:eu-west-1=0.2" '
        "(default: the policy's client regions, equally)",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds every random draw")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated subset")
    p.add_argument(
        "--scale-fleet",
        default="1",
        help="replica size as a fraction of its node (1/32, 0.05) or 'auto': the cheapest "
        "pool at its max replicas carries the trace's mean load",
    )
    p.add_argument("--provisioning-s", type=float, help="replica lead time (default: per pool)")
    p.add_argument("--warmup-s", type=float, default=600.0, help="replayed trace start, unmeasured")
    p.add_argument("--tick-s", type=float, default=10.0, help="scaler period, s")
    p.add_argument(
        "--scaler",
        choices=sorted([*SCALERS, HINDSIGHT]),
        default="reactive",
        help="autoscaler in the loop, the same for every policy: 'reactive' (the simulator's "
        "per-pool HPA-like scaler), 'planner' (the autoscaler sidecar's decide(): "
        "forecast and cheapest-mix MILP, every 60 s), 'static' (the policy's initial "
        "replicas, never changed) or 'hindsight' (the integer bound's fleet, each replica "
        "launched in time: can the bound's fleet serve the trace?)",
    )
    p.add_argument(
        "--planner-headroom",
        type=_headroom,
        default=DEFAULT_HEADROOM,
        help="'planner' only: capacity planned per token/s of the forecast's upper bound "
        "(default: the sidecar's, %(default)g); sweeps the planner's margin",
    )
    p.add_argument("--bound-window-s", type=float, default=60.0, help="bounds' window, s")
    p.add_argument(
        "--bound-block-s",
        type=float,
        default=120.0,
        help="integer bound: replicas are whole per block of this many s (shorter: tighter, "
        "slower); 0 skips the integer bound",
    )
    p.add_argument(
        "--bound-chunk-s",
        type=float,
        default=CHUNK_S,
        help="integer bound: a trace over twice this long is solved in chunks of it "
        "(default %(default)g s; 0: whole, however long)",
    )
    p.add_argument(
        "--out",
        help="directory for table.md, result.json and the plots "
        "(default: a new skyroute-sim-<time> directory in the system's temp dir)",
    )
    p.add_argument(
        "--rollout",
        metavar="PLAN",
        help="instead: replay the trace through a rollout (a plan YAML, or 'default') of a "
        "new version made worse by --canary-tpot/--canary-errors; print what it served",
    )
    p.add_argument(
        "--in-pool",
        action="store_true",
        help="instead: replay a trace with prompt block ids (Mooncake JSONL, hash_ids) through "
        "each replica choice inside the pools of --model (random, least-queue, least-wait, "
        "prefix affinity with bounded load, ideal cache); print hit rate, TTFT, SLO, cost",
    )
    p.add_argument("--canary-tpot", type=float, default=1.0, help="new version's TPOT factor")
    p.add_argument(
        "--canary-errors", type=float, default=0.0, help="share of its requests failing (0-1)"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the comparison described by ``args``; 0 on success."""
    from skyroute.demo import demo_policy_path  # noqa: PLC0415 - pulls in the gateway

    policy = load_policy(Path(args.policy) if args.policy else demo_policy_path())
    if args.in_pool:
        from skyroute.simulate_inpool import run_in_pool  # noqa: PLC0415

        return run_in_pool(args, policy)
    trace = read_trace(args.trace, args.time_unit, args.max_requests)
    trace = trace.head(args.max_requests).sped_up(args.speedup)
    trace = variant(trace, args.variant)
    if args.rollout:
        from skyroute.simulate_rollout import run_rollout  # noqa: PLC0415

        return run_rollout(args, policy, trace)
    if args.scale_fleet == "auto":
        span = max(trace.duration_s, 1e-9)
        scale = auto_scale(
            policy,
            float(trace.output_tokens.sum()) / span,
            mean_prompt_tokens_per_s=float(trace.prompt_tokens.sum()) / span,
            model=args.model,
            slo_class=args.slo_class,
        )
    else:
        scale = parse_fraction(args.scale_fleet)
    spec = FleetSpec.build(
        policy,
        model=args.model,
        slo_class=args.slo_class,
        scale=scale,
        provisioning_s=args.provisioning_s,
    )
    weights = (
        parse_weights(args.client_regions)
        if args.client_regions
        else dict.fromkeys(spec.regions, 1.0)
    )
    config = SimConfig(seed=args.seed, tick_s=args.tick_s, warmup_s=args.warmup_s)
    work = Workload.build(trace, spec, weights, config)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    integer = None
    scaler: Callable[[], Scaler]
    if args.scaler == HINDSIGHT:
        integer = lower_bound(
            spec,
            work,
            args.bound_window_s,
            integer=True,
            block_s=args.bound_block_s or 120.0,
            chunk_s=args.bound_chunk_s or None,
        )
        plan = integer.replicas
        scaler = partial(HindsightScaler, plan, args.bound_window_s, spec.provisioning_s)
    else:
        planner = sim_config(headroom=args.planner_headroom)
        scaler = SCALERS[args.scaler](policy, spec, planner)
    total = len(work.arrival_s) * len(names)
    bar = None if args.no_progress or total < _LONG_RUN else ProgressBar(total)
    cmp = compare(
        spec,
        work,
        config,
        names,
        scaler=scaler,
        window_s=args.bound_window_s,
        block_s=args.bound_block_s or None,
        progress=bar,
        on_policy=bar.set_label if bar else None,
        integer_bound=integer,
        chunk_s=args.bound_chunk_s or None,
    )
    if bar:
        bar.close()
    reference = (
        achievable_reference(
            spec,
            work,
            config,
            RELAXATION_TARGET,
            cmp.integer_bound,
            args.bound_window_s,
            cmp.relaxation,
        )
        if args.reference
        else None
    )
    # Never into the working directory unasked: a run gets a directory of its own.
    out = (
        Path(args.out)
        if args.out
        else Path(tempfile.mkdtemp(prefix=time.strftime("skyroute-sim-%Y%m%d-%H%M%S-")))
    )
    out.mkdir(parents=True, exist_ok=True)
    scenario = {
        "trace": str(args.trace),
        "requests": len(trace),
        "time_unit": trace.time_unit,
        "time_unit_note": trace.time_unit_note,
        "duration_s": trace.duration_s,
        "policy": str(args.policy or demo_policy_path()),
        "model": spec.model,
        "slo_class": spec.slo_class,
        "slo": spec.slo.model_dump(),
        "scale_fleet": scale,
        "speedup": args.speedup,
        "client_regions": weights,
        "seed": args.seed,
        "warmup_s": args.warmup_s,
        "tick_s": args.tick_s,
        "scaler": args.scaler,
        "planner_headroom": args.planner_headroom if args.scaler == "planner" else None,
        "bound_window_s": args.bound_window_s,
        "bound_block_s": args.bound_block_s,
        "bound_chunk_s": args.bound_chunk_s,
        "variant": args.variant,
    }
    table = format_table(cmp)
    (out / "table.md").write_text(table + "\n")
    write_json(cmp, scenario, out / "result.json", _reference_json(reference))
    plots = [] if args.no_plots else write_plots(cmp, out)
    how = "given" if trace.time_unit_note == "given" else f"detected: {trace.time_unit_note}"
    print(f"trace timestamps read as {trace.time_unit} ({how})")
    print(
        f"{len(trace)} requests over {trace.duration_s / 60:.1f} min, model {spec.model} "
        f"({spec.slo_class}: TTFT {spec.slo.ttft_ms:g} ms, TPOT {spec.slo.tpot_ms:g} ms), "
        f"fleet scale {scale:.5g}, seed {args.seed}"
    )
    print(table)
    if reference is not None:
        print(_reference_text(reference, cmp))
    print(
        f"simulated {len(names)} policies + bounds in {cmp.seconds:.1f} s; wrote {out}/result.json",
        end="",
    )
    print(f" and {len(plots)} plots" if plots else "", file=sys.stdout)
    return 0
