"""``skyroute load``: drive one bounded burst at a gateway and report how its pools scale.

Phases, all bounded: ``--warmup-s`` of baseline traffic (``--baseline-rps`` short
requests per second), ``--burst-s`` with ``--concurrency`` more clients sending back to
back, ``--tail-s`` of baseline again, then quiet while watching until every pool that
grew is back to its size before the burst, or ``--cooldown-s`` after the burst have
passed. The tail matters: the autoscaler reads windows with no request right after busy
ones as missing telemetry (``autoscaler.gaps``) and would hold the burst's size; after
a few quiet baseline windows it believes the silence.

The gateway, API key and admin credential come from the CLI context (``skyroute
demo`` writes it) or the ``SKYROUTE_*`` variables. Without an admin credential the
load still runs, but pool sizes are not watched.

Reported: requests sent, answered and failed (by status), and, per pool whose ready
replicas changed, its size before, at its peak and at the end; the scale-up time
(seconds from the burst's start until a pool first had more ready replicas) and the
scale-down time (from the burst's end until every grown pool was back). Exit code 0
when most requests were answered, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from base.errors import CommandError
from skyroute import context

__all__ = ["register"]

_READY_TIMEOUT_S = 120.0
_WATCH_EVERY_S = 1.0


@dataclass
class _Run:
    """What the run saw. Times are seconds on the monotonic clock."""

    sent: int = 0
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    before: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float] = field(default_factory=dict)
    now: dict[str, float] = field(default_factory=dict)
    burst_start: float | None = None
    burst_end: float | None = None
    grew_at: float | None = None
    back_at: float | None = None
    events: list[str] = field(default_factory=list)

    def grown(self) -> list[str]:
        return [p for p, n in self.peak.items() if n > self.before.get(p, n)]

    def back(self) -> bool:
        grown = self.grown()
        return bool(grown) and all(self.now[p] <= self.before[p] for p in grown)


async def _ask(client: httpx.AsyncClient, body: dict[str, Any], run: _Run) -> None:
    run.sent += 1
    try:
        response = await client.post("/v1/chat/completions", json=body)
    except httpx.HTTPError as exc:
        run.errors[type(exc).__name__] += 1
        return
    if response.status_code == 200:
        run.ok += 1
    else:
        run.errors[str(response.status_code)] += 1


async def _baseline(
    client: httpx.AsyncClient, body: dict[str, Any], rps: float, run: _Run, stop: asyncio.Event
) -> None:
    tasks: set[asyncio.Task[None]] = set()
    while not stop.is_set() and rps > 0:
        if len(tasks) < 32:  # a slow gateway must not make the baseline pile up
            task = asyncio.create_task(_ask(client, body, run))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0 / rps)
    if tasks:
        await asyncio.wait(tasks, timeout=60)


async def _burst(client: httpx.AsyncClient, body: dict[str, Any], until: float, run: _Run) -> None:
    while time.monotonic() < until:
        await _ask(client, body, run)


def _say(run: _Run, text: str, quiet: bool) -> None:
    origin = run.burst_start
    stamp = f"t{time.monotonic() - origin:+7.1f}s" if origin is not None else "  warmup "
    line = f"{stamp}  {text}"
    run.events.append(line)
    if not quiet:
        print(line, flush=True)


async def _watch(admin: httpx.AsyncClient, run: _Run, quiet: bool) -> None:
    """Read every pool's ready replicas once; note changes and the scaling times."""
    try:
        response = await admin.get("/admin/pools")
        response.raise_for_status()
    except httpx.HTTPError:
        return
    for pool in response.json()["pools"]:
        pid, ready = pool["id"], pool.get("ready_replicas")
        if ready is None:
            continue
        old = run.now.get(pid)
        run.now[pid] = ready
        if run.burst_start is None:
            run.before[pid] = ready
        run.peak[pid] = max(run.peak.get(pid, ready), ready)
        if old is not None and old != ready:
            target = pool.get("target_replicas")
            aim = f" (target {target:g})" if target is not None else ""
            _say(run, f"{pid}: {old:g} -> {ready:g} ready replicas{aim}", quiet)
    now = time.monotonic()
    if run.burst_start is not None and run.grew_at is None and run.grown():
        run.grew_at = now
    if run.burst_end is not None and run.back_at is None and run.back():
        run.back_at = now


async def _wait_ready(client: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get("/readyz")).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise CommandError(f"the gateway at {client.base_url} is not ready")
        await asyncio.sleep(0.5)


async def _drive(args: argparse.Namespace, url: str, key: str, admin_key: str | None) -> _Run:
    run = _Run()
    quiet = args.output == "json"
    body = {"model": args.model, "max_tokens": args.max_tokens,
            "messages": [{"role": "user", "content": "Tell me about the sky."}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "x-skyroute-client-region": args.client_region}
    limits = httpx.Limits(max_connections=args.concurrency + 40)
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits) as client,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=10
        ) as admin,
    ):
        await _wait_ready(client)
        watching = admin_key is not None

        async def watch(until: float) -> None:
            while time.monotonic() < until:
                if watching:
                    await _watch(admin, run, quiet)
                if run.burst_end is not None and (run.back_at is not None):
                    return
                await asyncio.sleep(_WATCH_EVERY_S)

        stop = asyncio.Event()
        # Short answers: the baseline must stay well under one replica of the smallest
        # pool (the demo's L4 pools sustain 34 tokens/s), or it alone keeps pools large.
        small = {**body, "max_tokens": args.baseline_max_tokens}
        baseline = asyncio.create_task(_baseline(client, small, args.baseline_rps, run, stop))
        try:
            _say(run, f"baseline {args.baseline_rps:g} req/s of {args.model} from "
                 f"{args.client_region} for {args.warmup_s:g} s", quiet)  # fmt: skip
            await watch(time.monotonic() + args.warmup_s)
            run.burst_start = time.monotonic()
            until = run.burst_start + args.burst_s
            _say(run, f"burst: {args.concurrency} more clients for {args.burst_s:g} s", quiet)
            workers = [_burst(client, body, until, run) for _ in range(args.concurrency)]
            await asyncio.gather(watch(until), *workers)
            run.burst_end = time.monotonic()
            _say(run, f"burst over; baseline for {args.tail_s:g} s, then quiet until the pools "
                 f"shrink (<= {args.cooldown_s:g} s after the burst)", quiet)  # fmt: skip
            await watch(run.burst_end + args.tail_s)
            stop.set()
            if watching and run.grown():
                await watch(run.burst_end + args.cooldown_s)
        finally:
            stop.set()
            await baseline
    return run


def _summary(run: _Run) -> dict[str, Any]:
    def since(at: float | None, origin: float | None) -> float | None:
        return None if at is None or origin is None else round(at - origin, 1)

    return {
        "requests": run.sent,
        "ok": run.ok,
        "errors": dict(run.errors),
        "scale_up_s": since(run.grew_at, run.burst_start),
        "scale_down_s": since(run.back_at, run.burst_end),
        "pools": {
            p: {"before": run.before.get(p), "peak": run.peak[p], "end": run.now.get(p)}
            for p in sorted(run.peak)
            if run.peak[p] != run.before.get(p) or run.now.get(p) != run.before.get(p)
        },
    }


def cmd_load(args: argparse.Namespace) -> int:
    """Run the burst (see the module docstring)."""
    url = context.gateway_url()
    key = context.api_key()
    if not key:
        raise CommandError(
            "no API key: start `skyroute demo` (its context holds one) or set SKYROUTE_API_KEY"
        )
    try:
        admin_key: str | None = context.admin_token()
    except CommandError:
        admin_key = None
    run = asyncio.run(_drive(args, url, key, admin_key))
    summary = _summary(run)
    if args.output == "json":
        print(json.dumps(summary, indent=2))
    else:
        print(f"\n{run.sent} requests, {run.ok} answered, errors: {dict(run.errors) or 'none'}")
        for pid, sizes in summary["pools"].items():
            print(f"  {pid}: {sizes['before']:g} -> peak {sizes['peak']:g} -> {sizes['end']:g}")
        up, down = summary["scale_up_s"], summary["scale_down_s"]
        print(f"scale-up   {'-' if up is None else f'{up} s after the burst started'}")
        print(f"scale-down {'-' if down is None else f'{down} s after the burst ended'}")
        if admin_key is None:
            print("(no admin credential: pool sizes were not watched)")
    return 0 if run.sent and run.ok >= 0.5 * run.sent else 1


def register(subparsers: Any) -> None:
    """Add ``load`` to the ``skyroute`` parser."""
    p = subparsers.add_parser(
        "load", help="drive a bounded burst at the gateway and report how its pools scale"
    )
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument(
        "--client-region",
        default="aws:eu-west-1",
        help="x-skyroute-client-region of every request (default: the demo's EU region, "
        "whose only llama-3.1-8b pool is gcp:europe-west4:l4-llama8b)",
    )
    p.add_argument("--concurrency", type=int, default=16, help="clients in the burst")
    p.add_argument("--burst-s", type=float, default=60.0, help="burst length, s")
    p.add_argument("--warmup-s", type=float, default=15.0, help="baseline before the burst, s")
    p.add_argument("--tail-s", type=float, default=20.0, help="baseline after the burst, s")
    p.add_argument(
        "--cooldown-s",
        type=float,
        default=180.0,
        help="longest wait after the burst for the pools to shrink, s",
    )
    p.add_argument("--baseline-rps", type=float, default=1.0, help="baseline requests per s")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens of a burst request")
    p.add_argument(
        "--baseline-max-tokens", type=int, default=8, help="max_tokens of a baseline request"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_load)
