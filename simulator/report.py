"""The comparison as a table, a JSON document and PNG plots (matplotlib, Agg, no pyplot)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.bound import Bound
from simulator.compare import Comparison

PLOTS = ("cost_over_time.png", "slo_over_time.png", "utilisation.png", "pareto.png")


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f}"


def _bound_row(cmp: Comparison, b: Bound, label: str, providers: list[str]) -> list[str]:
    tokens = (
        cmp.work.prompt_tokens[cmp.work.n_warm :].sum()
        + cmp.work.output_tokens[cmp.work.n_warm :].sum()
    )
    share = b.requests_per_pool / max(b.requests_per_pool.sum(), 1e-9)
    by_provider = [
        sum(share[p] for p in range(cmp.spec.size) if cmp.spec.providers[p] == prov)
        for prov in providers
    ]
    return [
        label, f"{b.total_usd:.2f}", f"{b.total_usd / max(tokens, 1) * 1e6:.3f}", "",
        "100.00*", "", "", "", "", "", "", *(f"{100 * v:.1f}" for v in by_provider), "", "",
    ]  # fmt: skip


def _gap(value: float | None) -> str:
    return "" if value is None else f"{100 * value:+.1f}%"


def format_table(cmp: Comparison) -> str:
    """A Markdown table: one row per policy and one per bound. USD, %, ms."""
    providers = sorted(set(cmp.spec.providers))
    head = [
        "policy", "provisioned $", "$/1M tok", "attributed $", "SLO %", "TTFT %", "TPOT %",
        "goodput req/s", "goodput tok/s", "p50 TTFT ms", "p99 TTFT ms",
        *(f"{p} %" for p in providers), "gap vs LP", "gap vs integer",
    ]  # fmt: skip
    rows = [head, ["---"] * len(head)]
    for s in cmp.summaries:
        rows.append([
            s.policy, f"{s.provisioned_usd:.2f}", f"{s.usd_per_mtok:.3f}",
            f"{s.attributed_usd:.2f}", _pct(s.slo_attainment), _pct(s.ttft_attainment),
            _pct(s.tpot_attainment), f"{s.goodput_rps:.2f}", f"{s.goodput_tokens_per_s:.0f}",
            f"{s.ttft_p50_ms:.0f}", f"{s.ttft_p99_ms:.0f}",
            *(f"{100 * s.provider_share.get(p, 0.0):.1f}" for p in providers),
            _gap(s.gap), _gap(s.gap_integer),
        ])  # fmt: skip
    rows.append(_bound_row(cmp, cmp.bound, "LP bound", providers))
    unservable = cmp.bound.unservable
    if cmp.integer_bound is not None:
        rows.append(_bound_row(cmp, cmp.integer_bound, "integer bound", providers))
        unservable = max(unservable, cmp.integer_bound.unservable)
    relax = ""
    if cmp.relaxation is not None:
        r = cmp.relaxation
        gaps = ", ".join(
            f"{s.policy} {_gap(s.provisioned_usd / r.total_usd - 1.0) if r.total_usd else ''}"
            for s in cmp.summaries
        )
        relax = (
            f"\n\nValid lower bound (b) for {100 * r.target:g} % of the attainable SLO: "
            f"${r.total_usd:.2f} (per-request flexible-time relaxation, {r.window_s:g} s "
            f"windows). Gap to it: {gaps}."
        )
    note = (
        "\n\n\\* A bound meets every SLO by construction; it leaves "
        f"{unservable} requests that no pool can serve in time (or beyond every pool's max) "
        "unserved. LP: fractional replicas, boots free. Integer: whole replicas, each boot "
        "after t = 0 billed its provisioning time."
    )
    return "\n".join("| " + " | ".join(r) + " |" for r in rows) + note + relax


def _bound_json(b: Bound) -> dict[str, Any]:
    return {
        "kind": b.kind,
        "total_usd": b.total_usd,
        "primal_usd": b.primal_usd,
        "optimal": b.optimal,
        "window_s": b.window_s,
        "status": b.status,
        "unservable_requests": b.unservable,
        "requests_per_pool": b.requests_per_pool.tolist(),
        "mean_replicas_per_pool": b.replicas.mean(axis=0).tolist(),
        "boots_per_pool": b.launches.sum(axis=0).tolist(),
        "window_usd": b.window_usd.tolist(),
    }


def to_json(cmp: Comparison, scenario: dict[str, Any]) -> dict[str, Any]:
    """Everything a reader needs to redraw the plots: scenario, bounds, summaries, series."""
    ib = cmp.integer_bound
    return {
        "scenario": scenario,
        "runtime_s": cmp.seconds,
        "pools": list(cmp.spec.pool_ids),
        "bound": _bound_json(cmp.bound),
        "integer_bound": None if ib is None else _bound_json(ib),
        "relaxation_bound": None
        if cmp.relaxation is None
        else {
            "total_usd": cmp.relaxation.total_usd,
            "target": cmp.relaxation.target,
            "window_s": cmp.relaxation.window_s,
            "needed_requests": cmp.relaxation.needed,
            "served_per_pool": cmp.relaxation.served_per_pool.tolist(),
            "status": cmp.relaxation.status,
        },
        "policies": [
            {
                "summary": asdict(s),
                "series": {
                    "window_end_s": ser.window_end_s.tolist(),
                    "window_usd": ser.window_usd.tolist(),
                    "window_attainment": ser.window_attainment.tolist(),
                    "tick_s": ser.tick_s.tolist(),
                    "utilisation": ser.utilisation.tolist(),
                    "billed_replicas": ser.billed.tolist(),
                },
            }
            for s, ser in zip(cmp.summaries, cmp.series, strict=True)
        ],
    }


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float as None (JSON has no inf or NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_json(
    cmp: Comparison,
    scenario: dict[str, Any],
    path: Path,
    reference: dict[str, Any] | None = None,
) -> Path:
    """Write ``to_json`` (with the achievable ``reference``, if searched) to ``path``
    (inf and NaN as null); returns it."""
    doc = {**to_json(cmp, scenario), "reference": reference}
    path.write_text(json.dumps(_finite(doc), indent=1, allow_nan=False))
    return path


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110)
    return path


def write_plots(cmp: Comparison, out: Path) -> list[Path]:
    """Cost and SLO attainment over time, utilisation per pool, Pareto; the PNG paths."""
    minutes = [ser.window_end_s / 60.0 for ser in cmp.series]
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    for s, ser, x in zip(cmp.summaries, cmp.series, minutes, strict=True):
        length = np.diff(np.concatenate(([0.0], ser.window_end_s)))
        ax.plot(x, ser.window_usd * 3600.0 / length, label=s.policy)
    bound = cmp.bound
    for b, style, label in ((bound, "k--", "LP bound"), (cmp.integer_bound, "k:", "integer bound")):
        if b is None:
            continue
        blen = np.minimum(
            b.window_s, cmp.work.horizon_s - b.window_s * np.arange(len(b.window_usd))
        )
        x = (np.arange(len(blen)) * b.window_s + blen) / 60.0
        ax.plot(x, b.window_usd * 3600 / blen, style, label=f"{label} (its plan)")
    ax.set(xlabel="trace time (min)", ylabel="provisioned USD/hour", title="Cost over time")
    ax.legend()
    paths = [_save(fig, out / PLOTS[0])]

    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    for s, ser, x in zip(cmp.summaries, cmp.series, minutes, strict=True):
        ax.plot(x, 100.0 * ser.window_attainment, label=s.policy)
    ax.axhline(99.0, color="k", ls=":", lw=1)
    lows = [
        float(np.nanmin(ser.window_attainment)) for ser in cmp.series if len(ser.window_attainment)
    ]
    ax.set(xlabel="trace time (min, by arrival)", ylabel="SLO attainment (%)",
           ylim=_attainment_axis(lows))  # fmt: skip
    ax.set_title("SLO attainment over time")
    ax.legend()
    paths.append(_save(fig, out / PLOTS[1]))

    n = len(cmp.series)
    fig = Figure(figsize=(9, 2.2 * n + 0.6), layout="constrained")
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    for ax, s, ser in zip(axes, cmp.summaries, cmp.series, strict=True):
        for p, pid in enumerate(cmp.spec.pool_ids):
            ax.plot(ser.tick_s / 60.0, 100.0 * ser.utilisation[:, p], label=pid, lw=1)
        ax.set(ylabel="busy slots %", ylim=(-2, 102), title=s.policy)
    axes[0].legend(fontsize="small", ncol=2)
    axes[-1].set_xlabel("time (min; < 0 is the warm-up)")
    paths.append(_save(fig, out / PLOTS[2]))

    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    for s in cmp.summaries:
        ax.scatter(s.provisioned_usd, 100.0 * s.slo_attainment, label=s.policy, s=60)
    ax.axvline(bound.total_usd, color="k", ls="--", label="LP bound (cost)")
    if cmp.integer_bound is not None:
        ax.axvline(cmp.integer_bound.total_usd, color="k", ls=":", label="integer bound (cost)")
    ax.set(xlabel="provisioned USD", ylabel="SLO attainment (%)", title="Cost vs SLO attainment",
           ylim=_attainment_axis([s.slo_attainment for s in cmp.summaries]))  # fmt: skip
    ax.legend()
    paths.append(_save(fig, out / PLOTS[3]))
    return paths


def _attainment_axis(lows: list[float]) -> tuple[float, float]:
    """A y range (%) that shows where policies differ: from just below the lowest
    attainment (a share, 0-1; NaN ignored) to 100 %, never tighter than 95-100 %, so
    policies between 97 and 100 % do not sit on one line of a 0-100 % axis."""
    finite = [v for v in lows if math.isfinite(v)]
    low = 100.0 * min(finite, default=1.0)
    bottom = min(95.0, math.floor(low) - 1.0)
    return max(bottom, -2.0), 100.5
