"""The back-test's series: reading a file, the synthetic variants, errors that stay finite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadtests.backtest_forecast import forecast_rows
from loadtests.backtest_series import (
    Series,
    SeriesError,
    mase,
    read_series,
    variants,
    wape,
)

DAY = 144  # 600 s windows


def _write(path: Path, starts: list[float], rates: list[float]) -> Path:
    rows = "".join(f"{s:g},{r:f}\n" for s, r in zip(starts, rates, strict=True))
    path.write_text("window_start_s,total_rate_rps\n" + rows)
    return path


def test_a_window_nobody_reported_is_unknown_demand_not_zero(tmp_path: Path) -> None:
    rates = [200.0] * 10
    rates[4] = 0.0  # ServeGen's "no client reported"
    starts = [600.0 * i for i in range(10)]
    del starts[7], rates[7]  # a window absent from the file
    series = read_series(_write(tmp_path / "s.csv", starts, rates))
    assert series.observed.tolist() == [200.0] * 4 + [0.0] + [200.0] * 2 + [0.0] + [200.0] * 2
    assert np.flatnonzero(np.isnan(series.truth)).tolist() == [4, 7]


def test_a_series_off_any_regular_grid_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SeriesError, match="grid"):
        read_series(_write(tmp_path / "s.csv", [0.0, 600.0, 1000.0], [1.0, 2.0, 3.0]))


def test_shorter_windows_are_averaged_onto_600_s_and_longer_ones_repeated(tmp_path: Path) -> None:
    minute = read_series(_write(tmp_path / "m.csv", [60.0 * i for i in range(20)],
                                [1.0] * 10 + [3.0] * 10))  # fmt: skip
    assert minute.observed.tolist() == [1.0, 3.0]
    assert "60 s windows" in minute.note
    hourly = read_series(_write(tmp_path / "h.csv", [0.0, 3600.0], [2.0, 4.0]))
    assert hourly.observed.tolist() == [2.0] * 6 + [4.0] * 6
    with pytest.raises(SeriesError, match="do not divide"):
        read_series(_write(tmp_path / "x.csv", [0.0, 700.0], [1.0, 1.0]))


def test_other_column_names_are_found(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("timestamp,rate\n0,5\n600,7\n")
    assert read_series(path).observed.tolist() == [5.0, 7.0]
    path.write_text("timestamp,requests\n0,5\n")
    with pytest.raises(SeriesError, match="no column named like totalraterps"):
        read_series(path)


def test_the_variants_are_the_series_reshaped_the_same_way_every_time() -> None:
    rng = np.random.default_rng(0)
    rate = 100.0 + 50.0 * rng.random(14 * DAY)
    base = Series("s", rate, rate.copy())
    first, again = variants(base), variants(base)
    by_name = {v.name: v for v in first}
    names = ["original", "gaps", "x0.1 scale", "x10 scale", "level shift", "noisier"]
    assert list(by_name) == names
    for a, b in zip(first, again, strict=True):
        assert np.array_equal(a.observed, b.observed)
    gaps = by_name["gaps"]
    hidden = gaps.observed == 0.0
    assert 0.03 < hidden.mean() < 0.08 and np.array_equal(gaps.truth, rate)  # truth known
    x10 = by_name["x10 scale"]
    assert np.allclose(x10.observed, 10 * rate) and x10.scale == 10
    shifted = by_name["level shift"].observed / rate
    assert np.allclose(shifted[: 7 * DAY], 1.0) and np.allclose(shifted[7 * DAY :], 2.0)
    noise = np.log(by_name["noisier"].observed / rate)
    assert 0.1 < float(noise.std()) < 0.2


def test_another_seed_draws_other_gaps_and_noise_and_the_same_scales_and_shift() -> None:
    rng = np.random.default_rng(0)
    rate = 100.0 + 50.0 * rng.random(14 * DAY)
    base = Series("s", rate, rate.copy())
    usual = {v.name: v for v in variants(base)}
    other = {v.name: v for v in variants(base, seed=7)}
    for name in ("gaps", "noisier"):
        assert not np.array_equal(usual[name].observed, other[name].observed), name
    for name in ("original", "x0.1 scale", "x10 scale", "level shift"):
        assert np.array_equal(usual[name].observed, other[name].observed), name


def test_errors_are_finite_with_zero_and_unknown_windows() -> None:
    actual = np.asarray([0.0, 10.0, np.nan, 20.0, 0.0])
    forecast = np.asarray([1.0, 12.0, 5.0, 18.0, 0.0])
    assert wape(forecast, actual) == pytest.approx(100.0 * 5.0 / 30.0)
    assert np.isfinite(mase(forecast, actual, actual))


def test_the_forecast_table_never_prints_inf_or_nan_on_a_series_with_zeros() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(int(2.2 * DAY))
    rate = 100.0 * (2.0 + np.sin(2 * np.pi * t / DAY)) * np.exp(0.1 * rng.standard_normal(len(t)))
    observed = rate.copy()
    observed[[150, 151, 200, 260]] = 0.0  # nobody reported
    truth = np.where(observed == 0.0, np.nan, observed)
    rows = forecast_rows(observed, truth, 0.99)
    cells = " ".join(" ".join(row) for row in rows)
    assert "inf" not in cells and "nan" not in cells, cells
    assert len(rows) == 10
