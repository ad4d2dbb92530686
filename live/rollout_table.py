"""Rollouts in Redis: each model's current rollout, its transition log and its counts.

Schema (under ``{prefix}``):

    {rollouts}:state              hash  model -> RolloutRecord JSON (the hot copy; the
                                        store holds the durable one, ``store.rollouts``)
    {rollouts}:log:<model>        list  the newest transitions of the model's rollouts,
                                        JSON, newest first, capped at LOG_KEPT
    {rollouts}:tally:<id>:<stage>:<step>
                                  hash  ``router.rollout_tally`` counts of one stage,
                                        HINCRBY from every gateway's flush; expires
                                        TALLY_TTL_S after the last write

Every write of a record is a compare-and-set on its ``revision`` (ROLLOUT_CAS_LUA): the
leader's judgement and an operator's command may race, and the loser re-reads. The
state hash is small (one field per model with a rollout), so a gateway reads it whole in
its snapshot refresh. All keys share the hash tag ``{rollouts}``: a CAS and the log it
appends to run in one script on one Redis Cluster node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from live.keyspace import tagged
from live.redis_client import AnyPipeline, RedisClient, queue_script, run_pipeline
from router.rollout import Rollout, Stage, Transition
from router.rollout_plan import RolloutPlan
from router.rollout_tally import StageCounts

LOG_KEPT = 200
TALLY_TTL_S = 7 * 24 * 3600

# KEYS[1] the state hash, KEYS[2] the model's log. ARGV: model, expected revision ('0':
# no record yet), the record JSON, how many log entries to keep, the events channel, then
# the transitions to log (JSON each). Returns 1 if written, 0 if the revision moved on.
ROLLOUT_CAS_LUA = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local rev = '0'
if cur then rev = tostring(cjson.decode(cur)['revision']) end
if rev ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
for i = 6, #ARGV do
  redis.call('LPUSH', KEYS[2], ARGV[i])
end
if #ARGV >= 6 then redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1) end
redis.call('PUBLISH', ARGV[5], 'rollouts')
return 1
"""


@dataclass(frozen=True)
class RolloutRecord:
    """One model's rollout as stored: its state, its plan, and the counters around it.

    ``id``: unique per rollout (the store's primary key; tallies are keyed by it).
    ``revision``: bumped by every write (compare-and-set). ``created_s``/``updated_s``:
    unix seconds.
    """

    id: str
    rollout: Rollout
    plan: RolloutPlan
    revision: int = 1
    created_s: float = 0.0
    updated_s: float = 0.0

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "rollout": json.loads(self.rollout.to_json()),
                "plan": self.plan.model_dump(mode="json"),
                "revision": self.revision,
                "created_s": self.created_s,
                "updated_s": self.updated_s,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> RolloutRecord:
        """Raises ValueError (or pydantic's ValidationError) for a malformed record."""
        data = json.loads(text)
        return cls(
            id=str(data["id"]),
            rollout=Rollout.from_json(json.dumps(data["rollout"])),
            plan=RolloutPlan.model_validate(data["plan"]),
            revision=int(data["revision"]),
            created_s=float(data.get("created_s", 0.0)),
            updated_s=float(data.get("updated_s", 0.0)),
        )


def transition_json(rollout_id: str, t: Transition) -> str:
    """A transition as logged: JSON with the rollout's id."""
    body: dict[str, Any] = asdict(t)
    body["rollout_id"] = rollout_id
    body["from_stage"], body["to_stage"] = str(t.from_stage), str(t.to_stage)
    body["evidence"] = list(t.evidence)
    return json.dumps(body, sort_keys=True)


def transition_from_json(text: str | bytes) -> tuple[str, Transition]:
    """The rollout id and transition of a logged entry. Raises ValueError if malformed."""
    data = json.loads(text)
    return str(data["rollout_id"]), Transition(
        at_s=float(data["at_s"]),
        from_stage=Stage(data["from_stage"]),
        to_stage=Stage(data["to_stage"]),
        step=int(data["step"]),
        reason=str(data["reason"]),
        evidence=tuple(data.get("evidence", ())),
    )


def plan_from_yaml(text: str) -> RolloutPlan:
    """A plan from its YAML text. Raises ValueError (pydantic's ValidationError is one)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"rollout plan is not YAML: {exc}") from exc
    return RolloutPlan.model_validate(doc)


class RolloutTable:
    """Typed access to the rollout keys. Methods raise TableError on Redis failure."""

    def __init__(self, redis: RedisClient, prefix: str = "sr:v1") -> None:
        self.redis = redis
        self.prefix = prefix
        self._cas = redis.register_script(ROLLOUT_CAS_LUA)

    def _k(self, *parts: str) -> str:
        return tagged(self.prefix, "rollouts", *parts)

    @property
    def events_channel(self) -> str:
        return f"{self.prefix}:events"

    def tally_key(self, rollout_id: str, stage: Stage | str, step: int) -> str:
        """The counts hash of one stage (a canary stage has one per step)."""
        return self._k("tally", rollout_id, str(stage), str(step))

    async def read_all(self) -> dict[str, RolloutRecord]:
        """Every model's current record (finished ones included until replaced).
        Malformed records are skipped."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self._k("state"))
        (raw,) = await run_pipeline(pipe, "rollouts")
        out: dict[str, RolloutRecord] = {}
        for model, text in raw.items():
            try:
                record = RolloutRecord.from_json(text)
            except ValueError:
                continue
            out[model.decode() if isinstance(model, bytes) else model] = record
        return out

    async def read(self, model: str) -> RolloutRecord | None:
        """``model``'s record, or None."""
        return (await self.read_all()).get(model)

    async def write(
        self, record: RolloutRecord, expected_revision: int, transitions: tuple[Transition, ...]
    ) -> bool:
        """Store ``record`` if the stored one is still at ``expected_revision`` (the
        revision the caller read; 0: none), log ``transitions`` and announce it. A new
        rollout replacing a finished one continues the model's revisions
        (``expected_revision + 1``), so a restore never puts an older one back. Returns
        False if another writer got there first (re-read and retry)."""
        model = record.rollout.model
        args = [
            model,
            str(expected_revision),
            record.to_json(),
            str(LOG_KEPT),
            self.events_channel,
            *(transition_json(record.id, t) for t in transitions),
        ]
        pipe = self.redis.pipeline(transaction=False)
        await queue_script(pipe, self._cas, [self._k("state"), self._k("log", model)], args)
        (written,) = await run_pipeline(pipe, "rollouts")
        return bool(written)

    async def transitions(self, model: str, count: int = 50) -> list[tuple[str, Transition]]:
        """The newest ``count`` logged transitions of ``model``'s rollouts, newest first."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self._k("log", model), 0, count - 1)
        (raw,) = await run_pipeline(pipe, "rollouts")
        out = []
        for text in raw:
            try:
                out.append(transition_from_json(text))
            except (ValueError, KeyError):
                continue
        return out

    def add_counts(
        self, pipe: AnyPipeline, counts: Mapping[tuple[str, str, int], StageCounts]
    ) -> None:
        """Queue the counts of each (rollout id, stage, step) on ``pipe`` (a gateway's
        flush): HINCRBY per field, and the TTL. Not idempotent: a pipeline that failed
        must not be retried with the same counts (they are statistics, dropped)."""
        for (rollout_id, stage, step), stage_counts in counts.items():
            fields = stage_counts.fields()
            if not fields:
                continue
            key = self.tally_key(rollout_id, stage, step)
            for field, value in fields.items():
                pipe.hincrby(key, field, value)
            pipe.expire(key, TALLY_TTL_S)

    async def read_counts(self, rollout_id: str, stage: Stage | str, step: int) -> StageCounts:
        """The counts of one stage so far (empty if none were written)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.tally_key(rollout_id, stage, step))
        (raw,) = await run_pipeline(pipe, "rollouts")
        return StageCounts.parse(raw)

    async def restore(self, records: Mapping[str, RolloutRecord]) -> int:
        """Put back records from the store that Redis lost (after a restart empty), never
        over a newer revision. Returns how many were written."""
        current = await self.read_all()
        written = 0
        for model, record in records.items():
            have = current.get(model)
            if have is not None and have.revision >= record.revision:
                continue
            written += await self.write(record, 0 if have is None else have.revision, ())
        return written
