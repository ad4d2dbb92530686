"""The command line of ``bench_peers.py``: its options, their defaults, and the run's
configuration as written into the JSON."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import psutil

from loadtests.bench_load import MAX_TOKENS, PROFILE
from loadtests.bench_procs import cpu_list, parse_ports
from loadtests.peer_litellm import LITELLM_VERSION
from loadtests.peer_portkey import PORTKEY_VERSION

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("bare", "bare-asgi", "portkey", "litellm")
PORT_NAMES = {"engine", "redis", "skyroute", *PEERS}


def parse_args(description: str) -> argparse.Namespace:
    """Parse ``sys.argv``; exits with a usage message on a bad option."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="short run (CI smoke)")
    parser.add_argument("--peers", type=lambda s: [x for x in s.split(",") if x],
                        default=list(PEERS),
                        help=f"comma-separated, of {','.join(PEERS)} (default all)")  # fmt: skip
    parser.add_argument("--skip-litellm", action="store_true", help="leave LiteLLM out")
    parser.add_argument("--litellm-version", default=LITELLM_VERSION)
    parser.add_argument("--litellm-venv", type=Path, default=ROOT / ".bench-venvs" / "litellm")
    parser.add_argument("--portkey-version", default=PORTKEY_VERSION)
    parser.add_argument("--portkey-dir", type=Path, default=ROOT / ".bench-venvs" / "portkey")
    parser.add_argument("--concurrency", type=cpu_list,
                        help="comma-separated (default 8,32,128; quick 8)")  # fmt: skip
    parser.add_argument("--duration", type=float, help="seconds per phase (4; quick 1.5)")
    names = ",".join(sorted(PORT_NAMES))
    parser.add_argument("--ports", default="", help=f"name=port,... of {names}; others free")
    parser.add_argument("--skyroute-workers", type=int, default=1)
    parser.add_argument("--skyroute-store-worker", choices=("inline", "external"),
                        default="inline",
                        help="external: the ledger writer and Redis refill run in a "
                        "`skyroute store-worker` process, pinned with the gateway; its CPU "
                        "per request is printed apart")  # fmt: skip
    parser.add_argument("--skyroute-database-url", default="",
                        help="skyroute's store (e.g. postgresql+asyncpg://127.0.0.1/test); "
                        "default a SQLite file of the run's own")  # fmt: skip
    parser.add_argument("--skyroute-log-level", default="INFO",
                        help="INFO: every feature on, the access log included")  # fmt: skip
    parser.add_argument("--json", type=Path, default=ROOT / "artifacts" / "bench_peers.json")
    parser.add_argument(
        "--pin", action=argparse.BooleanOptionalAction, default=False,
        help="pin every thread: gateways and Redis on --proxy-cpus, engine and load "
        "generator on --client-cpus; only meaningful on an otherwise idle machine",
    )  # fmt: skip
    cpus = sorted(psutil.Process().cpu_affinity() or [0])
    parser.add_argument("--proxy-cpus", type=cpu_list, default=cpus[:1])
    parser.add_argument("--client-cpus", type=cpu_list, default=cpus[1:] or cpus[:1])
    parser.add_argument("--src", type=Path, default=ROOT,
                        help="skyroute tree to run, e.g. a `git archive` export")  # fmt: skip
    args = parser.parse_args()
    unknown = set(args.peers) - set(PEERS)
    if unknown:
        parser.error(f"--peers: unknown {sorted(unknown)}")
    if args.skip_litellm and "litellm" in args.peers:
        args.peers.remove("litellm")
    try:
        args.ports = parse_ports(args.ports, PORT_NAMES)
    except ValueError as exc:
        parser.error(str(exc))
    args.concurrency = args.concurrency or ([8] if args.quick else [8, 32, 128])
    args.duration = args.duration or (1.5 if args.quick else 4.0)
    args.warmup = 0.5 if args.quick else 1.0
    return args


def config(args: argparse.Namespace, pinning: dict[str, object] | None) -> dict[str, object]:
    """The run's settings, for the JSON."""
    return {"concurrency": args.concurrency, "duration_s": args.duration,
            "warmup_s": args.warmup, "quick": args.quick, "max_tokens": MAX_TOKENS,
            "peers": args.peers, "skyroute_workers": args.skyroute_workers,
            "skyroute_log_level": args.skyroute_log_level,
            "skyroute_store_worker": args.skyroute_store_worker,
            "skyroute_store": "sqlite" if not args.skyroute_database_url
            else args.skyroute_database_url.split(":", 1)[0],
            "litellm_version": args.litellm_version if "litellm" in args.peers else None,
            "portkey_version": args.portkey_version if "portkey" in args.peers else None,
            "engine_profile": PROFILE, "cpus": os.cpu_count(), "src": str(args.src),
            "pinned": pinning, "ports": args.ports}  # fmt: skip
