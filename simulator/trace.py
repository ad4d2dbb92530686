"""Request traces as arrays: the Azure LLM inference CSV and a JSONL format.

Azure (Azure/AzurePublicDataset): ``TIMESTAMP,ContextTokens,GeneratedTokens`` with
timestamps like ``2023-11-16 18:15:46.6805900`` (lines starting with ``#`` are comments).
JSONL: one object per line with ``timestamp`` (seconds, or an ISO date-time),
``input_length`` and ``output_length``.
Arrivals are made relative to the first request and sorted (stable).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from base.types import FloatArray, IntArray
from simulator.errors import SimulationError


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests sorted by arrival: ``arrival_s`` (s from the first), token counts per request."""

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    source: str = ""

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        """Last arrival, s (0 for an empty trace)."""
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def sped_up(self, factor: float) -> Trace:
        """The same requests with inter-arrival times divided by ``factor`` (> 0)."""
        if not factor > 0:
            raise SimulationError(f"speedup must be > 0, got {factor}")
        return Trace(self.arrival_s / factor, self.prompt_tokens, self.output_tokens, self.source)

    def head(self, n: int | None) -> Trace:
        """The first ``n`` requests (all when ``n`` is None)."""
        if n is None:
            return self
        return Trace(
            self.arrival_s[:n], self.prompt_tokens[:n], self.output_tokens[:n], self.source
        )

    def before(self, end_s: float) -> Trace:
        """The requests arriving before ``end_s``."""
        return self.head(int(np.searchsorted(self.arrival_s, end_s, side="left")))


def from_columns(
    times: Sequence[float] | FloatArray,
    prompt: Sequence[int] | IntArray,
    output: Sequence[int] | IntArray,
    source: str = "",
) -> Trace:
    """Build a trace from columns (times in s, any origin). Raises SimulationError."""
    t = np.asarray(times, dtype=np.float64)
    p = np.asarray(prompt, dtype=np.int64).astype(np.intp)
    o = np.asarray(output, dtype=np.int64).astype(np.intp)
    if not len(t) == len(p) == len(o):
        raise SimulationError(f"{source}: columns of different lengths")
    if len(t) == 0:
        raise SimulationError(f"{source}: the trace has no requests")
    if not np.isfinite(t).all():
        raise SimulationError(f"{source}: a timestamp is not a finite number")
    if (p < 0).any() or (o < 0).any():
        raise SimulationError(f"{source}: negative token counts")
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order[0]]
    return Trace(t, p[order], o[order], source)


def _seconds(stamps: list[str], source: str) -> FloatArray:
    try:
        return np.asarray([float(s) for s in stamps], dtype=np.float64)
    except ValueError:
        pass
    try:
        parsed = np.asarray([s.strip().replace("Z", "") for s in stamps], dtype="datetime64[ns]")
    except ValueError as exc:
        raise SimulationError(f"{source}: unreadable timestamp ({exc})") from exc
    ns = (parsed - parsed.min()).astype(np.int64)
    return np.asarray(ns, dtype=np.float64) / 1e9


def read_azure_csv(path: Path) -> Trace:
    """Read ``TIMESTAMP,ContextTokens,GeneratedTokens``. Raises SimulationError."""
    with path.open(newline="") as f:
        reader = csv.DictReader(line for line in f if not line.startswith("#"))
        need = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
        if not need <= set(reader.fieldnames or ()):
            raise SimulationError(f"{path}: need columns {sorted(need)}, got {reader.fieldnames}")
        rows = list(reader)
    try:
        prompt = [int(r["ContextTokens"]) for r in rows]
        output = [int(r["GeneratedTokens"]) for r in rows]
    except (TypeError, ValueError) as exc:
        raise SimulationError(f"{path}: bad token count ({exc})") from exc
    return from_columns(
        _seconds([r["TIMESTAMP"] for r in rows], str(path)), prompt, output, str(path)
    )


def read_jsonl(path: Path) -> Trace:
    """Read JSON lines with ``timestamp``, ``input_length``, ``output_length``."""
    stamps: list[str] = []
    prompt: list[int] = []
    output: list[int] = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                stamps.append(str(obj["timestamp"]))
                prompt.append(int(obj["input_length"]))
                output.append(int(obj["output_length"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise SimulationError(f"{path}:{n}: bad trace line ({exc!r})") from exc
    return from_columns(_seconds(stamps, str(path)), prompt, output, str(path))


def read_trace(path: str | Path) -> Trace:
    """Read a trace; ``.jsonl``/``.json`` is JSONL, anything else the Azure CSV."""
    p = Path(path)
    if not p.is_file():
        raise SimulationError(f"trace {p} not found")
    if p.suffix in {".jsonl", ".json"}:
        return read_jsonl(p)
    return read_azure_csv(p)
