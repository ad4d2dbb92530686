"""What one usage record costs the store's ledger writer, in microseconds of CPU a row.

    python loadtests/bench_ledger.py [--batches 8,64,500] [--writes 100] [--url URL]

Writes batches of ledger rows (the fields the gateway's usage records carry; a new
idempotency id each, ordered as a gateway's per-process counter makes them) through
``store.ledger.Ledger.write``, each batch one transaction as the usage consumer commits
it, and prints per row: the process's CPU (the event loop's thread plus the driver's:
aiosqlite runs SQLite on a thread of its own), the event loop's thread alone, and the
wall time. Small batches are what a light load gives the consumer (it commits once a
second), so there the per-transaction cost dominates; large ones are a busy gateway's.
``--url``: a migrated database to write to (default: a new SQLite file in a temporary
directory, removed after). Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from store.migrate import migrate  # noqa: E402 - after the path set-up above
from store.records import LedgerRow  # noqa: E402
from store.store import Store  # noqa: E402

_WARM_UP = 5


def _rows(n: int, first: int, t0_ms: int) -> list[LedgerRow]:
    return [
        LedgerRow(
            idempotency_id=f"u/bench{os.getpid():x}-{first + i}",
            request_id=f"chatcmpl-{first + i:032x}",
            tenant="acme",
            model="llama-3.1-70b",
            pool="aws:us-east-1:h100-llama70b",
            provider="aws",
            region="us-east-1",
            prompt_tokens=1155,
            completion_tokens=211,
            cost_nusd=123_456,
            status="ok",
            ts_ms=t0_ms + i,
        )
        for i in range(n)
    ]


async def _measure(store: Store, batch: int, writes: int, first: int) -> tuple[float, ...]:
    t0_ms = int(time.time() * 1000)
    batches = [_rows(batch, first + k * batch, t0_ms + k * 1000) for k in range(writes + _WARM_UP)]
    for rows in batches[:_WARM_UP]:
        await store.ledger.write(rows)
    cpu0, loop0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    for rows in batches[_WARM_UP:]:
        await store.ledger.write(rows)
    n = writes * batch
    return (
        (time.process_time() - cpu0) / n * 1e6,
        (time.thread_time() - loop0) / n * 1e6,
        (time.perf_counter() - wall0) / n * 1e6,
    )


async def _run(url: str, sizes: list[int], writes: int) -> None:
    await migrate(url)
    store = Store.open(url)
    try:
        first = 0
        for batch in sizes:
            cpu, loop, wall = await _measure(store, batch, writes, first)
            first += (writes + _WARM_UP) * batch
            print(
                f"batch {batch:5d} rows: process CPU {cpu:7.1f} us/row, "
                f"event loop thread {loop:7.1f} us/row, wall {wall:7.1f} us/row"
            )
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="8,64,500", help="rows per transaction")
    parser.add_argument("--writes", type=int, default=100, help="transactions per size")
    parser.add_argument("--url", help="a database URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.batches.split(",")]
    if args.url:
        asyncio.run(_run(args.url, sizes, args.writes))
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(f"sqlite+aiosqlite:///{tmp}/ledger.db", sizes, args.writes))


if __name__ == "__main__":
    main()
