"""Replica choice benchmark: microseconds per choice inside a pool of 64 replicas. Prints
numbers only (no assertion: timings are measured, never tested).

    python loadtests/bench_replica_choice.py [--replicas 64] [--requests 20000] [--seed 1]

One ``ReplicaChooser`` on one pool, its prefix index first warmed with ``--requests``
requests, then each scenario timed call by call with ``time.perf_counter_ns``:

- ``least_wait``: prefix affinity off, no session (the default choice);
- ``prefix_hit``: affinity on, a prompt whose leading blocks the index holds;
- ``prefix_new``: affinity on, a prompt nobody served yet (rendezvous hashing);
- ``session``: a known ``x-session-id``;
- ``hash_prompt``: ``prompt_block_hashes`` of the prompt (2-9k characters; done once
  per request, before the choice);
- ``record``: teaching the index the choice (after the choice, off the decision).

Between calls the in-flight array changes in place (the chosen replica +1, a random one
-1), as the gateway's counters do, so the bounded-load rule sees moving loads.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

from router.prefix_index import prompt_block_hashes
from router.replica_choice import (
    PoolTiming,
    ReplicaChoice,
    ReplicaChooser,
    ReplicaRequest,
    ReplicaTable,
)

# An H100 running Llama 3.1 8B (simengine's h100-llama-3.1-8b profile).
TIMING = PoolTiming(
    slots=256,
    prefill_ms_per_token=0.04,
    tpot_base_ms=7.0,
    tpot_full_ms=28.0,
    mean_output_tokens=200,
)


def _prompts(rng: random.Random, count: int, systems: list[str]) -> list[str]:
    """Prompts of a shared system prompt, a per-conversation history and a question."""
    words = ["alpha", "beta", "gamma", "delta", "kv", "cache", "route", "token", "pool"]
    out = []
    for i in range(count):
        history = " ".join(rng.choice(words) for _ in range(rng.randrange(100, 1200)))
        out.append(f"{rng.choice(systems)}\n[conv {i % 3000}] {history}\nQ{i}?")
    return out


def _time(
    calls: int, fn: Callable[[int], object], after: Callable[[object], None] | None = None
) -> list[float]:
    """Microseconds of each ``fn(i)``; ``after`` gets its result, outside the timing."""
    out = []
    clock = time.perf_counter_ns
    for i in range(calls):
        start = clock()
        result = fn(i)
        out.append((clock() - start) / 1000.0)
        if after is not None:
            after(result)
    return out


def _row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{name:<12} {p50:>8.1f} {p99:>8.1f} {statistics.fmean(samples):>8.1f} {len(samples):>7}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20_000, help="warm-up and timed calls")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nrng = np.random.default_rng(args.seed)
    n = args.replicas
    ids = tuple(f"10.1.{i // 250}.{i % 250}:8000" for i in range(n))
    inflight = nrng.integers(5, 30, size=n).astype(np.float64)
    engine_queue = inflight + nrng.integers(0, 5, size=n)
    table = ReplicaTable.build(ids, inflight, engine_queue)
    systems = [f"System prompt {k}: " + "be helpful and precise. " * 60 for k in range(50)]
    prompts = _prompts(rng, args.requests, systems)
    requests = [
        ReplicaRequest(len(p) // 4, prompt_block_hashes(p), f"session-{i % 3000}")
        for i, p in enumerate(prompts)
    ]
    chooser = ReplicaChooser()

    def churn(at: int) -> None:
        table.inflight[at] += 1.0
        other = rng.randrange(n)
        if table.inflight[other] > 0:
            table.inflight[other] -= 1.0

    for req in requests:  # warm the index and the session map
        churn(chooser.pick(req, table, TIMING, prefix_affinity=True).index)
    # Prompts no replica served: their system prompts are new.
    unseen = [f"Unseen system prompt {k}: " + "answer briefly. " * 80 for k in range(500)]
    fresh = [
        ReplicaRequest(len(p) // 4, prompt_block_hashes(p))
        for p in _prompts(random.Random(args.seed + 1), args.requests, unseen)
    ]
    no_session = [ReplicaRequest(r.prompt_tokens, r.block_hashes) for r in requests]
    plain = ReplicaRequest(1500)
    gc.collect()
    gc.freeze()

    def timed(name: str, fn: Callable[[int], object], moves: bool = True) -> str:
        def after(choice: object) -> None:
            assert isinstance(choice, ReplicaChoice)
            churn(choice.index)

        return _row(name, _time(len(requests), fn, after if moves else None))

    rows = [
        timed("least_wait", lambda i: chooser.choose(plain, table, TIMING, prefix_affinity=False)),
        timed("prefix_hit", lambda i: chooser.choose(
            no_session[i], table, TIMING, prefix_affinity=True)),
        timed("prefix_new", lambda i: chooser.choose(
            fresh[i], table, TIMING, prefix_affinity=True)),
        timed("session", lambda i: chooser.choose(
            requests[i], table, TIMING, prefix_affinity=False)),
        timed("hash_prompt", lambda i: prompt_block_hashes(prompts[i]), moves=False),
        timed("record", lambda i: chooser.record(
            no_session[i], ids[i % n], prefix_affinity=True), moves=False),
    ]  # fmt: skip
    reasons: dict[str, int] = {}
    for req in no_session[:2000]:
        reason = chooser.choose(req, table, TIMING, prefix_affinity=True).reason
        reasons[reason] = reasons.get(reason, 0) + 1
    blocks = statistics.fmean(len(r.block_hashes) for r in requests)
    print(f"replica choice, {n} replicas, {len(requests)} calls per row, "
          f"{blocks:.0f} blocks per prompt, index {len(chooser.index)} hashes")  # fmt: skip
    print(f"{'scenario':<12} {'p50 µs':>8} {'p99 µs':>8} {'mean µs':>8} {'calls':>7}")
    for row in rows:
        print(row)
    print("prefix_hit reasons:", ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))


if __name__ == "__main__":
    main()
