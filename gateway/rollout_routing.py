"""What a gateway does with the rollouts it reads: which version serves a request, and
which counts its attempts go to.

Pure, apart from the counts it accumulates between two flushes: the records come from
Redis (``live.rollout_table``) through the refresh loop, the draws from the caller.

- ``active_rollouts`` keeps the records that steer traffic under the current policy: a
  running rollout (shadow or canary stage, or validating: no user traffic yet, but the
  record is known) whose two versions the policy declares, and a promoted one until the
  policy itself names the new version as the model's serving one.
- ``ActiveRollout.version_for`` places a request: during a canary step a sticky key
  (session or tenant, per the plan) hashes to a point in [0, 1) that stays the same
  while shares grow, so a session that reached the canary stays on it.
- ``RolloutCounts`` collects every attempt on a pool of a model under a shadow or
  canary stage into the stage's ``StageCounts``, flushed with the gateway's batch.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from live.rollout_table import RolloutRecord
from router.compiled import CompiledPolicy
from router.policy import PoolSpec
from router.rollout import Stage
from router.rollout_tally import StageCounts

logger = logging.getLogger(__name__)

_COUNTED = (Stage.SHADOW, Stage.CANARY)


@dataclass(frozen=True, slots=True)
class ActiveRollout:
    """A rollout as the request path needs it."""

    rollout_id: str
    model: str
    stage: Stage
    step: int
    stable: str
    canary: str
    share: float  # of the traffic the canary version could serve (canary stage)
    shadow_share: float  # of requests mirrored to the canary (shadow stage)
    sticky: str  # none | session | tenant
    promoted: bool = False
    # Shadow answers below this word-set similarity to stable's are mismatches (None: off).
    similarity: float | None = None

    @property
    def counted(self) -> bool:
        """Whether attempts are counted for the judgement now."""
        return self.stage in _COUNTED and not self.promoted

    @property
    def count_key(self) -> tuple[str, str, int]:
        """(rollout id, stage, step): the tally hash the counts go to."""
        return (self.rollout_id, str(self.stage), self.step)

    def point(self, session_id: str | None, tenant: str, draw: float) -> float:
        """Where a request falls in [0, 1): a hash of its sticky key, else ``draw``."""
        key = {"session": session_id, "tenant": tenant}.get(self.sticky)
        if not key:
            return draw
        digest = hashlib.blake2b(f"{self.rollout_id}/{key}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def version_for(self, session_id: str | None, tenant: str, draw: float) -> str:
        """The version that should serve the request (before feasibility: the caller
        falls back to ``stable`` when the canary version has no pool for it)."""
        if self.promoted:
            return self.canary
        if self.stage is Stage.CANARY and self.point(session_id, tenant, draw) < self.share:
            return self.canary
        return self.stable


def active_rollouts(
    records: Mapping[str, RolloutRecord], policy: CompiledPolicy
) -> dict[str, ActiveRollout]:
    """The records that steer ``policy``'s traffic, by model (see the module doc)."""
    out: dict[str, ActiveRollout] = {}
    for model, record in records.items():
        r, plan = record.rollout, record.plan
        declared = policy.versions.get(model, ())
        if r.stage is Stage.ROLLED_BACK:
            continue
        if r.canary not in declared or r.stable not in declared:
            logger.warning(
                "rollout %s of %s names versions %s/%s; the policy declares %s: ignored",
                record.id, model, r.stable, r.canary, list(declared),
            )  # fmt: skip
            continue
        promoted = r.stage is Stage.PROMOTED
        if promoted and policy.policy.models[model].version == r.canary:
            continue  # the policy caught up: its serving version is the new one
        out[model] = ActiveRollout(
            rollout_id=record.id,
            model=model,
            stage=r.stage,
            step=r.step,
            stable=r.stable,
            canary=r.canary,
            share=r.share(plan),
            shadow_share=r.shadow_share(plan),
            sticky=plan.sticky,
            promoted=promoted,
            similarity=plan.shadow.similarity if plan.shadow is not None else None,
        )
    return out


class RolloutCounts:
    """The active rollouts and the counts of their attempts since the last flush."""

    def __init__(self) -> None:
        # The TPOT (ms) a pool's profile expects at its current load (set by the routing
        # state): a measured TPOT is counted as a percentage of it (router.rollout_tally).
        self.expected_tpot: Callable[[PoolSpec], float] | None = None
        self.active: dict[str, ActiveRollout] = {}
        self.pending: dict[tuple[str, str, int], StageCounts] = {}
        self.dropped = 0  # attempts whose counts a failed flush lost

    def attempt(
        self,
        pool: PoolSpec,
        *,
        ok: bool,
        slo_miss: bool = False,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
        output_tokens: int = 0,
        mismatch: bool | None = None,
    ) -> None:
        """Count one attempt on ``pool`` if its model's rollout is being judged and the
        pool serves one of the two versions. Cheap when no rollout is active."""
        if not self.active:
            return
        active = self.active.get(pool.model)
        version = pool.version
        if active is None or not active.counted or version not in (active.stable, active.canary):
            return
        assert version is not None
        if tpot_ms is not None and self.expected_tpot is not None:
            tpot_ms = 100.0 * tpot_ms / max(self.expected_tpot(pool), 1e-3)
        counts = self.pending.get(active.count_key)
        if counts is None:
            counts = self.pending[active.count_key] = StageCounts()
        counts.record(
            version, ok=ok, slo_miss=slo_miss, ttft_ms=ttft_ms, tpot_ms=tpot_ms,
            output_tokens=output_tokens, mismatch=mismatch,
        )  # fmt: skip

    def take(self) -> dict[tuple[str, str, int], StageCounts]:
        """The counts since the last call (the flush owns them afterwards)."""
        pending, self.pending = self.pending, {}
        return pending

    def lost(self, counts: Mapping[tuple[str, str, int], StageCounts]) -> None:
        """A flush failed: its counts are statistics, dropped and counted."""
        self.dropped += sum(c.n for sc in counts.values() for c in sc.versions.values())
