"""Request traces as arrays, from CSV or JSON lines.

A trace needs, per request, an arrival time, a prompt length and an output length in
tokens. Each is found by its column (CSV header) or key (JSONL) under any of the names
the public traces use (``COLUMNS``, matched ignoring case, spaces and underscores):
Azure/AzurePublicDataset's ``TIMESTAMP,ContextTokens,GeneratedTokens`` (2023 and the
2024 week-long traces, lines starting with ``#`` are comments), Mooncake's and Alibaba's
JSONL ``timestamp, input_length, output_length``, BurstGPT's ``Timestamp, Request tokens,
Response tokens``, and the OpenAI usage names ``prompt_tokens, completion_tokens``.
Timestamps are numbers (seconds or milliseconds) or ISO date-times, with or without a
UTC offset (``2024-05-10 00:00:00.009930+00:00``; rows with different offsets, as
across a change of daylight-saving time, are put on one clock).
Arrivals are made relative to the first request and sorted (stable).

The unit of numeric timestamps is taken from the caller (``time_unit`` "s" or "ms") or,
with "auto", detected (``detect_unit``) and recorded on the trace, so that a command can
say which unit it used: the Mooncake traces count milliseconds, and reading them as
seconds made a 17-minute trace last 11 days without a word.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from base.types import FloatArray, IntArray
from simulator.errors import SimulationError

TimeUnit = Literal["auto", "s", "ms"]
TIME_UNITS: tuple[str, ...] = ("auto", "s", "ms")
# Above this, a numeric timestamp is an epoch in ms: as seconds it would be after the
# year 5000. From 1e8 (1973 in seconds) it is an epoch in seconds (in ms: 1970's 2nd day).
_EPOCH_MS = 1e11
_EPOCH_S = 1e8
# Relative integer timestamps are ms when their median gap read as seconds is this long:
# one request in 10 s or slower is no load worth replaying, while a ms trace at ≤ 100
# requests/s has a median gap of ≥ 10 (ms).
_MS_MEDIAN_GAP = 10.0
# Accepted names of each field, normalised (lowercase, letters and digits only).
COLUMNS: dict[str, tuple[str, ...]] = {
    "timestamp": ("timestamp", "time", "arrivaltime", "arrivaltimestamp", "ts"),
    "prompt": ("contexttokens", "inputlength", "requesttokens", "prompttokens",
               "inputtokens", "numprompttokens", "promptlength", "inputlen"),
    "output": ("generatedtokens", "outputlength", "responsetokens", "completiontokens",
               "outputtokens", "numoutputtokens", "outputlen", "responselength"),
}  # fmt: skip
# A UTC offset (or Z) at the end of a date-time.
_OFFSET = re.compile(r"(?:Z|([+-])(\d{2}):?(\d{2}))$")


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests sorted by arrival: ``arrival_s`` (s from the first), token counts per request."""

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    source: str = ""
    time_unit: str = "s"  # what the source's timestamps were read as: s, ms or date-time
    time_unit_note: str = ""  # why (given, or the heuristic's evidence)

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
        return replace(self, arrival_s=self.arrival_s / factor)

    def head(self, n: int | None) -> Trace:
        """The first ``n`` requests (all when ``n`` is None)."""
        if n is None:
            return self
        return replace(
            self,
            arrival_s=self.arrival_s[:n],
            prompt_tokens=self.prompt_tokens[:n],
            output_tokens=self.output_tokens[:n],
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


def detect_unit(stamps: FloatArray) -> tuple[str, str]:
    """The unit of numeric timestamps, "s" or "ms", and the evidence, by this heuristic:

    1. an epoch: a first stamp >= 1e11 is ms (as seconds it would be past the year
       5000), one >= 1e8 is seconds;
    2. relative stamps are ms when they are all whole numbers and their median positive
       gap is >= 10 (as seconds: one request per 10 s or slower, no load worth
       replaying; as ms: up to 100 requests/s);
    3. anything else is seconds.
    """
    if len(stamps) == 0:
        return "s", "no timestamps"
    first = float(np.min(stamps))
    if first >= _EPOCH_MS:
        return "ms", f"epoch {first:.0f} is past the year 5000 in seconds"
    if first >= _EPOCH_S:
        return "s", f"epoch {first:.0f} in seconds"
    gaps = np.diff(np.sort(stamps))
    gaps = gaps[gaps > 0]
    median = float(np.median(gaps)) if len(gaps) else 0.0
    whole = bool(np.all(stamps == np.round(stamps)))
    if whole and median >= _MS_MEDIAN_GAP:
        return "ms", f"whole numbers, median gap {median:g}: as s, 1 request per {median:g} s"
    return "s", f"median gap {median:g}" + ("" if whole else ", fractional values")


class _Stamps(NamedTuple):
    """Timestamps as seconds, the unit they were read in, and why."""

    seconds: FloatArray
    unit: str
    note: str


def _seconds(stamps: list[str], source: str, unit: TimeUnit) -> _Stamps:
    """Parse timestamps: numbers in ``unit`` (detected if "auto"), or ISO date-times."""
    try:
        raw = np.asarray([float(s) for s in stamps], dtype=np.float64)
    except ValueError:
        raw = None
    if raw is not None:
        found, note = detect_unit(raw) if unit == "auto" else (unit, "given")
        return _Stamps(raw / 1000.0 if found == "ms" else raw, found, note)
    local, offset_min = _split_offsets(stamps)
    try:
        parsed = np.asarray(local, dtype="datetime64[ns]")
    except ValueError as exc:
        raise SimulationError(f"{source}: unreadable timestamp ({exc})") from exc
    ns = (parsed - parsed.min()).astype(np.int64) - offset_min * 60_000_000_000
    ns -= ns.min()
    return _Stamps(np.asarray(ns, dtype=np.float64) / 1e9, "date-time", "ISO date-times")


def _split_offsets(stamps: list[str]) -> tuple[list[str], IntArray]:
    """Date-times without their UTC offsets, and each offset in minutes (0 for none or
    ``Z``): numpy reads no offsets, and the local times alone would put rows from either
    side of a daylight-saving change an hour apart."""
    local: list[str] = []
    minutes = np.zeros(len(stamps), dtype=np.int64)
    for i, raw in enumerate(stamps):
        text = raw.strip()
        m = _OFFSET.search(text) if ("T" in text or " " in text) else None
        if m is not None:
            text = text[: m.start()]
            if m.group(1):
                sign = -1 if m.group(1) == "-" else 1
                minutes[i] = sign * (int(m.group(2)) * 60 + int(m.group(3)))
        local.append(text)
    return local, minutes


def _resolve(names: Sequence[str], source: str) -> dict[str, str]:
    """Which of ``names`` (a CSV header, a JSON object's keys) holds each field; raises
    SimulationError naming what is missing and what would do."""
    by_norm = {re.sub(r"[^a-z0-9]", "", n.lower()): n for n in names}
    found: dict[str, str] = {}
    for field_name, aliases in COLUMNS.items():
        hit = next((by_norm[a] for a in aliases if a in by_norm), None)
        if hit is not None:
            found[field_name] = hit
    missing = [f for f in COLUMNS if f not in found]
    if missing:
        accepted = "; ".join(f"{f}: one of {', '.join(COLUMNS[f])}" for f in missing)
        raise SimulationError(f"{source}: need columns for {accepted}; got {list(names)}")
    return found


def _build(stamps: _Stamps, prompt: list[int], output: list[int], source: str) -> Trace:
    trace = from_columns(stamps.seconds, prompt, output, source)
    return replace(trace, time_unit=stamps.unit, time_unit_note=stamps.note)


def read_csv(path: Path, time_unit: TimeUnit = "auto", max_rows: int | None = None) -> Trace:
    """Read a CSV trace (columns found by ``COLUMNS``; numeric timestamps in
    ``time_unit``; lines starting with ``#`` are comments), at most ``max_rows`` requests
    of it. Raises SimulationError."""
    with path.open(newline="") as f:
        reader = csv.reader(line for line in f if not line.startswith("#"))
        header = next(reader, None)
        if header is None:
            raise SimulationError(f"{path}: the trace has no requests")
        names = [h.strip() for h in header]
        where = {k: names.index(v) for k, v in _resolve(names, str(path)).items()}
        rows = list(islice((r for r in reader if r), max_rows))
    try:
        prompt = [int(float(r[where["prompt"]])) for r in rows]
        output = [int(float(r[where["output"]])) for r in rows]
        stamps = [r[where["timestamp"]] for r in rows]
    except (TypeError, ValueError, IndexError) as exc:
        raise SimulationError(f"{path}: bad row ({exc})") from exc
    return _build(_seconds(stamps, str(path), time_unit), prompt, output, str(path))


def read_jsonl(path: Path, time_unit: TimeUnit = "auto", max_rows: int | None = None) -> Trace:
    """Read JSON lines, one request each (keys found by ``COLUMNS``; numeric timestamps
    in ``time_unit``, or ISO), at most ``max_rows`` of them. Raises SimulationError
    naming the bad line."""
    stamps: list[str] = []
    prompt: list[int] = []
    output: list[int] = []
    keys: Mapping[str, str] | None = None
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if max_rows is not None and len(stamps) >= max_rows:
                break
            try:
                obj = json.loads(line)
                if keys is None:
                    keys = _resolve(list(obj), f"{path}:{n}")
                stamps.append(str(obj[keys["timestamp"]]))
                prompt.append(int(obj[keys["prompt"]]))
                output.append(int(obj[keys["output"]]))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SimulationError(f"{path}:{n}: bad trace line ({exc!r})") from exc
    return _build(_seconds(stamps, str(path), time_unit), prompt, output, str(path))


def read_trace(
    path: str | Path, time_unit: TimeUnit = "auto", max_rows: int | None = None
) -> Trace:
    """Read a trace; ``.jsonl``/``.json`` is JSON lines, anything else CSV. ``max_rows``
    stops reading after that many requests (the public traces are in time order, so a
    week-long trace need not be read whole to replay its first hour).
    ``time_unit``: the unit of numeric timestamps, "s", "ms" or "auto" (detected, see
    ``detect_unit``); the trace records the unit used. Raises SimulationError."""
    p = Path(path)
    if not p.is_file():
        raise SimulationError(f"trace {p} not found")
    if p.suffix in {".jsonl", ".json"}:
        return read_jsonl(p, time_unit, max_rows)
    return read_csv(p, time_unit, max_rows)
