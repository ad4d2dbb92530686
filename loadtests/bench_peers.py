"""Side-by-side benchmark: one simulated engine, called directly and through one worker each
of skyroute, the floor (a bare aiohttp proxy with no features), the same proxy behind
uvicorn (``bare-asgi``: the ASGI front door skyroute runs on, alone), the Portkey gateway
(Node.js) and the LiteLLM proxy, at the same concurrency and request mix.

    python loadtests/bench_peers.py [--quick] [--peers bare,bare-asgi,portkey,litellm] [--pin]
        [--ports engine=9001,skyroute=9002] [--skyroute-workers N] [--json out.json]

Everything runs on 127.0.0.1. The engine answers at once (``--time-scale 0``), so what is
measured is each proxy's own cost. LiteLLM is installed from PyPI into its own virtualenv
(``.bench-venvs/litellm``) and Portkey from npm into its own folder
(``.bench-venvs/portkey``), both reused across runs. skyroute runs ``skyroute serve`` with
the 6-pool policy of ``bench_load.py`` (auth, routing, admission, usage accounting,
metrics and the access log at INFO on), all pools on the same engine. Portkey 1.15.2 fails
every streamed answer; the benchmark probes that, says so, and then runs Portkey's
streaming cells with a one-line patch (see ``peer_portkey.py``).

For non-streaming and streaming requests at each concurrency (closed loop: that many
requests always in flight), it prints req/s, p50/p99 latency, the latency added over direct,
each gateway's CPU ms per request (user + system time of its process tree), the engine's,
and the load generator's own (this process only), errors, and each proxy's peak RSS; then a
summary of every gateway's CPU per request against the floor's, and writes it all as JSON.
``--pin`` pins every thread of the gateways and of Redis to ``--proxy-cpus`` and every
thread of the engine and the load generator to ``--client-cpus``; Redis is then always one
the benchmark can pin (its own, or ``SKYROUTE_REDIS_URL``'s server when it runs here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import numpy as np
import psutil
import redis

from skyroute.embedded_redis import EmbeddedRedis, free_port

# ``python loadtests/bench_peers.py`` puts this directory, not the project, on sys.path.
_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.bench_load import (  # noqa: E402
    MAX_TOKENS,
    MODEL,
    PROFILE,
    PROMPT,
    UPSTREAM_MODEL,
    Load,
    closed_loop,
    write_policy,
)
from loadtests.bench_procs import (  # noqa: E402
    Processes,
    own_cpu_s,
    pin_threads,
    run_until_sigterm,
    stop_on_sigterm,
    tree_cpu_s,
    tree_peak_rss_mb,
)
from loadtests.peer_litellm import (  # noqa: E402
    ensure_litellm,
    litellm_env,
    write_litellm_config,
)
from loadtests.peer_portkey import (  # noqa: E402
    ensure_portkey,
    patched_script,
    portkey_command,
    portkey_env,
    portkey_headers,
    stream_problem,
)
from loadtests.peers_cli import PORT_NAMES, config, parse_args  # noqa: E402
from loadtests.peers_report import (  # noqa: E402
    Row,
    floor_summary,
    litellm_comparison,
    print_rows,
    warnings_for,
)

ROOT = Path(__file__).resolve().parent.parent
REQUEST_TIMEOUT_S = 30.0


async def phase(
    t: Target, stream: bool, concurrency: int, seconds: float, warmup: float,
    engine: psutil.Process,
) -> tuple[list[float], int, float, str, tuple[float, float, float, float]]:  # fmt: skip
    """Warm up, then a closed loop at ``concurrency`` for ``seconds`` against ``t``.

    Returns latencies (s), errors, elapsed s, the first error, and the CPU seconds of the
    target's process tree, the engine's tree and this process alone (the load generator)
    during the measured part.
    """
    payload = {
        "model": t.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "stream": stream,
    }
    load = Load(
        t.url + "/v1/chat/completions",
        {"content-type": "application/json", **t.headers},
        json.dumps(payload).encode(),
        stream,
        Counter(),
    )
    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await closed_loop(session, load, concurrency, warmup)
        # The store worker consumes on its own schedule (up to ~1 s behind): the warm-up's
        # records are settled before its count starts, the phase's before it ends.
        settle = 1.5 if t.worker else 0.0
        await asyncio.sleep(settle)
        s0 = tree_cpu_s(t.worker) if t.worker else 0.0
        p0 = tree_cpu_s(t.proc) if t.proc else 0.0
        w0 = worker_cpu_s(t.proc)
        e0, m0 = tree_cpu_s(engine), own_cpu_s()
        tally = await closed_loop(session, load, concurrency, seconds)
        p1 = tree_cpu_s(t.proc) if t.proc else 0.0
        w1 = worker_cpu_s(t.proc)
        e1, m1 = tree_cpu_s(engine), own_cpu_s()
        await asyncio.sleep(settle)
        s1 = tree_cpu_s(t.worker) if t.worker else 0.0
    if len(w0) > 1 and len(w0) == len(w1):
        # Several workers on one port: the kernel's SO_REUSEPORT spread, by CPU used.
        split = [b - a for a, b in zip(w0, w1, strict=True)]
        print(f"    {t.name} workers' CPU split: "
              + " / ".join(f"{x / max(sum(split), 1e-9):.0%}" for x in split))  # fmt: skip
    cpu = (p1 - p0, e1 - e0, m1 - m0, s1 - s0)
    return tally.lat, tally.errors, tally.seconds, tally.first_error, cpu


def worker_cpu_s(proc: psutil.Process | None) -> list[float]:
    """CPU seconds of each gateway worker under ``proc`` (a supervisor's ``serve``
    children; the store worker it may run beside them is not one)."""
    if proc is None:
        return []
    try:
        return [tree_cpu_s(c) for c in proc.children() if c.cmdline()[-1:] == ["serve"]]
    except psutil.NoSuchProcess:
        return []


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]
    model: str
    proc: psutil.Process | None  # the proxy process (None for direct)
    worker: psutil.Process | None = None  # skyroute's store worker, when it runs apart


async def run_matrix(
    args: argparse.Namespace, targets: list[Target], engine: psutil.Process
) -> list[Row]:
    rows: list[Row] = []
    for stream in (False, True):
        mode = "stream" if stream else "nonstream"
        for conc in args.concurrency:
            direct: Row | None = None
            for t in targets:
                lat, errors, secs, first_error, (proxy_s, engine_s, me_s, worker_s) = await phase(
                    t, stream, conc, args.duration, args.warmup, engine
                )
                n = max(len(lat) + errors, 1)
                p50, p99 = np.percentile(np.array(lat or [0.0]) * 1000.0, [50, 99])
                row = Row(
                    mode, conc, t.name, len(lat), errors, round(secs, 3),
                    round(len(lat) / secs, 1), round(float(p50), 3), round(float(p99), 3),
                    proxy_cpu_ms_per_req=round(proxy_s * 1000 / n, 4) if t.proc else None,
                    engine_cpu_ms_per_req=round(engine_s * 1000 / n, 4),
                    loadgen_cpu_ms_per_req=round(me_s * 1000 / n, 4),
                    worker_cpu_ms_per_req=round(worker_s * 1000 / n, 4) if t.worker else None,
                    first_error=first_error,
                )  # fmt: skip
                if direct is None:
                    direct = row
                else:
                    row.added_p50_ms = round(row.p50_ms - direct.p50_ms, 3)
                    row.added_p99_ms = round(row.p99_ms - direct.p99_ms, 3)
                rows.append(row)
                cpu = "" if t.proc is None else f"  CPU {row.proxy_cpu_ms_per_req:.3f} ms/req"
                print(
                    f"  {mode:9} c={conc:<4} {t.name:8} {row.rps:8.0f} req/s  "
                    f"p50 {row.p50_ms:8.2f} ms  p99 {row.p99_ms:8.2f} ms{cpu}  errors {errors}",
                    flush=True,
                )
    return rows


def pin(args: argparse.Namespace, targets: list[Target], engine: psutil.Process,
        redis_proc: psutil.Process | None) -> dict[str, object]:  # fmt: skip
    """Every thread of the gateways and Redis on ``--proxy-cpus``; every thread of the
    engine and of this process (the load generator) on ``--client-cpus``.

    "Requests/s per worker" is then what one proxy worker does with its cores, whatever
    the engine and the load generator cost (Envoy's and Nighthawk's benchmark setups pin
    the same way). Redis shares the proxy's cores: its cost is the proxy's. Returns the
    assignment for the JSON config.
    """
    gateways = [p for t in targets for p in (t.proc, t.worker) if p is not None]
    threads = sum(pin_threads(p, args.proxy_cpus) for p in gateways)
    if redis_proc is not None:
        threads += pin_threads(redis_proc, args.proxy_cpus)
    threads += pin_threads(engine, args.client_cpus)
    threads += pin_threads(psutil.Process(), args.client_cpus, children=False)
    print(f"pinned {threads} threads: gateways and Redis on CPU {args.proxy_cpus}, "
          f"engine and load generator on {args.client_cpus}")  # fmt: skip
    return {"proxy_cpus": args.proxy_cpus, "client_cpus": args.client_cpus,
            "redis_pinned": redis_proc is not None}  # fmt: skip


def start_portkey(
    args: argparse.Namespace, procs: Processes, engine_url: str, port: int
) -> tuple[Target, dict[str, object]]:
    """Start Portkey; if its streaming fails, say so and restart it patched."""
    script = ensure_portkey(args.portkey_dir, args.portkey_version)
    env = portkey_env({k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")})
    url = f"http://127.0.0.1:{port}"
    info: dict[str, object] = {"version": args.portkey_version, "streaming_patched": False}
    proc = procs.start("portkey", portkey_command(script, port), args.portkey_dir, env)
    procs.wait_ready("portkey", url + "/", 60, b"")
    target = Target("portkey", url, portkey_headers(engine_url), UPSTREAM_MODEL, proc)
    problem = stream_problem(target.url, target.headers, target.model)
    if problem:
        info |= {"streaming_failed_unpatched": problem, "streaming_patched": True}
        print(f"NOTE: Portkey {args.portkey_version} streaming FAILS as released ({problem}); "
              "running it with the one-line patch of peer_portkey.py", flush=True)  # fmt: skip
        procs.stop_last()
        proc = procs.start("portkey", portkey_command(patched_script(script), port),
                           args.portkey_dir, env)  # fmt: skip
        procs.wait_ready("portkey", url + "/", 60, b"")
        target.proc = proc
        again = stream_problem(target.url, target.headers, target.model)
        if again:
            print(f"NOTE: Portkey streaming fails even patched: {again}", flush=True)
            info["streaming_failed_patched"] = again
    return target, info


def start_targets(
    args: argparse.Namespace, procs: Processes, redis_url: str, ports: dict[str, int],
    litellm_exe: Path | None,
) -> tuple[list[Target], psutil.Process, dict[str, dict[str, object]]]:  # fmt: skip
    """Start the engine, the bare proxy, skyroute and the chosen peers; returns targets,
    the engine and notes about the peers for the JSON."""
    tmp, notes = procs.logdir, dict[str, dict[str, object]]()
    port = {name: ports.get(name) or free_port() for name in PORT_NAMES}
    engine_url = f"http://127.0.0.1:{port['engine']}"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    engine_cmd = [sys.executable, "-m", "simengine", "--port", str(port["engine"]),
                  "--profile", PROFILE, "--model", UPSTREAM_MODEL, "--time-scale", "0",
                  "--log-level", "WARNING"]  # fmt: skip
    engine = procs.start("engine", engine_cmd, args.src, base_env)
    procs.wait_ready("engine", engine_url + "/health", 30, b"")
    targets = [Target("direct", engine_url, {}, UPSTREAM_MODEL, None)]

    # The floor and the same proxy behind uvicorn: one script each, same arguments.
    for name, script in (("bare", "peer_bare.py"), ("bare-asgi", "peer_bare_asgi.py")):
        if name not in args.peers:
            continue
        cmd = [sys.executable, str(ROOT / "loadtests" / script),
               "--port", str(port[name]), "--upstream", engine_url]  # fmt: skip
        proc = procs.start(name, cmd, args.src, base_env)
        url = f"http://127.0.0.1:{port[name]}"
        procs.wait_ready(name, url + "/health", 30, b"ok")
        targets.append(Target(name, url, {}, UPSTREAM_MODEL, proc))

    policy, api_key = tmp / "policy.yaml", f"sk-bench-{secrets.token_urlsafe(16)}"
    write_policy(policy, [engine_url])
    gw_env = base_env | {
        "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_PORT": str(port["skyroute"]),
        "SKYROUTE_HOST": "127.0.0.1", "SKYROUTE_API_KEY": api_key,
        "SKYROUTE_ADMIN_TOKEN": f"sk-adm-{secrets.token_urlsafe(16)}",
        "SKYROUTE_POLICY": str(policy), "SKYROUTE_LOG_LEVEL": args.skyroute_log_level,
        "SKYROUTE_REDIS_PREFIX": f"peers{secrets.token_hex(4)}",
    }  # fmt: skip
    gw_cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", "serve",
              "--workers", str(args.skyroute_workers)]  # fmt: skip
    # The run's own store (never the user's default ledger, which would grow run by
    # run and slow every later run's inserts), or the database given.
    gw_env["SKYROUTE_DATABASE_URL"] = (
        args.skyroute_database_url or f"sqlite+aiosqlite:///{tmp / 'store.db'}"
    )
    worker: psutil.Process | None = None
    if args.skyroute_store_worker == "external":
        gw_env["SKYROUTE_STORE_WORKER"] = "external"
        worker_cmd = [sys.executable, "-c", "from skyroute.cli import main; main()",
                      "store-worker"]  # fmt: skip
        worker = procs.start("store-worker", worker_cmd, args.src,
                             gw_env | {"SKYROUTE_REPLICA_ID": "bench-store-worker"})  # fmt: skip
    gateway = procs.start("skyroute", gw_cmd, args.src, gw_env)
    gw_url = f"http://127.0.0.1:{port['skyroute']}"
    procs.wait_ready("skyroute", gw_url + "/readyz", 30, b'"ready"')
    targets.append(Target("skyroute", gw_url, {"authorization": f"Bearer {api_key}"}, MODEL,
                          gateway, worker))  # fmt: skip

    if "portkey" in args.peers:
        target, notes["portkey"] = start_portkey(args, procs, engine_url, port["portkey"])
        targets.append(target)

    if litellm_exe is not None:
        config, master_key = tmp / "litellm.yaml", f"sk-{secrets.token_hex(16)}"
        write_litellm_config(
            config, engine_url, master_key, MODEL, UPSTREAM_MODEL, REQUEST_TIMEOUT_S
        )
        ll_cmd = [str(litellm_exe), "--config", str(config), "--host", "127.0.0.1",
                  "--port", str(port["litellm"]), "--num_workers", "1"]  # fmt: skip
        proxy = procs.start("litellm", ll_cmd, tmp, litellm_env(base_env))
        ll_url = f"http://127.0.0.1:{port['litellm']}"
        procs.wait_ready("litellm", ll_url + "/health/liveliness", 180, b"alive")
        targets.append(Target("litellm", ll_url, {"authorization": f"Bearer {master_key}"},
                              MODEL, proxy))  # fmt: skip
    return targets, engine, notes


def redis_server(url: str) -> psutil.Process | None:
    """The process of the Redis server at ``url`` if it runs on this machine, else None."""
    try:
        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        proc = psutil.Process(pid)
    except (redis.RedisError, psutil.Error, KeyError, ValueError):
        return None
    return proc if "redis" in proc.name() else None


def main() -> None:
    stop_on_sigterm()
    args = parse_args(__doc__.split("\n\n")[0])
    own_redis: EmbeddedRedis | None = None
    with tempfile.TemporaryDirectory(prefix="skyroute-peers-") as tmp:
        procs = Processes(Path(tmp))
        try:
            litellm_exe = (
                ensure_litellm(args.litellm_venv, args.litellm_version)
                if "litellm" in args.peers
                else None
            )
            redis_url = os.environ.get("SKYROUTE_REDIS_URL")
            redis_proc = redis_server(redis_url) if redis_url else None
            if not redis_url or (args.pin and redis_proc is None):
                # --pin needs a Redis it can pin: a remote or foreign one is replaced.
                own_redis = EmbeddedRedis(args.ports.get("redis", 0))
                redis_url = own_redis.start()
                redis_proc = redis_server(redis_url)
            targets, engine, notes = start_targets(args, procs, redis_url, args.ports,
                                                   litellm_exe)  # fmt: skip
            pinning = pin(args, targets, engine, redis_proc) if args.pin else None
            print(", ".join(f"{t.name} {t.url}" for t in targets)
                  + f"; concurrency {args.concurrency}, {args.duration:g} s per phase",
                  flush=True)  # fmt: skip
            rows = run_until_sigterm(run_matrix(args, targets, engine))
            peak = {t.name: round(tree_peak_rss_mb(t.proc), 1) for t in targets if t.proc}
            print_rows(rows)
            print("\npeak RSS (VmHWM of the process tree): "
                  + ", ".join(f"{k} {v:.0f} MB" for k, v in peak.items()))  # fmt: skip
            summary = floor_summary(rows, args.skyroute_workers)
            comparison = litellm_comparison(rows)
            warnings = warnings_for(rows)
            if notes.get("portkey", {}).get("streaming_patched"):
                warnings.append("Portkey streaming fails as released; its stream rows ran patched")
            for w in warnings:
                print(w)
            for t in targets[1:]:
                if all(r.requests == 0 for r in rows if r.target == t.name):
                    print(f"{t.name} answered nothing; its log ends:\n{procs.tail(t.name)}")
            out = {"config": config(args, pinning), "peers": notes, "peak_rss_mb": peak,
                   "floor_summary": summary, "comparison": comparison,
                   "warnings": warnings, "results": [asdict(r) for r in rows]}  # fmt: skip
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=2))
            print(f"\nwrote {args.json}")
        finally:
            procs.stop()
            if own_redis is not None:
                own_redis.stop()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
