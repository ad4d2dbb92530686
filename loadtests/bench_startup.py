"""Start-up cost of the command line and of one gateway worker. Prints numbers only.

    python loadtests/bench_startup.py [--src DIR] [--runs 5]

- ``skyroute --help`` wall time (median of ``--runs``);
- ``skyroute serve``: the modules a worker has imported once it is serving (counted in a
  child that takes the same path as ``serve``: parse the arguments, import the serving
  modules), and those the store adds when it opens after the worker is ready;
  start-to-ready time (process start until ``/readyz`` says ready), how long after that
  the store is open (``skyroute_store_ready`` in ``/metrics``), and the worker's idle
  RSS two seconds after it became ready, the store open.

The container image compiles every module ahead of time (``compileall`` in the Dockerfile);
an editable checkout run with ``PYTHONDONTWRITEBYTECODE=1`` compiles skyroute's own modules
at every start instead. ``--compile`` (the default) writes their bytecode caches first, so
the figure is the image's; ``--no-compile`` measures the checkout as it is.

``--src`` measures another checkout of skyroute (for a before/after: a ``git worktree``
of an older commit) with the same interpreter. Redis is ``SKYROUTE_REDIS_URL`` or an
embedded one; the store is a SQLite file of the run's own, migrated by one unmeasured
start first (the user's default ledger is never touched); everything runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from skyroute.embedded_redis import free_port, redis_url_or_embedded

# ``python loadtests/bench_startup.py`` puts this directory, not the project, on sys.path.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtests.bench_procs import stop_on_sigterm  # noqa: E402

PACKAGES = ("base", "router", "live", "store", "adapters", "gateway", "pricing", "skyroute")
CLI = "from skyroute.cli import main; main()"
# The path ``skyroute serve`` takes before it serves: the parser, then the serving modules.
SERVE_IMPORTS = """
import sys
try:
    from skyroute.redis_import import import_redis  # as main() does first
    import_redis()
except ImportError:  # before redis was imported without its OTel metrics
    pass
try:
    from skyroute.cli import build_parser
    build_parser("serve")
except TypeError:  # before the lazy command line: one parser with every subcommand
    from skyroute.cli import build_parser
    build_parser()
import skyroute.serve, gateway.app
heavy = [m for m in ("scipy", "matplotlib", "boto3", "google.cloud", "azure") if m in sys.modules]
serving = len(sys.modules)
import store.restore, store.migrate, store.consumer  # what the store opens with
print(serving, len(sys.modules) - serving, ",".join(heavy) or "-")
"""


# A store of the run's own (set in main), never the user's default ledger.
STORE_ENV: dict[str, str] = {}


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), **STORE_ENV}


def help_wall_s(src: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", CLI, "--help"], cwd=src, env=_env(src),
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def serve_modules(src: Path) -> tuple[int, int, str]:
    """(modules imported to serve, more the store imports when it opens, heavy ones)."""
    out = subprocess.run([sys.executable, "-c", SERVE_IMPORTS], cwd=src, env=_env(src),
                         check=True, capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    count, store, heavy = out.split()
    return int(count), int(store), heavy


def _policy(src: Path) -> Path:
    for rel in ("skyroute/fleet/demo-policy.yaml",):
        if (src / rel).exists():
            return src / rel
    raise SystemExit(f"no demo policy under {src}")


def _get(url: str, token: str | None = None) -> bytes:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=1) as r:
        body: bytes = r.read()
        return body


def _store_ready(base: str, token: str) -> bool:
    try:
        return b"skyroute_store_ready 1.0" in _get(f"{base}/metrics", token)
    except OSError:
        return False


def _start_serve(
    src: Path, redis_url: str, extra: dict[str, str], *args: str
) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start ``skyroute serve *args`` from ``src`` on a free port with the demo policy
    and a Redis prefix of its own, and wait (60 s at most) until ``/readyz`` says ready.
    Returns the process, its base URL and its admin token; SystemExit if it exits or
    is not ready in time (the process is terminated first)."""
    port = free_port()
    token = secrets.token_hex(16)
    env = {**_env(src), "SKYROUTE_REDIS_URL": redis_url, "SKYROUTE_PORT": str(port),
           "SKYROUTE_HOST": "127.0.0.1", "SKYROUTE_POLICY": str(_policy(src)),
           "SKYROUTE_LOG_LEVEL": "WARNING", "SKYROUTE_ADMIN_TOKEN": token,
           "SKYROUTE_REDIS_PREFIX": f"startup{secrets.token_hex(4)}", **extra}  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", *args], cwd=src, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited with {proc.returncode}")
        try:
            if b"ready" in _get(f"{base}/readyz"):
                return proc, base, token
        except OSError:
            time.sleep(0.01)
    proc.terminate()
    proc.wait(timeout=60)
    raise SystemExit("serve was not ready in 60 s")


def serve_ready(
    src: Path, redis_url: str, store_worker: str = "inline"
) -> tuple[float, float, float, float]:
    """(start-to-ready seconds, CPU seconds used until ready, seconds from ready until the
    store is open, idle RSS MB) of one ``skyroute serve`` worker. On a busy machine the
    CPU figure is the steadier one: the wall time also counts the waits for a core.
    With ``store_worker="external"`` the worker never opens the store while idle (a
    ``skyroute store-worker`` would): the store figure is then 0 and RSS is read 2 s
    after ready."""
    t0 = time.perf_counter()
    proc, base, token = _start_serve(src, redis_url, {"SKYROUTE_STORE_WORKER": store_worker})
    try:
        ready = time.perf_counter() - t0
        deadline = t0 + 60
        times = psutil.Process(proc.pid).cpu_times()
        cpu = times.user + times.system
        while store_worker == "inline" and not _store_ready(base, token):
            if time.perf_counter() > deadline:
                raise SystemExit("the store did not open")
            time.sleep(0.01)
        store = time.perf_counter() - t0 - ready
        time.sleep(max(2.0 - store, 0.0))
        rss = psutil.Process(proc.pid).memory_info().rss / 2**20
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return ready, cpu, store, rss


def workers_rss(src: Path, redis_url: str, n: int) -> tuple[list[float], float | None]:
    """Idle RSS (MB) of each gateway worker of ``skyroute serve --workers n``, and of the
    store worker its supervisor runs beside them (None if it runs none), read 2 s after
    ``/readyz`` answered (the store worker has opened and migrated the store by then)."""
    proc, _, _ = _start_serve(src, redis_url, {}, "--workers", str(n))
    try:
        time.sleep(2.0)
        children = psutil.Process(proc.pid).children()
        workers = [c for c in children if c.cmdline()[-1] == "serve"]
        stores = [c for c in children if c.cmdline()[-1] == "store-worker"]
        return ([w.memory_info().rss / 2**20 for w in workers],
                stores[0].memory_info().rss / 2**20 if stores else None)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT, help="checkout to measure")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="write the checkout's bytecode first, as the image")  # fmt: skip
    parser.add_argument("--store-worker", choices=("inline", "external"), default="inline",
                        help="SKYROUTE_STORE_WORKER of the measured worker")  # fmt: skip
    parser.add_argument("--workers", type=int, default=0,
                        help="also start `serve --workers N`: each process's idle RSS")  # fmt: skip
    args = parser.parse_args()
    src = args.src.resolve()
    if args.compile:
        packages = [str(src / p) for p in PACKAGES if (src / p).is_dir()]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    help_s = help_wall_s(src, args.runs)
    modules, store_modules, heavy = serve_modules(src)
    with (
        redis_url_or_embedded(os.environ.get("SKYROUTE_REDIS_URL")) as url,
        tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp,
    ):
        STORE_ENV["SKYROUTE_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp}/store.db"
        serve_ready(src, url)  # migrates the run's store: every measured start finds it so
        runs = (serve_ready(src, url, args.store_worker) for _ in range(args.runs))
        readies, cpus, stores, rsses = zip(*runs, strict=True)
        if args.workers:
            every = [workers_rss(src, url, args.workers) for _ in range(args.runs)]
    print(f"source                     {src}")
    print(f"skyroute --help            {help_s * 1000:8.0f} ms (median of {args.runs})")
    print(f"serve: modules imported    {modules:8d} (heavy: {heavy}; "
          f"+{store_modules} once the store opens)")  # fmt: skip
    print(
        f"serve: start to ready      {statistics.median(readies) * 1000:8.0f} ms (median; "
        f"min {min(readies) * 1000:.0f}, max {max(readies) * 1000:.0f}; target <= 700)"
    )
    print(
        f"serve: CPU until ready     {statistics.median(cpus) * 1000:8.0f} ms (median; "
        f"min {min(cpus) * 1000:.0f}, max {max(cpus) * 1000:.0f})"
    )
    print(f"serve: store open after    {statistics.median(stores) * 1000:8.0f} ms past ready "
          "(median)")  # fmt: skip
    print(f"bytecode caches            {'compiled first' if args.compile else 'as found'}")
    print(f"serve: idle RSS            {statistics.median(rsses):8.1f} MB (median; store "
          f"worker {args.store_worker}; target <= 90)")  # fmt: skip
    if args.workers:
        per_worker = [rss for workers, _ in every for rss in workers]
        store_rss = [rss for _, rss in every if rss is not None]
        store = f"its store worker {statistics.median(store_rss):.1f} MB" if store_rss else "none"
        print(f"serve --workers {args.workers}: idle RSS a worker "
              f"{statistics.median(per_worker):.1f} MB (median of {len(per_worker)}; min "
              f"{min(per_worker):.1f}, max {max(per_worker):.1f}); {store}")  # fmt: skip


if __name__ == "__main__":
    main()
