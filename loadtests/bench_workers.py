"""Requests/s of ``skyroute serve --workers N`` against N = 1: does a second worker on a
second core double what one port serves?

    python loadtests/bench_workers.py [--workers 1,2] [--gateway-cpus 0,1]
        [--client-cpus 2,3,4,5] [--engines 2] [--clients 4] [--concurrency 64]
        [--duration 6] [--rounds 2] [--stream] [--json out.json]

Issue 19's target: with 2 workers, requests/s at least 1.8 x one worker's, pinned on a
quiet machine. For that figure to mean anything the gateways must be the bottleneck: every
thread of the ``serve`` tree (supervisor, workers, store worker) and the Redis server are
pinned to ``--gateway-cpus``, and the simulated engines (``--engines`` processes, every
pool's endpoints) and the load (``--clients`` processes, each a closed loop of
``--concurrency / --clients`` connections) to ``--client-cpus``. The worker counts
alternate, ``--rounds`` phases each (1 2 2 1 ...), each phase with the gateway started
afresh. Prints per phase and per worker count (median): requests/s, the gateway tree's
CPU ms a request, and how busy the gateway and the client CPUs were; then the ratio of
requests/s to the first count's. A ratio is a capacity figure only while the gateway CPUs
are busy (>= 90 %) and the client CPUs are not (< 90 %); the run says which way it fails
otherwise. On a 2-core machine the engines and the load need the second core for one
worker already, so a second worker has no core of its own: the run says so.

Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

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
    Processes,
    cpu_list,
    pin_threads,
    stop_on_sigterm,
    tree_cpu_s,
)

# Busy enough to be the bottleneck / too busy to be a fair load generator.
BUSY = 0.9


async def _client(url: str, key: str, concurrency: int, seconds: float, stream: bool) -> None:
    load = Load.chat(url, key, stream)
    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector) as session:
        await closed_loop(session, load, concurrency, 0.5)
        tally = await closed_loop(session, load, concurrency, seconds)
    print(json.dumps({"ok": len(tally.lat), "errors": tally.errors,
                      "first_error": tally.first_error}), flush=True)  # fmt: skip


def _phase(args: argparse.Namespace, procs: Processes, env: dict[str, str], workers: int,
           tag: str) -> dict[str, Any]:  # fmt: skip
    """One phase: a fresh ``serve --workers N``, the load, the figures."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", "serve",
           "--workers", str(workers)]  # fmt: skip
    genv = {**env, "SKYROUTE_PORT": str(port), "SKYROUTE_REDIS_PREFIX": f"bw{tag}",
            "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{args.tmp}/{tag}.db"}  # fmt: skip
    gateway = procs.start(f"gateway-{tag}", cmd, _ROOT, genv)
    procs.wait_ready(f"gateway-{tag}", url + "/readyz", 60, b'"ready"')
    time.sleep(2.0)  # every worker up and past its first flushes (each answers /readyz)
    pin_threads(gateway, args.gateway_cpus)
    per = max(args.concurrency // args.clients, 1)
    client_cmd = [sys.executable, __file__, "--client", url, "--key", env["SKYROUTE_API_KEY"],
                  "--concurrency", str(per), "--duration", str(args.duration)]  # fmt: skip
    if args.stream:
        client_cmd.append("--stream")
    clients = [
        subprocess.Popen(client_cmd, cwd=_ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(args.clients)
    ]
    for c in clients:
        pin_threads(psutil.Process(c.pid), args.client_cpus)
    time.sleep(0.5)  # the clients' own warm-up
    cpu0, t0 = tree_cpu_s(gateway), time.perf_counter()
    client_cpu0 = sum(tree_cpu_s(psutil.Process(c.pid)) for c in clients)
    engines_cpu0 = sum(tree_cpu_s(e) for e in args.engine_procs)
    # Sampled just before the clients stop, not after: their exit takes their CPU with it.
    time.sleep(max(args.duration - 0.2, 0.1))
    cpu1, t1 = tree_cpu_s(gateway), time.perf_counter()
    client_cpu1 = sum(tree_cpu_s(psutil.Process(c.pid)) for c in clients)
    engines_cpu1 = sum(tree_cpu_s(e) for e in args.engine_procs)
    ok = errors = 0
    first_error = ""
    for c in clients:
        out, _ = c.communicate(timeout=args.duration + 60)
        result = json.loads(out.strip().splitlines()[-1])
        ok, errors = ok + result["ok"], errors + result["errors"]
        first_error = first_error or result["first_error"]
    procs.stop_last()
    wall = t1 - t0
    rps = ok / args.duration
    return {
        "workers": workers, "rps": rps, "errors": errors,
        "cpu_ms_per_req": (cpu1 - cpu0) * 1000.0 / max(rps * wall, 1.0),
        "gateway_busy": (cpu1 - cpu0) / wall / len(args.gateway_cpus),
        "client_busy": (client_cpu1 - client_cpu0 + engines_cpu1 - engines_cpu0)
        / wall / len(args.client_cpus),
        "first_error": first_error,
    }  # fmt: skip


def _verdict(rows: dict[int, dict[str, float]], args: argparse.Namespace) -> list[str]:
    base = min(rows)
    lines = []
    for n, row in sorted(rows.items()):
        lines.append(f"workers {n}: {row['rps']:.0f} req/s ({row['rps'] / rows[base]['rps']:.2f}x "
                     f"{base} worker{'s' if base > 1 else ''}), {row['cpu_ms_per_req']:.3f} "
                     f"CPU ms/req, gateway CPUs {100 * row['gateway_busy']:.0f} % busy, "
                     f"client CPUs {100 * row['client_busy']:.0f} %")  # fmt: skip
        if n > len(args.gateway_cpus):
            lines.append(f"  not a scaling figure: {n} workers share {len(args.gateway_cpus)} "
                         "gateway CPU(s)")  # fmt: skip
        elif row["client_busy"] >= BUSY:
            lines.append("  not a capacity figure: the engines and the load generators were "
                         "the bottleneck (give them more --client-cpus)")  # fmt: skip
        elif row["gateway_busy"] < BUSY * n / len(args.gateway_cpus):
            lines.append("  not a capacity figure: the gateway CPUs were not busy (raise "
                         "--concurrency or --clients)")  # fmt: skip
    return lines


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cpus = sorted(os.sched_getaffinity(0))
    half = max(len(cpus) // 2, 1)
    parser.add_argument("--workers", default="1,2", help="worker counts to compare")
    parser.add_argument("--gateway-cpus", type=cpu_list, default=cpus[:half])
    parser.add_argument("--client-cpus", type=cpu_list, default=cpus[half:] or cpus)
    parser.add_argument("--engines", type=int, default=0, help="0: one per client CPU")
    parser.add_argument("--clients", type=int, default=0, help="0: one per client CPU")
    parser.add_argument("--concurrency", type=int, default=64, help="connections in all")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=2, help="phases per worker count")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--client", help=argparse.SUPPRESS)  # a load process of a phase
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        asyncio.run(_client(args.client, args.key, args.concurrency, args.duration, args.stream))
        return
    counts = [int(w) for w in args.workers.split(",")]
    args.engines = args.engines or len(args.client_cpus)
    args.clients = args.clients or len(args.client_cpus)
    tmp = tempfile.TemporaryDirectory(prefix="skyroute-workers-")
    args.tmp = tmp.name
    procs = Processes(Path(tmp.name))
    redis = EmbeddedRedis()
    try:
        redis_url = redis.start()
        env = {**os.environ, "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_HOST": "127.0.0.1",
               "SKYROUTE_API_KEY": f"sk-bw-{secrets.token_urlsafe(16)}",
               "SKYROUTE_ADMIN_TOKEN": secrets.token_urlsafe(16), "SKYROUTE_LOG_LEVEL": "INFO",
               "OTEL_TRACES_EXPORTER": "none"}  # fmt: skip
        engine_urls = []
        args.engine_procs = []
        for i in range(args.engines):
            port = free_port()
            engine = procs.start(f"engine{i}", [
                sys.executable, "-m", "simengine", "--port", str(port), "--profile", PROFILE,
                "--model", UPSTREAM_MODEL, "--time-scale", "0", "--log-level", "WARNING",
            ], _ROOT, env)  # fmt: skip
            procs.wait_ready(f"engine{i}", f"http://127.0.0.1:{port}/health", 30, b"")
            pin_threads(engine, args.client_cpus)
            engine_urls.append(f"http://127.0.0.1:{port}")
            args.engine_procs.append(engine)
        policy = Path(tmp.name) / "policy.yaml"
        write_policy(policy, engine_urls)
        env["SKYROUTE_POLICY"] = str(policy)
        # Redis serves the gateways' flushes and admission: it is gateway-side work.
        if redis.pid is not None:
            pin_threads(psutil.Process(redis.pid), args.gateway_cpus)
        print(f"workers {counts}, gateway CPUs {args.gateway_cpus}, client CPUs "
              f"{args.client_cpus} ({args.engines} engines, {args.clients} load processes), "
              f"c = {args.concurrency}, {'stream' if args.stream else 'nonstream'}, "
              f"{args.rounds} x {args.duration:g} s each", flush=True)  # fmt: skip
        phases = []
        for r in range(args.rounds):
            for n in counts if r % 2 == 0 else counts[::-1]:
                row = _phase(args, procs, env, n, f"w{n}r{r}")
                phases.append(row)
                print(f"  round {r} workers {n}: {row['rps']:.0f} req/s, "
                      f"{row['cpu_ms_per_req']:.3f} CPU ms/req, gateway CPUs "
                      f"{100 * row['gateway_busy']:.0f} %, client CPUs "
                      f"{100 * row['client_busy']:.0f} %, {row['errors']:.0f} errors "
                      f"{row['first_error'][:120]}", flush=True)  # fmt: skip
        rows = {n: {k: median(p[k] for p in phases if p["workers"] == n)
                    for k in ("rps", "cpu_ms_per_req", "gateway_busy", "client_busy")}
                for n in counts}  # fmt: skip
        for line in _verdict(rows, args):
            print(line)
        if args.json:
            args.json.write_text(json.dumps({"phases": phases, "medians": rows}, indent=2))
    finally:
        procs.stop()
        redis.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
