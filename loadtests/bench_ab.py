"""Gateway CPU per request of two skyroute checkouts, measured in alternating rounds.

    python loadtests/bench_ab.py --a OLD_TREE --b NEW_TREE [--rounds 6] [--duration 3]
        [--launches 1] [--concurrency 32] [--stream] [--time-scale 0] [--json out.json]
    python loadtests/bench_ab.py --a . --env-a SKYROUTE_LOG_LEVEL=WARNING   # one setting's cost

On a shared 2-core machine, the CPU per request of one run drifts by 10-20 % from minute
to minute, which hides a change of a few per cent between two runs made minutes apart.
Here both gateways (``skyroute serve`` from each tree, same policy, same engine, same
Redis) run at once, pinned to the same CPU; the engine and the load generator get the
other. The load alternates between them, A B B A A B ..., ``--rounds`` closed-loop
phases each, so a slow minute costs both alike. Prints each phase's gateway CPU ms per
request (user + system of the process tree) and, per tree, the median and the spread;
then B's median over A's. ``--launches N`` starts both gateways afresh N times (B first on
odd launches) and prints each launch's B/A as well: two launches of the same pair of trees
gave 0.923 and 1.033, so one launch can mislead however many rounds it runs.
``--env-a``/``--env-b NAME=VALUE`` (repeatable) set one side's environment, so the same
tree run twice prices a setting (the access log at INFO, an external store worker). Numbers
only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import aiohttp
import psutil

from skyroute.embedded_redis import EmbeddedRedis, free_port

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.bench_load import (  # noqa: E402
    PROFILE,
    UPSTREAM_MODEL,
    Load,
    closed_loop,
    write_policy,
)
from loadtests.bench_procs import (  # noqa: E402
    pin_threads,
    run_until_sigterm,
    stop,
    stop_on_sigterm,
    tree_cpu_s,
    wait_http,
)


async def phase(url: str, key: str, stream: bool, concurrency: int, seconds: float,
                gateway: psutil.Process) -> tuple[float, int, int]:  # fmt: skip
    """One closed-loop phase (after 0.5 s of warm-up): (CPU ms per request, requests,
    errors)."""
    load = Load.chat(url, key, stream)
    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector) as session:
        await closed_loop(session, load, concurrency, 0.5)
        c0 = tree_cpu_s(gateway)
        tally = await closed_loop(session, load, concurrency, seconds)
        c1 = tree_cpu_s(gateway)
    n = max(len(tally.lat), 1)
    return (c1 - c0) * 1000.0 / n, len(tally.lat), tally.errors


def start_gateways(
    args: argparse.Namespace, base_env: dict[str, str], tmp: str, launch: int, gw_cpus: list[int]
) -> tuple[dict[str, str], dict[str, psutil.Process], list[subprocess.Popen[bytes]]]:
    """Both trees' gateways, fresh processes with their own ports, prefixes and stores,
    pinned to ``gw_cpus``; started B first on odd launches, so that neither side always
    starts first. Returns their URLs, processes and Popen handles."""
    urls: dict[str, str] = {}
    gateways: dict[str, psutil.Process] = {}
    procs: list[subprocess.Popen[bytes]] = []
    sides = [("A", args.a, args.env_a), ("B", args.b, args.env_b)]
    for name, tree, overrides in sides[:: -1 if launch % 2 else 1]:
        port = free_port()
        store = f"sqlite+aiosqlite:///{tmp}/{name}{launch}.db"
        env = {**base_env, "SKYROUTE_PORT": str(port), "SKYROUTE_DATABASE_URL": store,
               "SKYROUTE_REDIS_PREFIX": f"ab{name}{secrets.token_hex(3)}",
               **dict(kv.split("=", 1) for kv in overrides)}  # fmt: skip
        cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", "serve"]
        # cwd first on sys.path: each gateway runs its own tree's code.
        procs.append(subprocess.Popen(cmd, cwd=tree.resolve(), env=env))
        urls[name] = f"http://127.0.0.1:{port}"
        wait_http(urls[name] + "/readyz", 60, procs[-1], b'"ready"')
        gateways[name] = psutil.Process(procs[-1].pid)
        pin_threads(gateways[name], gw_cpus)
    return urls, gateways, procs


def summarise(per: dict[str, list[float]], label: str) -> dict[str, object]:
    """Print and return one set of phases' medians, spreads and B/A."""
    out: dict[str, object] = {}
    for name in ("A", "B"):
        values = per[name]
        out[name] = {"median": round(median(values), 4), "min": round(min(values), 4),
                     "max": round(max(values), 4)}  # fmt: skip
        print(f"{label}{name}: median {median(values):.3f} ms/req (min {min(values):.3f}, "
              f"max {max(values):.3f})")  # fmt: skip
    ratio = median(per["B"]) / median(per["A"])
    wins = sum(b < a for a, b in zip(per["A"], per["B"], strict=True))
    print(f"{label}B / A (medians): {ratio:.3f}; B below A in {wins} of {len(per['A'])} rounds")
    return {**out, "ratio": round(ratio, 4), "b_below_a": wins}


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    parser.add_argument("--b", type=Path, default=_ROOT, help="checkout B (default: this one)")
    parser.add_argument("--rounds", type=int, default=6, help="phases per checkout")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per phase")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stream", action="store_true", help="streamed answers")
    parser.add_argument(
        "--launches", type=int, default=1,
        help="start both gateways afresh this many times, ``--rounds`` phases each: one "
        "launch's B/A can be off by 5-10 %% however many rounds it runs",
    )  # fmt: skip
    parser.add_argument(
        "--time-scale", type=float, default=0.0,
        help="the engine's pace (0: every answer at once, one piece; > 0: tokens paced at "
        "that share of the profile's prefill and decode times, a stream of events)",
    )  # fmt: skip
    parser.add_argument(
        "--env-a",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of A's gateway (repeatable)",
    )
    parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE",
                        help="environment of B's gateway (repeatable)")  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    gw_cpus, client_cpus = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    procs: list[subprocess.Popen[bytes]] = []
    redis = EmbeddedRedis()
    tmp = tempfile.TemporaryDirectory(prefix="skyroute-ab-")
    try:
        redis_url = redis.start()
        engine_port = free_port()
        engine_url = f"http://127.0.0.1:{engine_port}"
        policy = Path(tmp.name) / "policy.yaml"
        write_policy(policy, [engine_url])
        key = f"sk-ab-{secrets.token_urlsafe(16)}"
        base_env = {**os.environ, "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_HOST": "127.0.0.1",
                    "SKYROUTE_API_KEY": key, "SKYROUTE_ADMIN_TOKEN": secrets.token_urlsafe(16),
                    "SKYROUTE_POLICY": str(policy), "SKYROUTE_LOG_LEVEL": "INFO",
                    "OTEL_TRACES_EXPORTER": "none"}  # fmt: skip
        engine_cmd = [sys.executable, "-m", "simengine", "--port", str(engine_port),
                      "--profile", PROFILE, "--model", UPSTREAM_MODEL, "--time-scale",
                      str(args.time_scale), "--log-level", "WARNING"]  # fmt: skip
        procs.append(subprocess.Popen(engine_cmd, cwd=args.b, env=base_env))
        wait_http(engine_url + "/health", 30, procs[-1], b"")
        pin_threads(psutil.Process(procs[0].pid), sorted(client_cpus))

        order = [("A", "B") if r % 2 == 0 else ("B", "A") for r in range(args.rounds)]
        per: dict[str, list[float]] = {"A": [], "B": []}
        rows = []
        launches = []
        mode = "stream" if args.stream else "nonstream"
        print(f"A = {args.a} {' '.join(args.env_a)}, B = {args.b} {' '.join(args.env_b)}; "
              f"{mode}, c = {args.concurrency}, {args.launches} launch(es) of "
              f"{args.duration:g} s x {args.rounds} phases each, gateways on CPU "
              f"{sorted(gw_cpus)}", flush=True)  # fmt: skip
        for launch in range(args.launches):
            # The gateways start with every CPU, as a server would, and are then pinned.
            os.sched_setaffinity(0, cpus)
            urls, gateways, started = start_gateways(
                args, base_env, tmp.name, launch, sorted(gw_cpus)
            )
            procs += started
            os.sched_setaffinity(0, client_cpus)
            time.sleep(3.0)  # past the first seconds after ready (imports, warm caches)
            this: dict[str, list[float]] = {"A": [], "B": []}
            for r, pair in enumerate(order):
                for name in pair:
                    ms, n, errors = run_until_sigterm(
                        phase(urls[name], key, args.stream, args.concurrency, args.duration,
                              gateways[name])
                    )  # fmt: skip
                    this[name].append(ms)
                    rows.append({"launch": launch, "round": r, "tree": name,
                                 "cpu_ms_per_req": round(ms, 4), "requests": n,
                                 "errors": errors})  # fmt: skip
                    print(f"  launch {launch} round {r} {name}: {ms:.3f} ms/req  ({n} "
                          f"requests, {errors} errors)", flush=True)  # fmt: skip
            for popen in started:
                stop(popen, 10)
            if args.launches > 1:
                launches.append(summarise(this, f"launch {launch}: "))
            for name in ("A", "B"):
                per[name] += this[name]
        summary = summarise(per, "")
        if args.launches > 1:
            ratios = [f"{x['ratio']:.3f}" for x in launches]
            print(f"B / A per launch: {', '.join(ratios)}")
        if args.json:
            args.json.write_text(json.dumps({"summary": summary, "launches": launches,
                                             "phases": rows}, indent=2))  # fmt: skip
    finally:
        for popen in reversed(procs):
            stop(popen, 10)
        redis.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
