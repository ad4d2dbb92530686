"""PolicySource: a reload applies a changed, valid file to every subscriber; an invalid
one is refused and the running policy stays; unchanged bytes are not a new version."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from base.errors import PolicyError
from live.policy_file import PolicySource
from router.policy import Policy

FIXTURE = Path(__file__).parent.parent / "fixtures" / "router_policy.yaml"
VALID = FIXTURE.read_text(encoding="utf-8")
CHANGED = VALID.replace("near_tie: 0.02", "near_tie: 0.1")
# Valid YAML, invalid policy: a pool that names no known model.
INVALID = VALID.replace("model: llama-3.1-8b", "model: nonexistent-model")


class Seen:
    """A subscriber that records what it was given."""

    def __init__(self) -> None:
        self.policies: list[Policy] = []

    def __call__(self, policy: Policy) -> None:
        self.policies.append(policy)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(VALID, encoding="utf-8")
    return path


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def source(policy_file: Path, seen: Seen) -> PolicySource:
    made = PolicySource(policy_file)
    made.subscribe(seen)
    return made


def _rewrite(path: Path, text: str) -> None:
    """Write ``text`` and move the mtime on, so a poll sees a change even on a coarse
    filesystem clock."""
    before = path.stat()
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def test_the_fixtures_differ_where_intended() -> None:
    assert (CHANGED != VALID, INVALID != VALID) == (True, True)


def test_a_new_source_holds_the_file_at_version_one(source: PolicySource) -> None:
    assert (source.version, source.last_error, len(source.policy.pools)) == (1, None, 3)


def test_an_invalid_file_at_start_raises(policy_file: Path) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError, match="nonexistent-model"):
        PolicySource(policy_file)


def test_a_changed_file_reaches_every_subscriber_in_order(
    source: PolicySource, policy_file: Path, seen: Seen
) -> None:
    order: list[str] = []
    source.subscribe(lambda _: order.append("second" if seen.policies else "before the first"))
    policy_file.write_text(CHANGED, encoding="utf-8")

    assert source.reload() is True

    assert (source.version, source.policy.routing.near_tie) == (2, 0.1)
    assert seen.policies == [source.policy] and order == ["second"]


def test_an_unchanged_file_is_not_a_new_version(
    source: PolicySource, policy_file: Path, seen: Seen
) -> None:
    _rewrite(policy_file, VALID)  # saved again: new mtime, same bytes
    assert source.reload() is False
    assert source.poll() is False
    assert (source.version, seen.policies) == (1, [])


@pytest.mark.parametrize("text", [INVALID, "pools: [unclosed"], ids=["invalid", "not-yaml"])
def test_an_invalid_file_is_refused_and_the_running_policy_stays(
    source: PolicySource, policy_file: Path, seen: Seen, text: str
) -> None:
    running = source.policy
    policy_file.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError):
        source.reload()
    assert (source.policy, source.version, seen.policies) == (running, 1, [])
    assert source.last_error is not None


def test_a_missing_file_is_refused(source: PolicySource, policy_file: Path) -> None:
    policy_file.unlink()
    with pytest.raises(PolicyError, match="cannot read"):
        source.reload()
    assert source.version == 1


def test_a_valid_reload_after_a_refused_one_clears_the_error(
    source: PolicySource, policy_file: Path
) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError):
        source.reload()
    policy_file.write_text(CHANGED, encoding="utf-8")
    source.reload()
    assert (source.version, source.last_error) == (2, None)


def test_poll_applies_a_moved_file_once_it_holds_still_and_logs_a_refused_one(
    source: PolicySource, policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert source.poll() is False  # nothing moved
    _rewrite(policy_file, INVALID)
    assert source.poll() is False  # moved: it may still be being written
    with caplog.at_level(logging.ERROR, logger="live.policy_file"):
        assert source.poll() is False  # held still: read, and refused
    assert "policy reload refused" in caplog.text
    _rewrite(policy_file, CHANGED)
    assert source.poll() is False
    assert source.poll() is True and source.version == 2


def test_a_file_still_being_written_is_not_read_half_way(
    source: PolicySource, policy_file: Path, seen: Seen
) -> None:
    half = CHANGED[: len(CHANGED) // 2]
    _rewrite(policy_file, half)  # the first part of a write
    assert source.poll() is False
    _rewrite(policy_file, CHANGED)  # the rest: size and mtime moved again
    assert source.poll() is False  # still moving
    assert source.poll() is True  # held still: the whole file
    assert source.version == 2 and seen.policies[-1].routing.near_tie == 0.1
    assert source.last_error is None


def test_a_failing_subscriber_is_logged_and_the_others_still_run(
    source: PolicySource, policy_file: Path, seen: Seen, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_: Policy) -> None:
        raise RuntimeError("boom")

    source.subscribe(broken)
    after = Seen()
    source.subscribe(after)
    policy_file.write_text(CHANGED, encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="live.policy_file"):
        source.reload()
    assert len(seen.policies) == len(after.policies) == 1
    assert "policy subscriber failed" in caplog.text


def test_watch_applies_a_changed_file_and_stops_on_its_event(
    source: PolicySource, policy_file: Path
) -> None:
    async def scenario() -> Policy:
        loop = asyncio.get_running_loop()
        applied: asyncio.Future[Policy] = loop.create_future()
        source.subscribe(lambda p: applied.done() or applied.set_result(p))
        stop = asyncio.Event()
        task = asyncio.create_task(source.watch(0.0, stop))
        await asyncio.to_thread(_rewrite, policy_file, CHANGED)
        async with asyncio.timeout(10):  # a hang guard, not a timing assertion
            policy = await applied
            stop.set()
            await task
        return policy

    assert asyncio.run(scenario()).routing.near_tie == 0.1
