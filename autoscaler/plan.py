"""The plan ``decide()`` returns: a target per pool with the reason for it, and the demand
each target was sized for. A plain, typed object the actuator applies and
``skyroute autoscale --dry-run`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from autoscaler.state import ScalerState

__all__ = ["Action", "DemandLine", "Plan", "PoolChange"]

Action = Literal["up", "down", "hold"]


@dataclass(frozen=True, slots=True)
class PoolChange:
    """One pool's decision: from ``current`` to ``target`` replicas, and why.

    ``usd_per_replica_hour`` is the replica's price (USD/hour, NaN if unknown),
    ``goodput_tokens_per_s`` what one replica sustains within the SLO after correction.
    ``replace`` lists bad node ids to replace (delete, then create as many again).
    ``fallbacks`` are other pools of the same model that can serve the same client
    regions, cheapest per token first: where a stockout's capacity goes instead.
    """

    pool_id: str
    model: str
    current: int
    target: int
    reason: str
    usd_per_replica_hour: float
    goodput_tokens_per_s: float
    purchase: str
    managed: bool = True
    replace: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()

    @property
    def delta(self) -> int:
        """Replicas to add (> 0) or remove (< 0)."""
        return self.target - self.current

    @property
    def action(self) -> Action:
        """``up``, ``down`` or ``hold``."""
        return "up" if self.delta > 0 else "down" if self.delta < 0 else "hold"


@dataclass(frozen=True, slots=True)
class DemandLine:
    """One model's demand from one client region, in tokens/s (output tokens; input
    tokens for embedding models), over the planning horizon.

    ``required`` = ``upper`` × headroom is what the plan must cover; ``covered`` is what
    its pools give this line. ``reliable`` is False while the history is too short.
    """

    model: str
    client_region: str
    mean: float
    upper: float
    required: float
    covered: float
    reliable: bool
    pools: tuple[str, ...] = ()

    @property
    def shortfall(self) -> float:
        """Tokens/s the plan could not cover (bounds or budget), >= 0."""
        return max(self.required - self.covered, 0.0)


@dataclass(frozen=True)
class Plan:
    """Targets for every pool at ``now_s`` (unix s), the demand behind them, the fleet's
    cost before and after (USD/hour), and the state to remember. ``relaxed`` names
    constraints that had to give way (e.g. ``stabilisation``)."""

    now_s: float
    changes: tuple[PoolChange, ...]
    demand: tuple[DemandLine, ...]
    usd_per_hour_before: float
    usd_per_hour_after: float
    budget_usd_per_hour: float | None
    state: ScalerState
    relaxed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    _index: Mapping[str, PoolChange] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {c.pool_id: c for c in self.changes})

    def change(self, pool_id: str) -> PoolChange:
        """The decision for ``pool_id``. Raises KeyError if it is not in the plan."""
        return self._index[pool_id]

    @property
    def actionable(self) -> tuple[PoolChange, ...]:
        """Changes that need the cloud: a size change or a replacement, managed pools only."""
        return tuple(c for c in self.changes if c.managed and (c.delta or c.replace))

    def table(self) -> str:
        """The plan as fixed-width text tables (pools, then demand, then totals)."""
        head = ("pool", "buy", "$/h", "tok/s", "now", "target", "Δ", "reason")
        rows = [
            (
                c.pool_id,
                "spot" if c.purchase == "spot" else "od",
                f"{c.usd_per_replica_hour:.2f}",
                f"{c.goodput_tokens_per_s:.0f}",
                str(c.current),
                str(c.target),
                f"{c.delta:+d}" if c.delta else "",
                c.reason + (f"; replace {len(c.replace)}" if c.replace else ""),
            )
            for c in self.changes
        ]
        out = [_grid(head, rows)]
        dhead = ("model", "client region", "mean", "upper", "required", "covered", "short", "")
        drows = [
            (
                d.model,
                d.client_region,
                f"{d.mean:.0f}",
                f"{d.upper:.0f}",
                f"{d.required:.0f}",
                f"{d.covered:.0f}",
                f"{d.shortfall:.0f}" if d.shortfall > 0.5 else "",
                "" if d.reliable else "history too short",
            )
            for d in self.demand
        ]
        out.append(_grid(dhead, drows) if drows else "(no demand recorded)")
        budget = (
            f" (budget {self.budget_usd_per_hour:.2f})"
            if self.budget_usd_per_hour is not None
            else ""
        )
        out.append(
            f"fleet $/h: {self.usd_per_hour_before:.2f} -> {self.usd_per_hour_after:.2f}{budget}"
        )
        out += [f"relaxed: {r}" for r in self.relaxed]
        out += [f"note: {n}" for n in self.notes]
        return "\n\n".join(out[:2]) + "\n\n" + "\n".join(out[2:])


def _grid(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
             for r in [head, *rows]]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
