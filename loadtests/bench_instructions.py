"""Instructions a proxied request costs each gateway, counted by valgrind: a figure the
machine's noise does not move.

    python loadtests/bench_instructions.py [--targets bare,skyroute] [--modes nonstream,stream]
        [--requests 1500] [--concurrency 8] [--warmup 200] [--idle-s 10] [--src DIR]
        [--env NAME=VALUE ...] [--json out.json]

CPU time a request drifts 10-20 % from minute to minute on a shared 2-core VM, which
hides a change of a few per cent. The instructions a process executes do not drift:
callgrind counts them whatever else the machine is doing. Each target, the bare aiohttp
proxy (``peer_bare.py``, the floor) and ``skyroute serve`` (every feature on, access log
at INFO, from ``--src``, ``--env`` added to its environment), runs under ``valgrind
--tool=callgrind`` with instrumentation off until it is ready, its background start-up
work has settled and ``--warmup`` requests of each mode have passed. Then, per mode,
instructions are counted over an idle phase of ``--idle-s`` (the background loops alone:
instructions a second) and over ``--requests`` requests at ``--concurrency``, against the
simulated engine at full speed. A request costs the load phase's count less the idle rate
times the phase's length, over the requests.

What the count leaves out, so it is a proxy for CPU a request, not the same thing: the
kernel's work in system calls (6-19 % of either gateway's CPU, and the two make about the
same calls a request), and how fast each instruction runs (cache misses). Under callgrind
a process runs 50-100x slower, so its timer-driven loops run that much more often a
request; the idle rate takes most of that out, and what is left (work a loop does only
when requests came) moves a target's figure by about 3 % between runs. Prints each
target's instructions a request and skyroute's over the floor's (issue 19: <= 1.3x).
Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import psutil

from skyroute.embedded_redis import EmbeddedRedis, free_port

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.bench_load import (  # noqa: E402
    MAX_TOKENS,
    PROFILE,
    PROMPT,
    REQUEST_TIMEOUT_S,
    UPSTREAM_MODEL,
    Load,
    write_policy,
)
from loadtests.bench_procs import Processes, stop_on_sigterm  # noqa: E402

TARGETS = ("bare", "skyroute")
MODES = ("nonstream", "stream")
READY_S = 300.0  # start to ready under callgrind (uninstrumented, 5-10x slower)
SETTLE_MAX_S = 120.0


@dataclass
class Row:
    """One target in one mode: instructions (Ir) counted and what they were counted over."""

    target: str
    mode: str
    requests: int
    errors: int
    load_s: float
    load_ir: int
    idle_s: float
    idle_ir: int

    @property
    def idle_ir_per_s(self) -> float:
        return self.idle_ir / self.idle_s if self.idle_s > 0 else 0.0

    @property
    def ir_per_request(self) -> float:
        """The load phase's instructions less the idle rate over its length, a request."""
        net = self.load_ir - self.idle_ir_per_s * self.load_s
        return net / self.requests if self.requests else float("nan")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma list: bare, skyroute")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list: nonstream, stream")
    ap.add_argument("--requests", type=int, default=1500, help="counted requests a mode")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=200, help="uncounted requests a mode first")
    ap.add_argument("--idle-s", type=float, default=10.0, help="idle phase counted a mode")
    ap.add_argument("--src", type=Path, default=_ROOT, help="the skyroute checkout to run")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set in skyroute's environment (repeatable): prices one setting",
    )
    ap.add_argument("--json", type=Path, default=Path("bench-instructions.json"))
    args = ap.parse_args()
    args.targets = [t for t in args.targets.split(",") if t]
    args.modes = [m for m in args.modes.split(",") if m]
    if bad := set(args.targets) - set(TARGETS) or set(args.modes) - set(MODES):
        ap.error(f"unknown target or mode: {sorted(bad)}")
    if args.requests < 1 or args.concurrency < 1:
        ap.error("--requests and --concurrency must be >= 1")
    if bad_env := [e for e in args.env if "=" not in e]:
        ap.error(f"--env wants NAME=VALUE: {bad_env}")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        ap.error("valgrind (with callgrind_control) is not installed")
    return args


async def send_counted(load: Load, concurrency: int, n: int) -> int:
    """Send ``n`` requests over ``concurrency`` connections; returns how many failed (not
    a 200, or a stream without ``[DONE]``)."""
    left, errors = n, 0
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S * 30)  # callgrind is slow
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def worker() -> None:
            nonlocal left, errors
            while left > 0:
                left -= 1
                try:
                    async with session.post(load.url, data=load.body, headers=load.headers) as r:
                        body = await r.read()
                        errors += r.status != 200 or (load.stream and b"[DONE]" not in body)
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


def callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True,
                   timeout=120)  # fmt: skip


def dumped_total(out: Path, index: int) -> int:
    """The ``totals:`` line (Ir) of callgrind's ``index``-th dump of ``out``."""
    path = Path(f"{out}.{index}")
    for _ in range(600):  # the dump is written by the target, after the control returns
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("totals:"):
                    return int(line.split()[1])
        time.sleep(0.1)
    raise RuntimeError(f"no callgrind dump {path}")


def settle(proc: psutil.Process) -> float:
    """Wait until the process's CPU use stops falling (imports and the store opening in
    the background are done): two 2-second windows in a row within 1.3x of the quietest
    seen. Returns the seconds waited."""
    start, quietest, calm = time.monotonic(), float("inf"), 0
    while time.monotonic() - start < SETTLE_MAX_S and calm < 2:
        before = sum(proc.cpu_times()[:2])
        time.sleep(2.0)
        used = sum(proc.cpu_times()[:2]) - before
        # The first window only sets the mark: it cannot be calm against itself.
        calm = calm + 1 if quietest < float("inf") and used <= quietest * 1.3 else 0
        quietest = min(quietest, used)
    return time.monotonic() - start


def loads(target: str, url: str, key: str) -> dict[str, Load]:
    if target == "skyroute":
        return {m: Load.chat(url, key, m == "stream") for m in MODES}
    out = {}
    for mode in MODES:
        payload = {"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": PROMPT}],
                   "max_tokens": MAX_TOKENS, "stream": mode == "stream"}  # fmt: skip
        body = json.dumps(payload).encode()
        out[mode] = Load(url + "/v1/chat/completions", {"content-type": "application/json"},
                         body, mode == "stream")  # fmt: skip
    return out


def start_target(
    target: str, args: argparse.Namespace, procs: Processes, engine_url: str, redis_url: str,
    out: Path,
) -> tuple[psutil.Process, dict[str, Load]]:  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={out}"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    env["PYTHONHASHSEED"] = "0"  # the same dict layouts, run to run
    if target == "bare":
        cmd = [sys.executable, str(_ROOT / "loadtests" / "peer_bare.py"), "--port", str(port),
               "--upstream", engine_url]  # fmt: skip
        proc = procs.start(target, valgrind + cmd, _ROOT, env)
        procs.wait_ready(target, url + "/health", READY_S, b"ok")
        return proc, loads(target, url, "")
    policy, key = procs.logdir / "policy.yaml", f"sk-bench-{secrets.token_urlsafe(16)}"
    write_policy(policy, [engine_url])
    env |= {
        "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_PORT": str(port),
        "SKYROUTE_HOST": "127.0.0.1", "SKYROUTE_API_KEY": key,
        "SKYROUTE_ADMIN_TOKEN": f"sk-adm-{secrets.token_urlsafe(16)}",
        "SKYROUTE_POLICY": str(policy), "SKYROUTE_LOG_LEVEL": "INFO",
        "SKYROUTE_REDIS_PREFIX": f"instr{secrets.token_hex(4)}",
        "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{procs.logdir / 'store.db'}",
    }  # fmt: skip
    env |= dict(e.split("=", 1) for e in args.env)
    cmd = [sys.executable, "-c", "from skyroute.cli import main; main()", "serve",
           "--workers", "1"]  # fmt: skip
    proc = procs.start(target, valgrind + cmd, args.src, env)
    procs.wait_ready(target, url + "/readyz", READY_S, b'"ready"')
    return proc, loads(target, url, key)


def measure(
    target: str, args: argparse.Namespace, procs: Processes, engine_url: str, redis_url: str
) -> list[Row]:
    """Start ``target`` under callgrind, count each mode, stop it."""
    out = procs.logdir / f"callgrind.{target}.out"
    proc, by_mode = start_target(target, args, procs, engine_url, redis_url, out)
    rows, dumps = [], 0
    try:
        waited = settle(proc)
        for mode in args.modes:
            errors = asyncio.run(send_counted(by_mode[mode], args.concurrency, args.warmup))
            if errors:
                raise RuntimeError(f"{target} {mode}: {errors} warm-up requests failed:\n"
                                   + procs.tail(target))  # fmt: skip
        print(f"{target}: settled {waited:.0f} s after ready; warmed up", flush=True)
        for mode in args.modes:
            callgrind(proc.pid, "-i", "on")
            t0 = time.monotonic()
            time.sleep(args.idle_s)
            callgrind(proc.pid, "-d")
            idle_s, t1 = time.monotonic() - t0, time.monotonic()
            errors = asyncio.run(send_counted(by_mode[mode], args.concurrency, args.requests))
            callgrind(proc.pid, "-d")
            load_s = time.monotonic() - t1
            callgrind(proc.pid, "-i", "off")
            idle_ir, load_ir = dumped_total(out, dumps + 1), dumped_total(out, dumps + 2)
            dumps += 2
            row = Row(target, mode, args.requests, errors, load_s, load_ir, idle_s, idle_ir)
            rows.append(row)
            print(
                f"  {mode}: {row.ir_per_request:,.0f} Ir a request ({errors} errors; "
                f"idle {row.idle_ir_per_s / 1e6:.1f} MIr/s, load {load_s:.1f} s)",
                flush=True,
            )
    finally:
        procs.stop_last()
    return rows


def report(rows: list[Row]) -> dict[str, float]:
    """Print the table; returns skyroute's ratio to the floor per mode."""
    by = {(r.target, r.mode): r for r in rows}
    ratios = {}
    print("\n| mode | bare Ir/request | skyroute Ir/request | skyroute / bare |")
    print("| --- | --- | --- | --- |")
    for mode in MODES:
        bare, sky = by.get(("bare", mode)), by.get(("skyroute", mode))
        if bare is None and sky is None:
            continue
        cells = [f"{r.ir_per_request:,.0f}" if r else "-" for r in (bare, sky)]
        ratio = sky.ir_per_request / bare.ir_per_request if bare and sky else None
        if ratio is not None:
            ratios[mode] = round(ratio, 3)
        print(f"| {mode} | {cells[0]} | {cells[1]} | "
              + (f"{ratio:.2f}x (target <= 1.3x)" if ratio else "-") + " |")  # fmt: skip
    return ratios


def main() -> None:
    stop_on_sigterm()
    args = parse_args()
    redis = EmbeddedRedis(0)
    with tempfile.TemporaryDirectory(prefix="skyroute-instr-") as tmp:
        procs = Processes(Path(tmp))
        try:
            redis_url = redis.start()
            engine_port = free_port()
            engine_url = f"http://127.0.0.1:{engine_port}"
            engine_cmd = [sys.executable, "-m", "simengine", "--port", str(engine_port),
                          "--profile", PROFILE, "--model", UPSTREAM_MODEL, "--time-scale", "0",
                          "--log-level", "WARNING"]  # fmt: skip
            procs.start("engine", engine_cmd, _ROOT, dict(os.environ))
            procs.wait_ready("engine", engine_url + "/health", 30, b"")
            rows = [r for t in args.targets for r in measure(t, args, procs, engine_url, redis_url)]
        finally:
            procs.stop()
            redis.stop()
    ratios = report(rows)
    out = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
           "rows": [asdict(r) | {"ir_per_request": round(r.ir_per_request),
                                 "idle_ir_per_s": round(r.idle_ir_per_s)} for r in rows],
           "skyroute_over_bare": ratios}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
