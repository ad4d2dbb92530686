"""SLO attainment and traffic shares of a load test, from what each request saw.

A request *meets* its SLO class when it succeeded and:

- streamed: its TTFT (first content chunk) is within the class's TTFT target and its mean
  TPOT (time between the first and the last content chunk over the tokens in between) is
  within the TPOT target;
- not streamed (no first token to observe): its end-to-end time is within
  ``ttft + tpot * (output_tokens - 1)``, the latest a compliant stream could have finished.

Failed requests count as misses. Tallies merge, so locust workers can ship theirs to the
master (``to_dict`` / ``merge``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SloTarget:
    """Latency targets of one SLO class, ms."""

    ttft_ms: float
    tpot_ms: float


def parse_targets(text: str) -> dict[str, SloTarget]:
    """``"interactive=800/60,batch=30000/500"`` (TTFT ms / TPOT ms). Raises ValueError."""
    out: dict[str, SloTarget] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, spec = part.partition("=")
        ttft, _, tpot = spec.partition("/")
        try:
            target = SloTarget(float(ttft), float(tpot))
        except ValueError as exc:
            raise ValueError(f"SLO target {part!r}: want NAME=TTFT_MS/TPOT_MS") from exc
        if not name or target.ttft_ms <= 0 or target.tpot_ms <= 0:
            raise ValueError(f"SLO target {part!r}: want NAME=TTFT_MS/TPOT_MS, both > 0")
        out[name.strip()] = target
    if not out:
        raise ValueError("no SLO targets")
    return out


def parse_weights(text: str) -> dict[str, float]:
    """``"interactive=0.5,batch=0.5"`` (or bare names, weight 1). Raises ValueError."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, weight = part.partition("=")
        try:
            out[name.strip()] = float(weight) if sep else 1.0
        except ValueError as exc:
            raise ValueError(f"weight {part!r}: want NAME=WEIGHT") from exc
        if out[name.strip()] < 0:
            raise ValueError(f"weight {part!r} is negative")
    if not out or sum(out.values()) <= 0:
        raise ValueError(f"no positive weight in {text!r}")
    return out


@dataclass(frozen=True)
class Outcome:
    """What one request saw. Times in seconds; ``ttft_s``/``last_token_s`` only when streamed."""

    slo: str
    tenant: str
    stream: bool
    ok: bool
    e2e_s: float
    output_tokens: int
    ttft_s: float | None = None
    last_token_s: float | None = None
    provider: str = "-"
    region: str = "-"


def meets(o: Outcome, target: SloTarget) -> bool:
    """Whether ``o`` met ``target`` (see the module docstring)."""
    if not o.ok:
        return False
    tokens = max(o.output_tokens, 1)
    if not o.stream:
        return o.e2e_s * 1000.0 <= target.ttft_ms + target.tpot_ms * (tokens - 1)
    if o.ttft_s is None or o.ttft_s * 1000.0 > target.ttft_ms:
        return False
    if tokens <= 1 or o.last_token_s is None:
        return True
    tpot_ms = (o.last_token_s - o.ttft_s) * 1000.0 / (tokens - 1)
    return tpot_ms <= target.tpot_ms


@dataclass
class ClassTally:
    requests: int = 0
    met: int = 0
    errors: int = 0
    ttft_ms: list[float] = field(default_factory=list)


@dataclass
class Tally:
    """Per-SLO-class attainment, traffic by provider/region and by tenant."""

    classes: dict[str, ClassTally] = field(default_factory=dict)
    routes: Counter[str] = field(default_factory=Counter)  # "provider region"
    tenants: Counter[str] = field(default_factory=Counter)

    def add(self, o: Outcome, target: SloTarget) -> bool:
        """Count ``o``; returns whether it met ``target``."""
        c = self.classes.setdefault(o.slo, ClassTally())
        ok = meets(o, target)
        c.requests += 1
        c.met += ok
        c.errors += not o.ok
        if o.ttft_s is not None and o.ok:
            c.ttft_ms.append(o.ttft_s * 1000.0)
        if o.ok:
            self.routes[f"{o.provider} {o.region}"] += 1
        self.tenants[o.tenant] += 1
        return ok

    @property
    def requests(self) -> int:
        return sum(c.requests for c in self.classes.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "classes": {k: vars(v) for k, v in self.classes.items()},
            "routes": dict(self.routes),
            "tenants": dict(self.tenants),
        }

    def merge(self, data: dict[str, Any]) -> None:
        """Add another tally's ``to_dict()`` to this one."""
        for name, c in data["classes"].items():
            mine = self.classes.setdefault(name, ClassTally())
            mine.requests += c["requests"]
            mine.met += c["met"]
            mine.errors += c["errors"]
            mine.ttft_ms += c["ttft_ms"]
        self.routes.update(data["routes"])
        self.tenants.update(data["tenants"])

    def attainment(self, name: str) -> float:
        c = self.classes[name]
        return c.met / c.requests if c.requests else 0.0

    def below(self, threshold: float) -> dict[str, float]:
        """Classes whose attainment is under ``threshold`` (0..1), with their attainment."""
        return {
            n: self.attainment(n) for n in sorted(self.classes) if self.attainment(n) < threshold
        }


def render(tally: Tally, targets: dict[str, SloTarget], threshold: float) -> list[str]:
    """The end-of-run summary as lines of text."""
    lines = ["", "=== skyroute load test summary ==="]
    if not tally.requests:
        return [*lines, "no request completed"]
    lines.append(
        f"SLO attainment per class (threshold {threshold:.1%}; non-streamed requests are "
        "judged end to end):"
    )
    header = (
        "class",
        "requests",
        "met",
        "attain",
        "errors",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "target TTFT/TPOT ms",
    )
    rows = []
    for name in sorted(tally.classes):
        c, t = tally.classes[name], targets.get(name)
        p50, p99 = np.percentile(c.ttft_ms, [50, 99]) if c.ttft_ms else (float("nan"),) * 2
        rows.append(
            (
                name,
                str(c.requests),
                str(c.met),
                f"{tally.attainment(name):.1%}",
                str(c.errors),
                f"{p50:.0f}",
                f"{p99:.0f}",
                f"{t.ttft_ms:g}/{t.tpot_ms:g}" if t else "-",
            )
        )
    lines += _table(header, rows)
    total = sum(tally.routes.values())
    lines.append("Traffic share by provider and region (x-skyroute-provider, x-skyroute-region):")
    lines += _table(
        ("provider", "region", "requests", "share"),
        [
            (*route.split(" ", 1), str(n), f"{n / total:.1%}")
            for route, n in tally.routes.most_common()
        ],
    )
    tenants = sum(tally.tenants.values())
    lines.append(
        "Traffic by tenant: "
        + ", ".join(f"{t} {n} ({n / tenants:.0%})" for t, n in sorted(tally.tenants.items()))
    )
    failing = tally.below(threshold)
    if failing:
        worst = ", ".join(f"{n} {a:.1%}" for n, a in failing.items())
        lines.append(f"RESULT: FAIL: SLO attainment below {threshold:.1%}: {worst}")
    else:
        lines.append(f"RESULT: PASS: every SLO class at or above {threshold:.1%}")
    return lines


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header)] + [fmt.format(*r) for r in rows]
