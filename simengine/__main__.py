"""``python -m simengine``: run one simulated inference engine until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from simengine.perf_model import PROFILES
from simengine.server import run_engine


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``--profile`` must name one of ``PROFILES``."""
    parser = argparse.ArgumentParser(
        prog="python -m simengine",
        description="Simulated OpenAI-compatible inference engine (a vLLM stand-in).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="bind port (default: %(default)s)")
    parser.add_argument(
        "--fd",
        type=int,
        default=None,
        help="listen on this inherited, already bound socket instead of --host/--port "
        "(a port its parent reserved: base.ports.reserve_port)",
    )
    parser.add_argument(
        "--profile", required=True, choices=sorted(PROFILES), help="GPU/model latency profile"
    )
    parser.add_argument("--model", required=True, help="served model name, as clients send it")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed (default: %(default)s)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiplier on simulated sleeps; 0 never sleeps (default: 1)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: configure logging and serve until signalled."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    run_engine(args.host, args.port, args.profile, args.model, args.seed, args.time_scale, args.fd)


if __name__ == "__main__":
    main()
