"""Side-by-side benchmark: one simulated engine, called directly, through skyroute (one
worker) and through the LiteLLM proxy (one worker), at the same concurrency and request mix.

    python loadtests/bench_peers.py [--quick] [--skip-litellm] [--json out.json]

Everything runs on 127.0.0.1. The engine answers at once (``--time-scale 0``), so what is
measured is each proxy's own cost. LiteLLM is installed from PyPI into its own virtualenv
(``.bench-venvs/litellm``, reused across runs) and serves the engine as an
``openai/`` deployment, with telemetry off, no database and a master key. skyroute runs
``skyroute serve`` with the 6-pool policy of ``bench_overhead.py`` (auth, routing and Redis
accounting on), all pools on the same engine.

For non-streaming and streaming requests at each concurrency (closed loop: that many
requests always in flight), it prints req/s, p50/p99 latency, the latency added over direct,
the proxy's CPU ms per request (user + system time of its process tree), errors, and each
proxy's peak RSS, then writes all of it as JSON. The load generator is an aiohttp + uvloop
client in this process; a warning says so when it cannot drive the engine directly at 1.5x
the fastest proxy's rate, because the proxy numbers would then be load-generator-bound.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import numpy as np
import psutil
import uvloop

from skyroute.embedded_redis import EmbeddedRedis, free_port

try:  # python -m loadtests.bench_peers, or imported from the tests
    from loadtests.bench_overhead import (
        MAX_TOKENS,
        MODEL,
        PROFILE,
        PROMPT,
        UPSTREAM_MODEL,
        Load,
        closed_loop,
        wait_http,
        write_policy,
    )
    from loadtests.peer_litellm import (
        LITELLM_VERSION,
        ensure_litellm,
        litellm_env,
        write_litellm_config,
    )
except ModuleNotFoundError:  # python loadtests/bench_peers.py: this directory is on sys.path
    from bench_overhead import (  # type: ignore[no-redef]
        MAX_TOKENS,
        MODEL,
        PROFILE,
        PROMPT,
        UPSTREAM_MODEL,
        Load,
        closed_loop,
        wait_http,
        write_policy,
    )
    from peer_litellm import (  # type: ignore[no-redef]
        LITELLM_VERSION,
        ensure_litellm,
        litellm_env,
        write_litellm_config,
    )

ROOT = Path(__file__).resolve().parent.parent
REQUEST_TIMEOUT_S = 30.0
TARGET_RPS_RATIO = 20.0  # issue 9: skyroute >= 20x LiteLLM's req/s per worker


@dataclass
class Row:
    mode: str  # nonstream | stream
    concurrency: int
    target: str  # direct | skyroute | litellm
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    proxy_cpu_ms_per_req: float | None = None
    engine_cpu_ms_per_req: float = 0.0
    loadgen_cpu_ms_per_req: float = 0.0
    first_error: str = ""


def tree_cpu_s(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and its live descendants."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += float(sum(p.cpu_times()[:2]))
    return total


def tree_peak_rss_mb(proc: psutil.Process) -> float:
    """Peak resident memory (VmHWM) summed over ``proc`` and its descendants, MB."""
    total_kb = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            status = Path(f"/proc/{p.pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024.0


async def phase(
    url: str,
    headers: dict[str, str],
    model: str,
    stream: bool,
    concurrency: int,
    seconds: float,
    warmup: float,
    watched: list[psutil.Process | None],
) -> tuple[list[float], int, float, str, list[float]]:
    """Warm up, then a closed loop at ``concurrency`` for ``seconds``.

    Returns latencies (s), errors, elapsed s, the first error, and the CPU seconds each
    process tree in ``watched`` used during the measured part (0 for None).
    """
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "stream": stream,
    }
    load = Load(
        url + "/v1/chat/completions",
        {"content-type": "application/json", **headers},
        json.dumps(payload).encode(),
        stream,
        Counter(),
    )
    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await closed_loop(session, load, concurrency, warmup)
        before = [tree_cpu_s(p) if p else 0.0 for p in watched]
        tally = await closed_loop(session, load, concurrency, seconds)
        cpu = [(tree_cpu_s(p) if p else 0.0) - b for p, b in zip(watched, before, strict=True)]
    return tally.lat, tally.errors, tally.seconds, tally.first_error, cpu


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]
    model: str
    proc: psutil.Process | None  # the proxy process (None for direct)


async def run_matrix(
    args: argparse.Namespace, targets: list[Target], engine: psutil.Process
) -> list[Row]:
    me = psutil.Process()
    rows: list[Row] = []
    for stream in (False, True):
        mode = "stream" if stream else "nonstream"
        for conc in args.concurrency:
            direct: Row | None = None
            for t in targets:
                lat, errors, secs, first_error, (proxy_s, engine_s, me_s) = await phase(
                    t.url,
                    t.headers,
                    t.model,
                    stream,
                    conc,
                    args.duration,
                    args.warmup,
                    [t.proc, engine, me],
                )
                n = max(len(lat) + errors, 1)
                p50, p99 = np.percentile(np.array(lat or [0.0]) * 1000.0, [50, 99])
                row = Row(
                    mode,
                    conc,
                    t.name,
                    len(lat),
                    errors,
                    round(secs, 3),
                    round(len(lat) / secs, 1),
                    round(float(p50), 3),
                    round(float(p99), 3),
                    proxy_cpu_ms_per_req=round(proxy_s * 1000 / n, 4) if t.proc else None,
                    engine_cpu_ms_per_req=round(engine_s * 1000 / n, 4),
                    loadgen_cpu_ms_per_req=round(me_s * 1000 / n, 4),
                    first_error=first_error,
                )
                if direct is None:
                    direct = row
                else:
                    row.added_p50_ms = round(row.p50_ms - direct.p50_ms, 3)
                    row.added_p99_ms = round(row.p99_ms - direct.p99_ms, 3)
                rows.append(row)
                print(
                    f"  {mode:9} c={conc:<4} {t.name:8} {row.rps:8.0f} req/s  "
                    f"p50 {row.p50_ms:8.2f} ms  p99 {row.p99_ms:8.2f} ms  errors {errors}",
                    flush=True,
                )
    return rows


def report(rows: list[Row], peak_rss: dict[str, float]) -> tuple[list[str], dict[str, object]]:
    """Print the table and the comparison; returns (warnings, comparison)."""

    def fmt(v: float | None, spec: str = ".2f") -> str:
        return "-" if v is None else format(v, spec)

    cols = [
        "mode",
        "conc",
        "target",
        "req/s",
        "p50 ms",
        "p99 ms",
        "+p50 ms",
        "+p99 ms",
        "proxy CPU ms/req",
        "errors",
    ]
    table = [
        [
            r.mode,
            str(r.concurrency),
            r.target,
            f"{r.rps:.0f}",
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            fmt(r.added_p50_ms),
            fmt(r.added_p99_ms),
            fmt(r.proxy_cpu_ms_per_req, ".3f"),
            str(r.errors),
        ]
        for r in rows
    ]
    widths = [max(len(c), *(len(x[i]) for x in table)) for i, c in enumerate(cols)]
    print("\n" + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for line in table:
        print(" | ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)))
    print(
        "\npeak RSS (VmHWM of the process tree): "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in peak_rss.items())
    )

    by = {(r.mode, r.concurrency, r.target): r for r in rows}
    warnings: list[str] = []
    comparison: dict[str, object] = {}
    for (mode, conc, target), r in by.items():
        if target != "direct":
            continue
        proxies = [by[(mode, conc, t)] for t in ("skyroute", "litellm") if (mode, conc, t) in by]
        fastest = max((p.rps for p in proxies), default=0.0)
        if fastest and r.rps < 1.5 * fastest:
            warnings.append(
                f"WARNING: {mode} c={conc}: direct {r.rps:.0f} req/s < 1.5 x the fastest proxy "
                f"({fastest:.0f} req/s): the load generator may be the bottleneck"
            )
        sky, lite = by.get((mode, conc, "skyroute")), by.get((mode, conc, "litellm"))
        if sky and lite and lite.rps > 0:
            key = f"{mode}/c={conc}"
            comparison[key] = {
                "rps_ratio": round(sky.rps / lite.rps, 1),
                # Per-request CPU is what bounds a worker's rate when it has a core to itself;
                # unlike req/s it does not depend on what else shares the machine's cores.
                "cpu_ratio": round(
                    (lite.proxy_cpu_ms_per_req or 0.0) / max(sky.proxy_cpu_ms_per_req or 0.0, 1e-9),
                    1,
                ),
                "skyroute_p99_ms": sky.p99_ms,
                "litellm_p99_ms": lite.p99_ms,
                "skyroute_lower_p99": sky.p99_ms < lite.p99_ms,
            }
    if comparison:
        print(
            f"\nskyroute vs LiteLLM, one worker each (target: >= {TARGET_RPS_RATIO:g}x req/s "
            "and lower p99 at every concurrency):"
        )
        for key, c in comparison.items():
            assert isinstance(c, dict)
            print(
                f"  {key:16} {c['rps_ratio']:6.1f}x req/s  {c['cpu_ratio']:6.1f}x less CPU/req  "
                f"p99 {c['skyroute_p99_ms']:.2f} ms "
                f"vs {c['litellm_p99_ms']:.2f} ms"
                + ("" if c["skyroute_lower_p99"] else "   (skyroute p99 NOT lower)")
            )
    warnings += [
        f"first error of {r.mode} c={r.concurrency} {r.target}: {r.first_error}"
        for r in rows
        if r.first_error
    ]
    for w in warnings:
        print(w)
    return warnings, comparison


class Processes:
    """The benchmark's child processes, each logging to a file; stopped in reverse order."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> psutil.Process:
        with (self.logdir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return psutil.Process(proc.pid)

    def wait_ready(self, name: str, url: str, deadline_s: float, want: bytes) -> None:
        """Wait for ``url``; on failure print the tail of ``name``'s log and re-raise."""
        try:
            wait_http(url, deadline_s, self.procs[-1], want)
        except RuntimeError:
            print(self.tail(name), file=sys.stderr)
            raise

    def tail(self, name: str, chars: int = 3000) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def pin(targets: list[Target], engine: psutil.Process, redis: psutil.Process | None) -> None:
    """Proxies on CPU 0; engine and this process (the load generator) on the others.

    "Requests/s per worker" is then what one proxy worker does with one core, whatever
    the engine and the load generator cost; unpinned on a 2-core machine, a faster proxy
    is held back more by the CPU they take (Envoy's and Nighthawk's benchmark setups
    pin the same way). skyroute's Redis shares the proxy's core: its cost is the
    proxy's. The assignment is printed and goes into the JSON config.
    """
    cpus = sorted(psutil.Process().cpu_affinity() or [0])
    proxy_cpus, rest = cpus[:1], cpus[1:] or cpus[:1]
    for proc in [t.proc for t in targets if t.proc is not None] + ([redis] if redis else []):
        for p in [proc, *proc.children(recursive=True)]:
            p.cpu_affinity(proxy_cpus)
    for p in [engine, *engine.children(recursive=True), psutil.Process()]:
        p.cpu_affinity(rest)
    print(f"pinned: proxies and Redis on CPU {proxy_cpus}, engine and load generator on {rest}")


def start_targets(
    args: argparse.Namespace, procs: Processes, redis_url: str, litellm_exe: Path | None
) -> tuple[list[Target], psutil.Process]:
    """Start the engine, skyroute and (unless skipped) LiteLLM; returns targets and engine."""
    tmp = procs.logdir
    engine_port, gw_port, ll_port = free_port(), free_port(), free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    engine_cmd = [sys.executable, "-m", "simengine", "--port", str(engine_port),
                  "--profile", PROFILE, "--model", UPSTREAM_MODEL, "--time-scale", "0",
                  "--log-level", "WARNING"]  # fmt: skip
    engine = procs.start("engine", engine_cmd, args.src, base_env)
    procs.wait_ready("engine", engine_url + "/health", 30, b"")
    targets = [Target("direct", engine_url, {}, UPSTREAM_MODEL, None)]

    policy, api_key = tmp / "policy.yaml", f"sk-bench-{secrets.token_urlsafe(16)}"
    write_policy(policy, [engine_url])
    gw_env = base_env | {
        "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_PORT": str(gw_port),
        "SKYROUTE_HOST": "127.0.0.1", "SKYROUTE_API_KEY": api_key,
        "SKYROUTE_ADMIN_TOKEN": f"sk-adm-{secrets.token_urlsafe(16)}",
        "SKYROUTE_POLICY": str(policy), "SKYROUTE_LOG_LEVEL": "WARNING",
        "SKYROUTE_REDIS_PREFIX": f"peers{secrets.token_hex(4)}",
    }  # fmt: skip
    gw_cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", "serve"]
    gateway = procs.start("skyroute", gw_cmd, args.src, gw_env)
    gw_url = f"http://127.0.0.1:{gw_port}"
    procs.wait_ready("skyroute", gw_url + "/readyz", 30, b'"ready"')
    targets.append(Target("skyroute", gw_url, {"authorization": f"Bearer {api_key}"}, MODEL,
                          gateway))  # fmt: skip

    if litellm_exe is not None:
        config, master_key = tmp / "litellm.yaml", f"sk-{secrets.token_hex(16)}"
        write_litellm_config(
            config, engine_url, master_key, MODEL, UPSTREAM_MODEL, REQUEST_TIMEOUT_S
        )
        ll_cmd = [str(litellm_exe), "--config", str(config), "--host", "127.0.0.1",
                  "--port", str(ll_port), "--num_workers", "1"]  # fmt: skip
        proxy = procs.start("litellm", ll_cmd, tmp, litellm_env(base_env))
        ll_url = f"http://127.0.0.1:{ll_port}"
        procs.wait_ready("litellm", ll_url + "/health/liveliness", 180, b"alive")
        targets.append(Target("litellm", ll_url, {"authorization": f"Bearer {master_key}"},
                              MODEL, proxy))  # fmt: skip
    return targets, engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (CI smoke)")
    parser.add_argument("--skip-litellm", action="store_true", help="direct and skyroute only")
    parser.add_argument("--litellm-version", default=LITELLM_VERSION)
    parser.add_argument("--litellm-venv", type=Path, default=ROOT / ".bench-venvs" / "litellm")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                        help="comma-separated (default 1,8,32,128; quick 8)")  # fmt: skip
    parser.add_argument("--duration", type=float, help="seconds per phase (8; quick 1.5)")
    parser.add_argument("--json", type=Path, default=ROOT / "artifacts" / "bench_peers.json")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="proxies (and skyroute's Redis) on CPU 0, engine and load generator on the "
        "others, so no proxy competes with them for its core; only meaningful on an "
        "otherwise idle machine (other jobs are not pinned and land on CPU 0 too)",
    )
    parser.add_argument("--src", type=Path, default=ROOT,
                        help="skyroute tree to run, e.g. a `git archive` export")  # fmt: skip
    args = parser.parse_args()
    args.concurrency = args.concurrency or ([8] if args.quick else [1, 8, 32, 128])
    args.duration = args.duration or (1.5 if args.quick else 8.0)
    args.warmup = 0.5 if args.quick else 2.0

    redis: EmbeddedRedis | None = None
    with tempfile.TemporaryDirectory(prefix="skyroute-peers-") as tmp:
        procs = Processes(Path(tmp))
        try:
            litellm_exe = (
                None
                if args.skip_litellm
                else ensure_litellm(args.litellm_venv, args.litellm_version)
            )
            redis_url = os.environ.get("SKYROUTE_REDIS_URL")
            if not redis_url:
                redis = EmbeddedRedis()
                redis_url = redis.start()
            targets, engine = start_targets(args, procs, redis_url, litellm_exe)
            if args.pin:
                pid = redis.pid if redis is not None else None
                redis_proc = psutil.Process(pid) if pid is not None else None
                pin(targets, engine, redis_proc)
            print(", ".join(f"{t.name} {t.url}" for t in targets)
                  + f"; concurrency {args.concurrency}, {args.duration:g} s per phase",
                  flush=True)  # fmt: skip
            rows = uvloop.run(run_matrix(args, targets, engine))
            peak = {t.name: round(tree_peak_rss_mb(t.proc), 1) for t in targets if t.proc}
            warnings, comparison = report(rows, peak)
            for t in targets[1:]:
                if all(r.requests == 0 for r in rows if r.target == t.name):
                    print(f"{t.name} answered nothing; its log ends:\n{procs.tail(t.name)}")
            write_json(args, rows, peak, comparison, warnings)
        finally:
            procs.stop()
            if redis is not None:
                redis.stop()


def write_json(
    args: argparse.Namespace, rows: list[Row], peak: dict[str, float],
    comparison: dict[str, object], warnings: list[str],
) -> None:  # fmt: skip
    config = {"concurrency": args.concurrency, "duration_s": args.duration,
              "warmup_s": args.warmup, "quick": args.quick, "max_tokens": MAX_TOKENS,
              "litellm_version": None if args.skip_litellm else args.litellm_version,
              "engine_profile": PROFILE, "cpus": os.cpu_count(), "src": str(args.src),
              "pinned": args.pin}  # fmt: skip
    out = {"config": config, "peak_rss_mb": peak, "comparison": comparison,
           "warnings": warnings, "results": [asdict(r) for r in rows]}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
