"""The back-test's demand series: reading one, and the synthetic variants of it.

A series is ``window_start_s,total_rate_rps`` (the format of
../shared/data/load/servegen_m-large_aggregate_rate.csv): request rate (req/s) per
600 s window. What the autoscaler sees and what it must serve are kept apart:

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


def read_series(path: Path = DEFAULT_SERIES) -> Series:
    """Read ``window_start_s,total_rate_rps`` with 600 s windows (lines starting with
    ``#`` are comments); a window absent from the file is read as 0 (nobody reported).
    Raises SeriesError."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        starts = np.asarray([float(r["window_start_s"]) for r in rows])
        rates = np.asarray([float(r["total_rate_rps"]) for r in rows])
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise SeriesError(f"{path}: not a window_start_s,total_rate_rps series ({exc!r})") from exc
    if len(starts) == 0:
        raise SeriesError(f"{path}: no windows")
    index = np.round((starts - starts.min()) / WINDOW_S).astype(np.intp)
    if not np.allclose(starts - starts.min(), index * WINDOW_S):
        raise SeriesError(f"{path}: window starts are not on a {WINDOW_S:g} s grid")
    observed = np.zeros(int(index.max()) + 1)
    observed[index] = np.clip(np.nan_to_num(rates), 0.0, None)
    gaps = missing_windows(observed * WINDOW_S, WINDOW_S)
    truth = np.where(gaps, np.nan, observed)
    return Series(path.stem, observed, truth, note=f"{int(gaps.sum())} windows missing")


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
