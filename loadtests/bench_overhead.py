"""Gateway overhead benchmark: the same simulated engine driven directly and through one
gateway worker, non-streaming and streaming, closed and open loop. Prints numbers only.

    python loadtests/bench_overhead.py [--quick] [--tracing] [--json out.json]
        [--replicas N] [--prefix-affinity] [--prompt-chars C] [--redis-cluster]
        [--busy-cpus] [--bare]

Everything runs on 127.0.0.1: one engine at ``--time-scale 0`` (answers at once, so the
gateway's own cost dominates), Redis (``SKYROUTE_REDIS_URL`` or an embedded one) and one
``skyroute serve`` worker whose policy has 6 pools on aws/gcp/azure, all on that engine.

``--redis-cluster`` starts a local 3-master Redis Cluster instead of one Redis; every
gateway phase also reports the Redis commands it caused per request (INFO commandstats
deltas over every node, commands run inside scripts included). The gateway keeps its
store (the ledger the usage consumer writes) in a SQLite file of the run's own.
``loadtests/bench_redis_replicas.py`` measures Redis commands/s against simulated gateway
replicas at a fixed total load.

``--busy-cpus`` keeps every CPU out of its idle states with one lowest-priority (nice 19)
spinner per CPU, bounded in time. On these VMs a process woken from an idle CPU starts
late, and a proxy adds two wake-ups per request (request in, upstream answer in), so the
open-loop latency without it measures the host's idle exits as much as the gateway.
``--bare`` runs every phase through the floor too (``peer_bare.py``, a bare aiohttp
proxy with no features, on the same engine): its added latency is what any proxy costs
on this host (two more loopback hops and wake-ups), printed next to the gateway's.
``--tracing`` turns the gateway's OpenTelemetry traces on, exported through the standard
``OTEL_*`` variables by OTLP/HTTP (protobuf) to a sink process started here, which
counts the spans it receives; compare its table with one from a run without it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import psutil

from live.redis_client import commands_run, connect
from skyroute.embedded_redis import EmbeddedRedis, EmbeddedRedisCluster, free_port

# ``python loadtests/bench_overhead.py`` puts this directory, not the project, on sys.path.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtests.bench_load import (  # noqa: E402
    MAX_TOKENS,
    MODEL,
    PROFILE,
    PROMPT,
    REQUEST_TIMEOUT_S,
    UPSTREAM_MODEL,
    Load,
    closed_loop,
    open_loop,
    write_policy,
)
from loadtests.bench_procs import run_until_sigterm, stop, stop_on_sigterm, wait_http  # noqa: E402
from loadtests.otlp_sink import serve_otlp_sink  # noqa: E402

TARGETS = {"nonstream_rps_per_worker_min": 2000.0, "gateway_cpu_ms_per_request_max": 0.5,
           "added_p50_ms_at_100rps_max": 1.0}  # fmt: skip


@dataclass
class Result:
    scenario: str
    target: str
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    gw_cpu_ms_per_req: float | None = None
    engine_cpu_ms_per_req: float = 0.0
    loadgen_cpu_ms_per_req: float = 0.0
    pools: dict[str, int] = field(default_factory=dict)
    first_error: str = ""
    redis_cmds_per_req: float | None = None


def http_text(url: str, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as resp:
        return str(resp.read().decode())


def finished_requests(gw_url: str, admin_token: str) -> int:
    """Requests the gateway has finished (warm-ups included), from its /metrics."""
    text = http_text(gw_url + "/metrics", {"authorization": f"Bearer {admin_token}"})
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith("skyroute_requests_total{")))  # fmt: skip


def cpu_s(proc: psutil.Process) -> float:
    return float(sum(proc.cpu_times()[:2]))  # user + system


async def measure(
    scenario: str, target: str, load: Load, args: argparse.Namespace,
    proxy: psutil.Process, engine: psutil.Process,
) -> Result:  # fmt: skip
    """One phase against ``target`` ("direct": the engine; "gateway"; "bare": the
    floor), whose process is ``proxy`` (its CPU is counted unless direct)."""
    me = psutil.Process()
    redis = connect(args.redis_url) if target == "gateway" else None
    connector = aiohttp.TCPConnector(limit=args.concurrency, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await closed_loop(session, load, args.concurrency, args.warmup)
        if load.pools is not None:
            load.pools.clear()
        r0 = await commands_run(redis) if redis is not None else 0
        g0, e0, m0 = cpu_s(proxy), cpu_s(engine), cpu_s(me)
        if scenario.startswith("closed"):
            t = await closed_loop(session, load, args.concurrency, args.duration)
        else:
            t = await open_loop(session, load, args.rate, args.duration)
        g1, e1, m1 = cpu_s(proxy), cpu_s(engine), cpu_s(me)
        r1 = await commands_run(redis) if redis is not None else 0
    if redis is not None:
        await redis.aclose()
    n = max(len(t.lat), 1)
    p50, p99 = np.percentile(np.array(t.lat or [0.0]) * 1000.0, [50, 99])
    return Result(
        scenario, target, len(t.lat), t.errors, round(t.seconds, 3),
        round(len(t.lat) / t.seconds, 1),
        round(float(p50), 3), round(float(p99), 3),
        gw_cpu_ms_per_req=round((g1 - g0) * 1000 / n, 4) if target != "direct" else None,
        engine_cpu_ms_per_req=round((e1 - e0) * 1000 / n, 4),
        loadgen_cpu_ms_per_req=round((m1 - m0) * 1000 / n, 4),
        pools=dict(load.pools or {}), first_error=t.first_error,
        redis_cmds_per_req=round((r1 - r0) / n, 2) if redis is not None else None,
    )  # fmt: skip


async def run_all(
    args: argparse.Namespace, engine_url: str, gw_url: str, api_key: str,
    gateway: psutil.Process, engine: psutil.Process, bare: tuple[str, psutil.Process] | None,
) -> list[Result]:  # fmt: skip
    """Every phase: direct, then the floor (``bare``: its URL and process, if run), then
    the gateway; added latency is each proxy's p50/p99 less the direct run's."""

    def body(model: str, stream: bool) -> bytes:
        # --prompt-chars: the prompt repeated to that length (a long shared prefix).
        prompt = (PROMPT * (args.prompt_chars // len(PROMPT) + 1))[: args.prompt_chars]
        payload = {"model": model, "messages": [{"role": "user", "content": prompt}],
                   "max_tokens": MAX_TOKENS, "stream": stream}  # fmt: skip
        return json.dumps(payload).encode()

    json_ct = {"content-type": "application/json"}
    gw_headers = {**json_ct, "authorization": f"Bearer {api_key}"}
    results: list[Result] = []
    for shape in ("closed", "open"):
        for stream in (False, True):
            scenario = f"{shape}_{'stream' if stream else 'nonstream'}"
            path = "/v1/chat/completions"
            direct = Load(engine_url + path, json_ct, body(UPSTREAM_MODEL, stream), stream)
            via = Load(gw_url + path, gw_headers, body(MODEL, stream), stream, Counter())
            d = await measure(scenario, "direct", direct, args, engine, engine)
            proxies = []
            if bare is not None:
                floor = Load(bare[0] + path, json_ct, body(UPSTREAM_MODEL, stream), stream)
                proxies.append(await measure(scenario, "bare", floor, args, bare[1], engine))
            g = await measure(scenario, "gateway", via, args, gateway, engine)
            for r in [*proxies, g]:
                r.added_p50_ms = round(r.p50_ms - d.p50_ms, 3)
                r.added_p99_ms = round(r.p99_ms - d.p99_ms, 3)
            results += [d, *proxies, g]
            print(f"  done {scenario}: direct {d.rps:.0f} req/s, gateway {g.rps:.0f} req/s",
                  flush=True)  # fmt: skip
    return results


def report(
    args: argparse.Namespace, results: list[Result], rss_mb: float, idle: float
) -> list[str]:
    def fmt(v: float | None, spec: str = ".2f") -> str:
        return "-" if v is None else format(v, spec)

    shape = {"closed": f"closed c={args.concurrency}", "open": f"open {args.rate:g}/s"}
    cols = ["scenario", "target", "req/s", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms",
            "gw CPU ms/req", "redis cmd/req", "errors"]  # fmt: skip
    rows = [
        [f"{shape[r.scenario.split('_')[0]]} {r.scenario.split('_')[1]}", r.target,
         f"{r.rps:.0f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", fmt(r.added_p50_ms),
         fmt(r.added_p99_ms), fmt(r.gw_cpu_ms_per_req, ".3f"), fmt(r.redis_cmds_per_req),
         str(r.errors)]
        for r in results
    ]  # fmt: skip
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    print("\n" + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    print(f"\ngateway RSS at end: {rss_mb:.1f} MB; idle CPU (background loops) {idle} ms/s")
    for r in results:
        who = "engine" if r.target == "direct" else f"engine (via {r.target})"
        print(f"  {r.scenario:16} {who:16} CPU {r.engine_cpu_ms_per_req:.3f} ms/req; "
              f"load generator {r.loadgen_cpu_ms_per_req:.3f} ms/req"
              + (f"; pools {r.pools}" if r.pools else ""))  # fmt: skip
    print(
        "\nDESIGN targets (context, not asserted): >= {:.0f} non-streaming req/s per worker, "
        "<= {} ms gateway CPU/request, added p50 <= {} ms at 100 req/s".format(*TARGETS.values())
    )
    by = {(r.scenario, r.target): r.rps for r in results}
    warnings = [
        f"WARNING: {s}: direct {by[(s, 'direct')]:.0f} req/s < 1.5 x gateway "
        f"{by[(s, 'gateway')]:.0f} req/s: the numbers are load-generator-bound"
        for s in ("closed_nonstream", "closed_stream")
        if by[(s, "direct")] < 1.5 * by[(s, "gateway")]
    ]  # fmt: skip
    warnings += [f"first error of {r.scenario}/{r.target}: {r.first_error}"
                 for r in results if r.first_error]  # fmt: skip
    for line in warnings:
        print(line)
    return warnings


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (smoke test)")
    parser.add_argument("--json", type=Path, help="write all numbers to this file")
    parser.add_argument("--concurrency", type=int, help="closed-loop concurrency (64; quick 16)")
    parser.add_argument("--duration", type=float, help="seconds per phase (10; quick 2)")
    parser.add_argument("--rate", type=float, help="open-loop req/s (100; quick 50)")
    parser.add_argument(
        "--tracing", action="store_true", help="gateway traces on, by OTLP/HTTP to a local sink"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="engines behind every pool (1): more make the gateway choose a replica",
    )
    parser.add_argument(
        "--prompt-chars", type=int, default=len(PROMPT), help="prompt length in characters"
    )
    parser.add_argument(
        "--prefix-affinity", action="store_true", help="the model's prefix_affinity on"
    )
    parser.add_argument(
        "--redis-cluster", action="store_true", help="a local 3-master Redis Cluster"
    )
    parser.add_argument(
        "--busy-cpus", action="store_true", help="a nice-19 spinner per CPU: no idle wake-ups"
    )
    parser.add_argument(
        "--bare", action="store_true",
        help="also run every phase through the floor (peer_bare.py, a bare aiohttp proxy)",
    )  # fmt: skip
    args = parser.parse_args()
    args.concurrency = args.concurrency or (16 if args.quick else 64)
    args.duration = args.duration or (2.0 if args.quick else 10.0)
    args.rate = args.rate or (50.0 if args.quick else 100.0)
    args.warmup = 1.0 if args.quick else 2.0

    procs: list[subprocess.Popen[bytes]] = []
    sink: multiprocessing.process.BaseProcess | None = None
    redis: EmbeddedRedis | EmbeddedRedisCluster | None = None
    tmp = tempfile.TemporaryDirectory(prefix="skyroute-bench-")
    try:
        redis_url = os.environ.get("SKYROUTE_REDIS_URL")
        if args.redis_cluster:
            redis = EmbeddedRedisCluster()
            redis_url = redis.start()
        elif not redis_url:
            redis = EmbeddedRedis()
            redis_url = redis.start()
        args.redis_url = redis_url
        engine_port, gw_port = free_port(), free_port()
        engine_url, gw_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gw_port}"
        policy = Path(tmp.name) / "bench-policy.yaml"
        extra_ports = [free_port() for _ in range(args.replicas - 1)]
        engine_urls = [engine_url] + [f"http://127.0.0.1:{p}" for p in extra_ports]
        write_policy(policy, engine_urls, args.prefix_affinity)
        api_key = f"sk-bench-{secrets.token_urlsafe(16)}"
        admin_token = f"sk-adm-{secrets.token_urlsafe(16)}"
        env = {
            **os.environ, "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_PORT": str(gw_port),
            "SKYROUTE_HOST": "127.0.0.1", "SKYROUTE_API_KEY": api_key,
            "SKYROUTE_ADMIN_TOKEN": admin_token,
            "SKYROUTE_POLICY": str(policy), "SKYROUTE_LOG_LEVEL": "WARNING",
            "SKYROUTE_REDIS_PREFIX": f"bench{secrets.token_hex(4)}",
            "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp.name}/store.db",
            "OTEL_TRACES_EXPORTER": "none",
        }  # fmt: skip
        sink_url = ""
        if args.tracing:
            sink_port = free_port()
            sink_url = f"http://127.0.0.1:{sink_port}"
            sink = multiprocessing.get_context("spawn").Process(
                target=serve_otlp_sink, args=(sink_port,), name="otlp-sink", daemon=True
            )
            sink.start()
            env.update({"OTEL_TRACES_EXPORTER": "otlp",
                        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink_url + "/v1/traces",
                        "OTEL_SERVICE_NAME": "skyroute-bench"})  # fmt: skip
        engine_cmd = [sys.executable, "-m", "simengine", "--port", str(engine_port),
                      "--profile", PROFILE, "--model", UPSTREAM_MODEL, "--time-scale", "0",
                      "--log-level", "WARNING"]  # fmt: skip
        procs.append(subprocess.Popen(engine_cmd, cwd=ROOT, env=env))
        wait_http(engine_url + "/health", 30, procs[-1], b"")
        # Further replicas (--replicas): started after the gateway's place in ``procs``.
        extra = [
            subprocess.Popen([*engine_cmd[:4], str(port), *engine_cmd[5:]], cwd=ROOT, env=env)
            for port in extra_ports
        ]
        for port, proc in zip(extra_ports, extra, strict=True):
            wait_http(f"http://127.0.0.1:{port}/health", 30, proc, b"")
        if sink is not None:
            wait_http(sink_url + "/stats", 30, procs[-1], b"spans")
        gw_cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", "serve"]
        procs.append(subprocess.Popen(gw_cmd, cwd=ROOT, env=env))
        wait_http(gw_url + "/readyz", 30, procs[-1], b'"ready"')
        procs.extend(extra)
        engine, gateway = psutil.Process(procs[0].pid), psutil.Process(procs[1].pid)
        bare: tuple[str, psutil.Process] | None = None
        if args.bare:
            bare_port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, str(ROOT / "loadtests" / "peer_bare.py"), "--port",
                 str(bare_port), "--upstream", engine_url], cwd=ROOT, env=env,
            ))  # fmt: skip
            bare_url = f"http://127.0.0.1:{bare_port}"
            wait_http(bare_url + "/health", 30, procs[-1], b"ok")
            bare = (bare_url, psutil.Process(procs[-1].pid))
        if args.busy_cpus:
            # Bounded: each spinner stops by itself after the longest the phases can take.
            phases = 4 * (3 if args.bare else 2)  # scenarios x (direct, bare?, gateway)
            bound_s = phases * args.duration + 120
            spin = f"import os, time\nos.nice(19)\nend = time.monotonic() + {bound_s}\n" + (
                "while time.monotonic() < end: pass"
            )
            procs.extend(
                subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)
            )
        # Ready is not settled: the first seconds after /readyz still import and warm
        # caches (300 ms/s in the first second against ~27 ms/s from the fifth on).
        time.sleep(args.warmup)
        g0 = cpu_s(gateway)
        time.sleep(args.warmup)  # the background loops' cost, spread over every request
        idle = round((cpu_s(gateway) - g0) * 1000 / args.warmup, 1)
        print(f"engine {engine_url} (pid {engine.pid}), gateway {gw_url} (pid {gateway.pid}), "
              f"redis {redis_url}; concurrency {args.concurrency}, {args.duration:g} s/phase, "
              f"open loop {args.rate:g} req/s; busy CPUs {'on' if args.busy_cpus else 'off'}; "
              "tracing "
              + (f"ON (OTLP/HTTP protobuf to {sink_url}/v1/traces)" if args.tracing else "off"),
              flush=True)  # fmt: skip
        results = run_until_sigterm(
            run_all(args, engine_url, gw_url, api_key, gateway, engine, bare)
        )
        rss_mb = gateway.memory_info().rss / 2**20
        tracing: dict[str, float] | None = None
        if args.tracing:
            requests = finished_requests(gw_url, admin_token)
            # Stop the gateway first: its exporter flushes the last batch on shutdown.
            stop(procs[1], 60)
            sink_stats = json.loads(http_text(sink_url + "/stats"))
            per_request = round(sink_stats["spans"] / max(requests, 1), 3)
            tracing = {**sink_stats, "requests": requests, "spans_per_request": per_request}
        warnings = report(args, results, rss_mb, idle)
        if tracing is not None:
            print(f"tracing: {tracing['spans']} spans in {tracing['exports']} OTLP exports "
                  f"({tracing['bytes'] / 2**20:.1f} MB) for {tracing['requests']} gateway requests "
                  f"(warm-ups included): {tracing['spans_per_request']} spans/request "
                  "(4 expected: server, admission, route, upstream)")  # fmt: skip
            if tracing["spans"] < 4 * tracing["requests"] or tracing["bad"]:
                warnings.append(f"WARNING: the sink got {tracing['spans']} spans for "
                                f"{tracing['requests']} requests ({tracing['bad']} bad exports): "
                                "spans were dropped")  # fmt: skip
                print(warnings[-1])
        if args.json:
            out = {"config": {k: v for k, v in vars(args).items() if k != "json"},
                   "targets": TARGETS, "gateway_rss_mb": round(rss_mb, 1),
                   "gateway_idle_cpu_ms_per_s": idle, "tracing": tracing,
                   "warnings": warnings, "results": [asdict(r) for r in results]}  # fmt: skip
            args.json.write_text(json.dumps(out, indent=2))
    finally:
        # The gateway first: stopped after its engines, its scraper logs each one as out
        # of service on the way down.
        if len(procs) > 1:
            stop(procs[1], 10)
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(procs):
            stop(proc, 10)
        if sink is not None:
            sink.terminate()
            sink.join(10)
        if redis is not None:
            redis.stop()
        tmp.cleanup()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
