"""What one access-log line costs the gateway, in microseconds of one thread's CPU.

    python loadtests/bench_logline.py [--lines 50000]

Builds the access line ``gateway.finish`` writes for every request (the same fields; a
new request id each time, as in production), and times, with ``time.process_time``:
formatting it with ``skyroute.logs.JsonFormatter``, once with the redaction's memory of
clean strings and once with the secret pattern run on every string as before; then the
whole ``logger.info`` call through ``skyroute.logs.configure``'s handler to /dev/null, and
``base.log_fields.log_fields`` (what the gateway calls: the fields handed to that handler
with no ``LogRecord``, written in batches).
A micro-benchmark of one code path on one thread: it does not drift like a whole
gateway's CPU per request does (``bench_ab.py``). Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from base.log_fields import log_fields  # noqa: E402
from skyroute import logs  # noqa: E402


def fields(n: int) -> dict[str, object]:
    """The access line's fields for request ``n``."""
    return {
        "request_id": f"req-{n:012x}", "tenant": "acme", "model": "llama-3.1-70b",
        "slo_class": "interactive", "pool": "aws:us-east-1:h100-llama70b", "provider": "aws",
        "region": "us-east-1", "status": "ok", "attempts": 1, "prompt_tokens": 812,
        "completion_tokens": 129, "cost_usd": 0.000123456, "latency_ms": 12.345,
        "ttft_ms": 3.21,
    }  # fmt: skip


def per_line_us(lines: int, step: Callable[[int], object]) -> float:
    """CPU microseconds per call of ``step`` (best of 3 runs of ``lines`` calls)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for n in range(lines):
            step(n)
        best = min(best, time.process_time() - start)
    return best / lines * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=50_000)
    args = parser.parse_args()

    formatter = logs.JsonFormatter()
    record = logging.LogRecord("skyroute.access", logging.INFO, __file__, 1, "request", None,
                               None)  # fmt: skip

    def format_line(n: int) -> str:
        record.fields = fields(n)  # type: ignore[attr-defined]
        return formatter.format(record)

    remembered = per_line_us(args.lines, format_line)
    memo = logs.redact
    logs.redact = lambda text: logs._SECRET.sub("[REDACTED]", text)  # every string, as before
    try:
        pattern_only = per_line_us(args.lines, format_line)
    finally:
        logs.redact = memo

    with open(os.devnull, "w") as devnull:
        saved = sys.stderr
        sys.stderr = devnull
        try:
            logs.configure("INFO", json=True)
            log = logging.getLogger("skyroute.access")

            def log_line(n: int) -> None:
                log.info("request", extra={"fields": fields(n)})

            whole = per_line_us(args.lines, log_line)

            def fields_line(n: int) -> None:
                log_fields(log, logging.INFO, "request", fields(n))

            async def on_a_loop() -> float:  # as in the gateway: lines batched
                return per_line_us(args.lines, fields_line)

            direct = asyncio.run(on_a_loop())
        finally:
            sys.stderr = saved
    print(f"access line, {args.lines} lines x 3, best run:")
    print(f"  JsonFormatter.format, pattern on every string: {pattern_only:6.2f} us")
    print(f"  JsonFormatter.format, clean strings remembered: {remembered:6.2f} us")
    print(f"  logger.info to /dev/null (record, format, write): {whole:6.2f} us")
    print(f"  log_fields to /dev/null (no record, batched writes): {direct:6.2f} us")


if __name__ == "__main__":
    main()
