"""Traces whose requests name their prompt's blocks: the Mooncake JSONL format.

One JSON object per line: ``timestamp`` (ms in the Mooncake traces; the unit is
detected as for every trace, ``simulator.trace.detect_unit``), ``input_length``,
``output_length`` and ``hash_ids``: the ids of the prompt's blocks of ``block_tokens``
(512) tokens, in order. An id stands for the block and everything before it (two
prompts share their first k ids exactly when they share their first k blocks), as the
chained block hashes of vLLM's prefix cache and of the gateway's prefix index do; so
the ids feed both the replica choice (``ReplicaRequest.block_hashes``) and the
simulated replicas' prefix caches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from base.types import FloatArray, IntArray
from simulator.errors import SimulationError
from simulator.trace import TimeUnit, Trace, detect_unit, from_columns

__all__ = ["MOONCAKE_BLOCK_TOKENS", "PrefixTrace", "read_prefix_jsonl"]

# Tokens per hash id in the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, eq=False)
class PrefixTrace:
    """A trace (sorted by arrival) and each request's prompt block ids, in the same order."""

    trace: Trace
    blocks: tuple[tuple[int, ...], ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __len__(self) -> int:
        return len(self.trace)

    @property
    def arrival_s(self) -> FloatArray:
        """Arrivals, s from the first."""
        return self.trace.arrival_s

    @property
    def prompt_tokens(self) -> IntArray:
        """Prompt tokens per request."""
        return self.trace.prompt_tokens

    @property
    def output_tokens(self) -> IntArray:
        """Output tokens per request."""
        return self.trace.output_tokens

    def head(self, n: int) -> PrefixTrace:
        """The first ``n`` requests."""
        return PrefixTrace(self.trace.head(n), self.blocks[:n], self.block_tokens)

    def sped_up(self, factor: float) -> PrefixTrace:
        """Arrivals ``factor`` times denser; the same requests."""
        return PrefixTrace(self.trace.sped_up(factor), self.blocks, self.block_tokens)


def read_prefix_jsonl(
    path: str | Path,
    time_unit: TimeUnit = "auto",
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> PrefixTrace:
    """Read a Mooncake-format JSONL trace. Raises SimulationError (missing file, a line
    without one of the four fields, non-integer block ids)."""
    p = Path(path)
    if not p.is_file():
        raise SimulationError(f"trace {p} not found")
    stamps: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    blocks: list[tuple[int, ...]] = []
    with p.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                stamps.append(float(obj["timestamp"]))
                prompt.append(int(obj["input_length"]))
                output.append(int(obj["output_length"]))
                ids = obj["hash_ids"]
                if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                    raise TypeError("hash_ids must be a list of integers")
                blocks.append(tuple(ids))
            except (ValueError, KeyError, TypeError) as exc:
                raise SimulationError(f"{p}:{n}: bad trace line ({exc!r})") from exc
    raw = np.asarray(stamps, dtype=np.float64)
    unit, note = detect_unit(raw) if time_unit == "auto" else (time_unit, "given")
    seconds = raw / 1000.0 if unit == "ms" else raw
    trace = from_columns(seconds, prompt, output, str(p))
    # from_columns sorts stably by time; the block ids follow the same order.
    order = np.argsort(seconds, kind="stable")
    sorted_blocks = tuple(blocks[i] for i in order)
    trace = Trace(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, str(p), unit, note)
    return PrefixTrace(trace, sorted_blocks, block_tokens)
