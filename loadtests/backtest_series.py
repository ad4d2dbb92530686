"""The back-test's demand series: reading one, and the synthetic variants of it.

A series is ``window_start_s,total_rate_rps`` (the format of
../shared/data/load/servegen_m-large_aggregate_rate.csv; other names and window lengths
are read too, see ``read_series``): request rate (req/s) per 600 s window. What the
autoscaler sees and what it must serve are kept apart:

- ``observed``: the series as telemetry shows it. A window where no client reported
  is 0 there (as in ServeGen), as is a window absent from the file; telling such a gap
  from idle demand is the autoscaler's job (``autoscaler.gaps``), not the loader's.
- ``truth``: the demand to serve, NaN where it is unknown. For a file, that is where
  ``autoscaler.gaps`` calls a zero missing; for a synthetic gap, the original value.

Variants (``variants``) are built from one series with a fixed seed, so every run and
every reader sees the same ones.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoscaler.gaps import missing_windows
from base.types import FloatArray

WINDOW_S = 600.0
DEFAULT_SERIES = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "load"
    / "servegen_m-large_aggregate_rate.csv"
)  # fmt: skip
VARIANT_SEED = 21
NOISE_SIGMA = 0.15  # log-normal: the series' own window noise is ~0.13 (log units)
GAP_RUNS_PER_DAY = 6 / 7  # runs of 1-15 missing windows (10 min - 2.5 h), ~5 % of them
SHIFT_FACTOR = 2.0


class SeriesError(ValueError):
    """A series file that cannot be read (with the path and the reason)."""


@dataclass(frozen=True, eq=False)
class Series:
    """One demand series, per 600 s window: ``observed`` (req/s as telemetry shows
    it, >= 0) and ``truth`` (req/s to serve, NaN: unknown). ``scale`` is the ratio to
    the series it was built from (the fleet's maximum grows with it above 1)."""

    name: str
    observed: FloatArray
    truth: FloatArray
    scale: float = 1.0
    note: str = ""

    @property
    def days(self) -> float:
        return len(self.observed) * WINDOW_S / 86_400


# Accepted column names (normalised: lowercase, letters and digits only).
_TIME_COLUMNS = ("windowstarts", "windowstart", "starts", "timestamp", "time", "ts")
_RATE_COLUMNS = ("totalraterps", "raterps", "rate", "rps", "requestspers")


def _column(header: list[str], names: tuple[str, ...], path: Path) -> str:
    by_norm = {"".join(c for c in h.lower() if c.isalnum()): h for h in header}
    hit = next((by_norm[n] for n in names if n in by_norm), None)
    if hit is None:
        raise SeriesError(f"{path}: no column named like {names[0]} among {header}")
    return hit


def read_series(path: Path = DEFAULT_SERIES) -> Series:
    """Read a request-rate series: a window start (s) and a rate (req/s) per row,
    ``window_start_s,total_rate_rps`` as in ServeGen's aggregate (other names:
    ``_TIME_COLUMNS``, ``_RATE_COLUMNS``; lines starting with ``#`` are comments).
    Windows of another regular length are put on the back-test's 600 s grid: shorter
    ones averaged (a 600 s window missing from the file, or with none of its windows
    recorded, is 0), longer ones repeated. A window absent from the file is read as 0
    (nobody reported). Raises SeriesError."""
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(line for line in f if not line.startswith("#"))
            header = list(reader.fieldnames or ())
            t_col = _column(header, _TIME_COLUMNS, path)
            r_col = _column(header, _RATE_COLUMNS, path)
            rows = list(reader)
        starts = np.asarray([float(r[t_col]) for r in rows])
        rates = np.asarray([float(r[r_col]) for r in rows])
    except SeriesError:
        raise
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise SeriesError(f"{path}: not a window start, rate series ({exc!r})") from exc
    if len(starts) == 0:
        raise SeriesError(f"{path}: no windows")
    order = np.argsort(starts, kind="stable")
    starts, rates = starts[order] - starts.min(), np.clip(np.nan_to_num(rates[order]), 0.0, None)
    steps = np.diff(np.unique(starts))
    window = float(steps.min()) if len(steps) else WINDOW_S
    index = np.round(starts / window).astype(np.intp)
    if window <= 0 or not np.allclose(starts, index * window):
        raise SeriesError(f"{path}: window starts are not on a regular grid")
    grid = np.zeros(int(index.max()) + 1)
    grid[index] = rates
    observed = _on_600s(grid, window, path)
    gaps = missing_windows(observed * WINDOW_S, WINDOW_S)
    truth = np.where(gaps, np.nan, observed)
    note = f"{int(gaps.sum())} windows missing"
    if window != WINDOW_S:
        note += f"; {window:g} s windows put on {WINDOW_S:g} s"
    return Series(path.stem, observed, truth, note=note)


def _on_600s(rates: FloatArray, window_s: float, path: Path) -> FloatArray:
    """Rates per ``window_s`` window as rates per 600 s window."""
    if window_s == WINDOW_S:
        return rates
    ratio = WINDOW_S / window_s
    if window_s < WINDOW_S and abs(ratio - round(ratio)) < 1e-9:
        k = round(ratio)
        padded = np.concatenate([rates, np.zeros(-len(rates) % k)])
        return np.asarray(padded.reshape(-1, k).mean(axis=1), dtype=np.float64)
    if window_s > WINDOW_S and abs(1 / ratio - round(1 / ratio)) < 1e-9:
        return np.repeat(rates, round(1 / ratio))
    raise SeriesError(f"{path}: {window_s:g} s windows do not divide into {WINDOW_S:g} s ones")


def variants(base: Series, seed: int = VARIANT_SEED) -> list[Series]:
    """``base`` and its synthetic variants: gaps, x0.1, x10, a level shift x2 from
    the first day of the second half (day 8 of 14), and more noise."""
    rng = np.random.default_rng(seed)
    n = len(base.observed)
    gapped = base.observed.copy()
    free = np.ones(n, dtype=np.bool_)
    runs = max(round(GAP_RUNS_PER_DAY * base.days), 1)
    for _ in range(runs):
        length = int(rng.integers(1, 16))
        at = int(rng.choice(np.flatnonzero(free[: n - length])))
        gapped[at : at + length] = 0.0  # as ServeGen writes a window nobody reported
        free[max(at - 1, 0) : at + length + 1] = False  # runs do not touch
    missing = int((gapped != base.observed).sum())
    day = round(86_400 / WINDOW_S)
    shift_from = (n // day + 1) // 2 * day
    step = np.where(np.arange(n) >= shift_from, SHIFT_FACTOR, 1.0)
    noise = np.exp(NOISE_SIGMA * rng.standard_normal(n))

    def scaled(name: str, factor: FloatArray | float, note: str) -> Series:
        return Series(name, base.observed * factor, base.truth * factor, base.scale, note)

    return [
        replace(base, name="original"),
        Series("gaps", gapped, base.truth, base.scale,
               f"{runs} runs, {missing} windows reported as 0"),
        replace(scaled("x0.1 scale", 0.1, "rate x0.1"), scale=0.1 * base.scale),
        replace(scaled("x10 scale", 10.0, "rate x10"), scale=10.0 * base.scale),
        scaled("level shift", step, f"x{SHIFT_FACTOR:g} from day {shift_from // day + 1}"),
        scaled("noisier", noise, f"x log-normal noise, sigma {NOISE_SIGMA:g}"),
    ]  # fmt: skip


def wape(forecast: FloatArray, actual: FloatArray) -> float:
    """Weighted absolute percentage error, %: sum |forecast - actual| / sum actual over
    the windows where both are known (finite). Scale-free and finite with zeros (NaN
    only if nothing is known or every actual is 0)."""
    ok = np.isfinite(forecast) & np.isfinite(actual)
    total = float(np.abs(actual[ok]).sum())
    return 100.0 * float(np.abs(forecast[ok] - actual[ok]).sum()) / total if total else np.nan


def mase(forecast: FloatArray, actual: FloatArray, series: FloatArray) -> float:
    """Mean absolute scaled error: mean |forecast - actual| over the known windows,
    over the mean absolute one-window change of ``series`` (its known neighbours). < 1
    beats the last value; finite with zeros."""
    ok = np.isfinite(forecast) & np.isfinite(actual)
    change = np.abs(np.diff(series))
    change = change[np.isfinite(change)]
    scale = float(change.mean()) if len(change) else 0.0
    return float(np.abs(forecast[ok] - actual[ok]).mean()) / scale if scale and ok.any() else np.nan
