"""Admin API for rollouts of model versions (``/admin/rollouts``, admin credential only).

    POST /admin/rollouts                    start: {model, to, plan?} -> 201 (409 if one runs)
    GET  /admin/rollouts                    every model's newest rollout
    GET  /admin/rollouts/{model}            one, with the current stage's evidence and its
                                            transitions
    POST /admin/rollouts/{model}/{action}   pause | resume | promote | abort

Writes go to the store first, as a compare-and-set on the record's revision (the
leader's controller moves rollouts too; the loser of a race gets 409 and may retry),
then to Redis, which announces the change to every gateway. If the store does not
answer, nothing changes (503 ``store_unavailable``); while it is still opening, just
after start-up, a call waits for it (``gateway.store_sync.StoreSync.store``).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from base.errors import Conflict, InvalidRequest, ModelNotFound, NotFound, TableError
from gateway.context import Gateway
from gateway.openapi_schemas import json_body
from gateway.rollout_views import transition_view, view, with_evidence
from live.rollout_table import RolloutRecord, RolloutTable, plan_from_yaml
from router.rollout import Stage, Transition, operator, start
from router.rollout_plan import DEFAULT_PLAN, RolloutPlan

logger = logging.getLogger(__name__)

Action = Literal["pause", "resume", "promote", "abort"]
ACTIONS: dict[str, Action] = {"pause": "pause", "resume": "resume", "promote": "promote",
                              "abort": "abort"}  # fmt: skip


class NewRollout(BaseModel):
    """Body of ``POST /admin/rollouts``: the model, the version to roll out, and the
    plan (an object or its YAML text; none: ``router.rollout_plan.DEFAULT_PLAN``)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    to: str = Field(min_length=1)
    plan: dict[str, Any] | str | None = None


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _plan(raw: dict[str, Any] | str | None) -> RolloutPlan:
    try:
        if raw is None:
            plan = DEFAULT_PLAN
        elif isinstance(raw, str):
            plan = plan_from_yaml(raw)
        else:
            plan = RolloutPlan.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(
            f"invalid rollout plan: {where}: {first['msg']}", param="plan"
        ) from exc
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="plan") from exc
    if plan.validation is not None and not plan.validation.requests:
        raise InvalidRequest(
            "the plan's validation gate has no golden requests: give them inline "
            "(`skyroute rollout start --plan FILE` reads the golden file into the plan)",
            param="plan",
        )
    return plan


def rollouts_router(gw: Gateway) -> APIRouter:
    """Start, inspect and steer rollouts."""
    router = APIRouter(prefix="/admin/rollouts", tags=["admin"])
    table = RolloutTable(gw.tables.redis, prefix=gw.settings.redis_prefix)

    def authorize(request: Request) -> None:
        gw.admin_keys.check_bearer(request.headers.get("authorization"))

    async def current(model: str) -> RolloutRecord | None:
        # The store is the arbiter; Redis may be behind it (or empty after a restart).
        store = await gw.store_sync.store()
        stored = (await store.rollouts.latest()).get(model)
        try:
            hot = await table.read(model)
        except TableError:
            return stored
        if hot is None or (stored is not None and stored.revision > hot.revision):
            return stored
        return hot

    async def commit(old: RolloutRecord | None, new: RolloutRecord, t: Transition) -> None:
        expected = old.revision if old is not None and old.id == new.id else None
        store = await gw.store_sync.store()
        if not await store.rollouts.save(new, t, expected_revision=expected):
            raise Conflict(f"the rollout of {new.rollout.model} moved meanwhile; read it again")
        # The store decided. Redis may be behind it or down: the leader puts the record
        # there within a tick of either, so the command stands either way.
        try:
            await table.write(new, old.revision if old is not None else 0, (t,))
        except TableError as exc:
            logger.warning("rollout %s: saved; Redis not updated yet: %s", new.id, exc)
        gw.sync.wake()

    @router.post("", status_code=201, openapi_extra=json_body(NewRollout))
    async def start_rollout(request: Request) -> Response:
        """Start rolling ``to`` out for ``model`` (see the module doc)."""
        authorize(request)
        try:
            body = NewRollout.model_validate_json(await request.body())
        except ValidationError as exc:
            raise InvalidRequest(f"invalid rollout: {exc.errors()[0]['msg']}") from exc
        policy = gw.state.policy
        if body.model not in policy.policy.models:
            raise ModelNotFound(body.model)
        versions = policy.versions.get(body.model, ())
        if body.to not in versions:
            raise InvalidRequest(
                f"{body.model} has no version {body.to!r} in the policy (versions: "
                f"{list(versions)})",
                param="to",
            )
        plan = _plan(body.plan)
        old = await current(body.model)
        if old is not None and not old.rollout.done:
            raise Conflict(f"a rollout of {body.model} is {old.rollout.stage}; finish it first")
        serving = policy.policy.models[body.model].version
        if (
            old is not None
            and old.rollout.stage is Stage.PROMOTED
            and serving != old.rollout.canary
        ):
            serving = old.rollout.canary  # promoted, the policy not yet updated
        if serving is None or body.to == serving:
            raise InvalidRequest(f"{body.to!r} already serves {body.model}", param="to")
        now = time.time()
        rollout = start(body.model, serving, body.to, plan, now)
        record = RolloutRecord(
            f"ro_{secrets.token_hex(6)}", rollout, plan,
            (old.revision if old is not None else 0) + 1, now, now,
        )  # fmt: skip
        t = Transition(now, rollout.stage, rollout.stage, 0, f"started: {serving} -> {body.to}")
        await commit(old, record, t)
        return _json(view(record), status=201)

    @router.get("")
    async def list_rollouts(request: Request) -> Response:
        """Every model's newest rollout (finished ones included)."""
        authorize(request)
        store = await gw.store_sync.store()
        stored = await store.rollouts.latest()
        return _json([view(r) for _, r in sorted(stored.items())])

    @router.get("/{model}")
    async def get_rollout(request: Request, model: str) -> Response:
        """``model``'s newest rollout, the evidence of its current stage and its log."""
        authorize(request)
        record = await current(model)
        if record is None:
            raise NotFound(f"no rollout of {model!r}", param="model")
        store = await gw.store_sync.store()
        history = await store.rollouts.history(model)
        return _json(
            {
                **await with_evidence(table, record),
                "transitions": [
                    transition_view(rev, t) for rid, rev, t in history if rid == record.id
                ],
            }
        )

    @router.post("/{model}/{action}")
    async def act(request: Request, model: str, action: str) -> Response:
        """An operator's command: pause, resume, promote or abort."""
        authorize(request)
        command = ACTIONS.get(action)
        if command is None:
            raise NotFound(f"no action {action!r}: pause, resume, promote or abort")
        old = await current(model)
        if old is None:
            raise NotFound(f"no rollout of {model!r}", param="model")
        try:
            moved, t = operator(old.rollout, command, time.time())
        except ValueError as exc:
            raise Conflict(str(exc)) from exc
        record = RolloutRecord(old.id, moved, old.plan, old.revision + 1, old.created_s, t.at_s)
        await commit(old, record, t)
        return _json(view(record))

    return router
