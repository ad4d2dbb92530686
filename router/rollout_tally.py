"""What a rollout counts per version while a stage runs, and the evidence judged from it.

Gateways record every attempt that a rollout's model served, under the stage and step it
was routed in, and add their counts to one Redis hash per (rollout, stage, step) in their
flush (``live.rollout_table``). The leader reads the hash back and turns it into the
per-metric tallies ``router.judge`` compares. Pure: no clock, no I/O.

Hash fields are ``<version>|<what>``:

    n        attempts judged          err   attempts that failed (error or invalid answer)
    miss     answered attempts that missed their SLO (TTFT or TPOT over the target)
    tok      output tokens, summed
    t<b>     TTFT histogram: attempts whose TTFT fell in bucket b (answered ones only)
    p<b>     TPOT histogram (answered ones that produced 2 tokens or more), as a percentage
             of the TPOT the pool's goodput profile expects at the load per replica the
             attempt met (``expected_tpot_ms``): the two versions run at different loads
             (a canary's pools carry its share), and decode time grows with the batch, so
             raw TPOTs would compare loads as much as versions
    o<b>     output-token histogram (answered ones)
    cmp, mm  shadow answers compared with the stable version's, and how many of them
             mismatched (``ShadowStage.similarity``)

Buckets are logarithmic, ``BUCKET_RATIO`` wide, from ``BUCKET_FLOOR``: fine enough that
a 1.2x shift of a latency moves about two buckets, coarse enough that a flush carries a
few dozen fields. The ``*_over_reference`` metrics take the stable version's quantile
(``Judgement.reference_quantile``) as the reference, both versions counted against the
same bucket edge, so an identical canary shows the same bad-event rate as stable.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from router.judge import Tally
from router.rollout import Evidence
from router.rollout_plan import MetricName, RolloutPlan

BUCKET_FLOOR = 0.1  # ms for latencies, tokens for output length
BUCKET_RATIO = 1.1
BUCKETS = 200  # 0.1 * 1.1**200 ~ 1.9e7: past any latency in ms or output length

_LOG_RATIO = math.log(BUCKET_RATIO)


def expected_tpot_ms(
    tpot_ms: float, max_concurrency: int, tokens_per_s: float, running: float
) -> float:
    """TPOT (ms) a replica of a goodput profile (``router.policy.GoodputProfile``) gives a
    sequence with ``running`` sequences in its batch: ``tpot_ms`` alone, growing linearly
    to the full batch's ``max_concurrency / tokens_per_s`` (the router's model)."""
    full = max(tpot_ms, max_concurrency * 1000.0 / tokens_per_s)
    if max_concurrency <= 1:
        return full
    occupied = min(max(running, 1.0), float(max_concurrency))
    return tpot_ms + (full - tpot_ms) * (occupied - 1.0) / (max_concurrency - 1)


def bucket(value: float) -> int:
    """The histogram bucket of ``value`` (ms or tokens); values below the floor go to 0."""
    if not value > BUCKET_FLOOR:
        return 0
    return min(BUCKETS - 1, int(math.log(value / BUCKET_FLOOR) / _LOG_RATIO))


def bucket_upper(b: int) -> float:
    """The upper edge of bucket ``b`` (ms or tokens)."""
    return BUCKET_FLOOR * BUCKET_RATIO ** (b + 1)


@dataclass
class VersionCounts:
    """One version's counts in one stage (see the module doc for each field)."""

    n: int = 0
    err: int = 0
    miss: int = 0
    tok: int = 0
    cmp: int = 0
    mm: int = 0
    ttft: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    tpot: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    out: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def answered(self) -> int:
        return self.n - self.err


class StageCounts:
    """Counts of one (rollout, stage, step), per version: built by a gateway between two
    flushes (``record``) or by the leader from the Redis hash (``parse``)."""

    def __init__(self) -> None:
        self.versions: dict[str, VersionCounts] = {}

    def __bool__(self) -> bool:
        return bool(self.versions)

    def _of(self, version: str) -> VersionCounts:
        counts = self.versions.get(version)
        if counts is None:
            counts = self.versions[version] = VersionCounts()
        return counts

    def record(
        self,
        version: str,
        *,
        ok: bool,
        slo_miss: bool = False,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
        output_tokens: int = 0,
        mismatch: bool | None = None,
    ) -> None:
        """Count one attempt served by ``version``. A failed attempt counts only as an
        error; latencies (ms) of an answered one go to the histograms when known;
        ``mismatch`` (None: not compared) is a shadow answer's comparison."""
        c = self._of(version)
        c.n += 1
        if not ok:
            c.err += 1
            return
        if mismatch is not None:
            c.cmp += 1
            c.mm += mismatch
        c.miss += slo_miss
        c.tok += output_tokens
        c.out[bucket(output_tokens)] += 1
        if ttft_ms is not None:
            c.ttft[bucket(ttft_ms)] += 1
        if tpot_ms is not None:
            c.tpot[bucket(tpot_ms)] += 1

    def fields(self) -> dict[str, int]:
        """The counts as hash increments (``HINCRBY`` each; zero fields left out)."""
        out: dict[str, int] = {}
        for version, c in self.versions.items():
            scalars = (("n", c.n), ("err", c.err), ("miss", c.miss), ("tok", c.tok),
                       ("cmp", c.cmp), ("mm", c.mm))  # fmt: skip
            for name, value in scalars:
                if value:
                    out[f"{version}|{name}"] = value
            for letter, hist in (("t", c.ttft), ("p", c.tpot), ("o", c.out)):
                for b, value in hist.items():
                    if value:
                        out[f"{version}|{letter}{b}"] = value
        return out

    @classmethod
    def parse(cls, raw: Mapping[str, str | int] | Mapping[bytes, bytes]) -> StageCounts:
        """Counts from a hash read back from Redis. Unknown or malformed fields are
        skipped (a newer gateway may count more than this reader knows)."""
        counts = cls()
        for key, value in raw.items():
            k = key.decode() if isinstance(key, bytes) else key
            version, sep, what = k.rpartition("|")
            try:
                number = int(value)
            except ValueError:
                continue
            if not sep or not what:
                continue
            c = counts._of(version)
            if what in ("n", "err", "miss", "tok", "cmp", "mm"):
                setattr(c, what, getattr(c, what) + number)
            elif what[0] in "tpo" and what[1:].isdigit():
                hist = {"t": c.ttft, "p": c.tpot, "o": c.out}[what[0]]
                hist[int(what[1:])] += number
        return counts

    def merge(self, other: StageCounts) -> None:
        """Add ``other``'s counts to these."""
        for version, o in other.versions.items():
            c = self._of(version)
            c.n, c.err, c.miss, c.tok = c.n + o.n, c.err + o.err, c.miss + o.miss, c.tok + o.tok
            c.cmp, c.mm = c.cmp + o.cmp, c.mm + o.mm
            for mine, theirs in ((c.ttft, o.ttft), (c.tpot, o.tpot), (c.out, o.out)):
                for b, value in theirs.items():
                    mine[b] += value


def _quantile_bucket(hist: Mapping[int, int], q: float) -> int | None:
    total = sum(hist.values())
    if not total:
        return None
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= q * total:
            return b
    return max(hist)


def _above(hist: Mapping[int, int], edge: int) -> Tally:
    return Tally(sum(hist.values()), sum(v for b, v in hist.items() if b > edge))


def _below(hist: Mapping[int, int], edge: int) -> Tally:
    return Tally(sum(hist.values()), sum(v for b, v in hist.items() if b < edge))


def metric_tallies(
    counts: StageCounts, version: str, reference: str, quantile: float
) -> dict[MetricName, Tally]:
    """Per judged metric, ``version``'s tally, with the reference edges taken from the
    ``reference`` (stable) version's histograms at ``quantile``. Call it for both
    versions with the same ``reference``."""
    c = counts.versions.get(version, VersionCounts())
    ref = counts.versions.get(reference, VersionCounts())
    out: dict[MetricName, Tally] = {
        "error_rate": Tally(c.n, c.err),
        "slo_miss_rate": Tally(c.answered, c.miss),
    }
    edges: tuple[tuple[MetricName, dict[int, int], dict[int, int]], ...] = (
        ("ttft_over_reference", c.ttft, ref.ttft),
        ("tpot_over_reference", c.tpot, ref.tpot),
    )
    for name, mine, theirs in edges:
        edge = _quantile_bucket(theirs, quantile)
        out[name] = Tally() if edge is None else _above(mine, edge)
    # Shorter answers than the stable version's low quantile (a truncating regression).
    low = _quantile_bucket(ref.out, 1.0 - quantile)
    out["output_under_reference"] = Tally() if low is None else _below(c.out, low)
    # The stable version matches itself: its side is every comparison, none a mismatch.
    if version == reference:
        compared = sum(v.cmp for v in counts.versions.values())
        out["answer_mismatch_rate"] = Tally(compared, 0)
    else:
        out["answer_mismatch_rate"] = Tally(c.cmp, c.mm)
    return out


def evidence(counts: StageCounts, stable: str, canary: str, plan: RolloutPlan) -> Evidence:
    """The evidence ``router.rollout.judge`` takes for one stage's counts."""
    q = plan.judgement.reference_quantile
    canary_counts = counts.versions.get(canary, VersionCounts())
    return Evidence(
        canary=metric_tallies(counts, canary, stable, q),
        stable=metric_tallies(counts, stable, stable, q),
        canary_requests=canary_counts.n,
    )
