"""The text ``skyroute prices show`` prints: every feed-priced pool with its raw price,
source, age, stale flag and cost per million output tokens, then each feed's last status."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from live.price_table import FeedStatus
from pricing.pools import PoolPrice


def age_text(seconds: float) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``; ``never`` for +inf."""
    if not math.isfinite(seconds):
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    body = [list(r) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body, strict=True)]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in (list(header), *body)
    ]


def _money(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "-"


def pool_lines(pools: Iterable[PoolPrice], now_s: float) -> list[str]:
    """The pools table."""
    rows = []
    for p in pools:
        priced_as = f"{p.key.provider} {p.key.region} {p.key.instance_type} {p.key.purchase}"
        per_m = _money(p.usd_per_million_tokens)
        if p.override_usd_per_gpu_hour is not None:
            per_m += f" (policy override {p.override_usd_per_gpu_hour:g}/GPU-h)"
        if p.row is None:
            if p.override_usd_per_gpu_hour is None:
                per_m = "- (no price yet)"
            rows.append([p.pool_id, priced_as, "-", "-", "-", "-", "-", per_m])
            continue
        rows.append(
            [
                p.pool_id,
                priced_as,
                _money(p.row.usd_per_hour),
                _money(p.row.usd_per_gpu_hour),
                p.row.source,
                age_text(p.row.age_s(now_s)),
                "STALE" if p.stale else "no",
                per_m,
            ]
        )
    header = ["POOL", "PRICED AS", "$/HOUR", "$/GPU-HOUR", "SOURCE", "AGE", "STALE", "$/1M TOKENS"]
    return _table(header, rows)


def feed_lines(statuses: Mapping[str, FeedStatus], now_s: float) -> list[str]:
    """The feeds table; a feed with missing rows lists the first few."""
    rows = []
    for name in sorted(statuses):
        s = statuses[name]
        error = s.error
        if s.missing:
            shown = ", ".join(s.missing[:3]) + (" …" if len(s.missing) > 3 else "")
            error = f"{error} [missing: {shown}]" if error else f"missing: {shown}"
        rows.append(
            [
                name,
                s.state.upper() if s.state != "ok" else "ok",
                s.reason or "-",
                age_text(s.age_s(now_s)),
                age_text(max(now_s - s.last_attempt_s, 0.0)) if s.last_attempt_s else "never",
                str(s.rows),
                str(s.rejected),
                error or "-",
            ]
        )
    header = ["FEED", "STATE", "REASON", "LAST OK", "LAST TRY", "ROWS", "REJECTED", "DETAIL"]
    return _table(header, rows)


def render(pools: Sequence[PoolPrice], statuses: Mapping[str, FeedStatus], now_s: float) -> str:
    """The whole ``prices show`` text."""
    lines = ["Pools (price table):"]
    lines += pool_lines(pools, now_s) if pools else ["  (no pool takes its price from a feed)"]
    lines += ["", "Feeds:"]
    lines += feed_lines(statuses, now_s) if statuses else ["  (no feed has run yet)"]
    return "\n".join(lines)
