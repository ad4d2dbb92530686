"""gateway.hedging.race: failover in sequence, and a hedge that starts the next attempt
when the first stays silent. Attempts here wait on events that are never set (a hung
engine) or finish at once, so no outcome depends on how fast the machine is."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from base.errors import UpstreamTimeout
from gateway.hedging import race
from tests.aio import run_async


class Script:
    """Attempts that each do one scripted thing: "ok", "fail", "hang" or "boom"."""

    def __init__(self, *steps: str) -> None:
        self.steps = list(steps)
        self.started: list[str] = []
        self.cancelled: list[int] = []
        self.discarded: list[str] = []
        self._never = asyncio.Event()
        self.hedged = asyncio.Event()  # set once a second attempt is running

    def start_next(self) -> Coroutine[Any, Any, str] | None:
        if len(self.started) == len(self.steps):
            return None
        n = len(self.started)
        self.started.append(self.steps[n])
        return self._run(n, self.steps[n])

    async def _run(self, n: int, step: str) -> str:
        if n == 1:
            self.hedged.set()
        try:
            if step == "hang":
                await self._never.wait()
            if step == "fail":
                raise UpstreamTimeout(f"attempt {n} failed")
            if step == "boom":
                raise RuntimeError("a bug")
            return f"answer {n}"
        except asyncio.CancelledError:
            self.cancelled.append(n)
            raise

    async def discard(self, value: str) -> None:
        self.discarded.append(value)


@run_async
async def test_without_a_hedge_attempts_run_one_after_another() -> None:
    script = Script("fail", "fail", "ok")
    outcome = await race(script.start_next, None, script.discard)
    assert (outcome.value, outcome.winner, outcome.hedged_first_ms) == ("answer 2", 2, None)


@run_async
async def test_every_attempt_failing_raises_the_last_failure() -> None:
    script = Script("fail", "fail")
    with pytest.raises(UpstreamTimeout, match="attempt 1"):
        await race(script.start_next, None, script.discard)


@run_async
async def test_no_attempt_at_all_is_a_lookup_error() -> None:
    with pytest.raises(LookupError):
        await race(Script().start_next, 0.0, Script().discard)


@run_async
async def test_a_silent_first_attempt_is_hedged_and_the_loser_cancelled() -> None:
    script = Script("hang", "ok", "ok")
    outcome = await race(script.start_next, 0.01, script.discard)
    assert (outcome.value, outcome.winner) == ("answer 1", 1)
    assert outcome.hedged_first_ms is not None and outcome.hedged_first_ms >= 0
    assert script.started == ["hang", "ok"]  # one hedge, never a third attempt
    assert script.cancelled == [0]


@run_async
async def test_a_first_attempt_that_answers_in_time_is_never_hedged() -> None:
    script = Script("ok", "ok")
    outcome = await race(script.start_next, 60.0, script.discard)
    assert (outcome.value, outcome.winner, outcome.hedged_first_ms) == ("answer 0", 0, None)
    assert script.started == ["ok"]


@run_async
async def test_a_failed_hedge_leaves_the_first_attempt_running() -> None:
    # The first hangs, the hedge fails at once: the race goes on with the next attempt.
    script = Script("hang", "fail", "ok")
    outcome = await race(script.start_next, 0.01, script.discard)
    assert (outcome.value, outcome.winner) == ("answer 2", 2)
    assert script.cancelled == [0]


@run_async
async def test_a_bug_in_an_attempt_propagates_and_cancels_the_others() -> None:
    script = Script("hang", "boom")
    with pytest.raises(RuntimeError, match="a bug"):
        await race(script.start_next, 0.01, script.discard)
    assert script.cancelled == [0]


@run_async
async def test_cancelling_the_caller_cancels_every_attempt() -> None:
    script = Script("hang", "hang")
    task = asyncio.ensure_future(race(script.start_next, 0.01, script.discard))
    await script.hedged.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(script.cancelled) == [0, 1]
