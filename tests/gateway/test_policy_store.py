"""PolicyStore: reloads swap in a valid policy and refuse an invalid one."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from base.errors import PolicyError
from gateway.policy_store import PolicyStore
from router.compiled import CompiledPolicy

FIXTURE = Path(__file__).parent.parent / "fixtures" / "router_policy.yaml"
VALID = FIXTURE.read_text(encoding="utf-8")
CHANGED = VALID.replace("near_tie: 0.02", "near_tie: 0.1")
# Valid YAML, invalid policy: a pool that names no known model.
INVALID = VALID.replace("model: llama-3.1-8b", "model: nonexistent-model")


class Swaps:
    """An on_swap callback that records what it was given."""

    def __init__(self) -> None:
        self.policies: list[CompiledPolicy] = []

    def __call__(self, policy: CompiledPolicy) -> None:
        self.policies.append(policy)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(VALID, encoding="utf-8")
    return path


@pytest.fixture
def swaps() -> Swaps:
    return Swaps()


@pytest.fixture
def store(policy_file: Path, swaps: Swaps) -> PolicyStore:
    return PolicyStore(policy_file, swaps)


def _rewrite(path: Path, text: str) -> None:
    """Write ``text`` and move the mtime on, so a watcher sees a change even on a coarse
    filesystem clock."""
    before = path.stat()
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def test_the_fixtures_differ_where_intended() -> None:
    assert (CHANGED != VALID, INVALID != VALID) == (True, True)


def test_load_initial_compiles_the_file(policy_file: Path) -> None:
    compiled = PolicyStore.load_initial(policy_file)
    assert compiled.size == 3


def test_load_initial_of_an_invalid_file_raises(policy_file: Path) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError):
        PolicyStore.load_initial(policy_file)


def test_a_new_store_is_at_version_one_without_error(store: PolicyStore) -> None:
    assert (store.version, store.last_error) == (1, None)


def test_reload_of_a_changed_file_swaps_in_the_new_policy(
    store: PolicyStore, policy_file: Path, swaps: Swaps
) -> None:
    policy_file.write_text(CHANGED, encoding="utf-8")
    returned = store.reload()
    assert (len(swaps.policies), swaps.policies[0] is returned) == (1, True)
    assert returned.policy.routing.near_tie == 0.1


def test_reload_of_a_changed_file_bumps_the_version(store: PolicyStore, policy_file: Path) -> None:
    policy_file.write_text(CHANGED, encoding="utf-8")
    store.reload()
    assert store.version == 2


def test_reload_of_an_invalid_file_raises_policy_error(
    store: PolicyStore, policy_file: Path
) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError, match="nonexistent-model"):
        store.reload()


def test_reload_of_an_invalid_file_does_not_swap(
    store: PolicyStore, policy_file: Path, swaps: Swaps
) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError):
        store.reload()
    assert swaps.policies == []


def test_reload_of_an_invalid_file_keeps_the_version_and_records_the_error(
    store: PolicyStore, policy_file: Path
) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError):
        store.reload()
    assert (store.version, "nonexistent-model" in (store.last_error or "")) == (1, True)


def test_reload_of_a_missing_file_is_refused(store: PolicyStore, policy_file: Path) -> None:
    policy_file.unlink()
    with pytest.raises(PolicyError):
        store.reload()
    assert (store.version, store.last_error is not None) == (1, True)


def test_reload_of_unparsable_yaml_is_refused(
    store: PolicyStore, policy_file: Path, swaps: Swaps
) -> None:
    policy_file.write_text("pools: [unclosed", encoding="utf-8")
    with pytest.raises(PolicyError):
        store.reload()
    assert (swaps.policies, store.version) == ([], 1)


def test_a_valid_reload_after_a_refused_one_clears_the_error(
    store: PolicyStore, policy_file: Path
) -> None:
    policy_file.write_text(INVALID, encoding="utf-8")
    with pytest.raises(PolicyError):
        store.reload()
    policy_file.write_text(CHANGED, encoding="utf-8")
    store.reload()
    assert (store.version, store.last_error) == (2, None)


def test_watch_reloads_when_the_file_changes(policy_file: Path) -> None:
    async def scenario() -> CompiledPolicy:
        swapped: asyncio.Future[CompiledPolicy] = asyncio.get_running_loop().create_future()
        store = PolicyStore(policy_file, swapped.set_result)
        task = asyncio.create_task(store.watch(0.0))
        await asyncio.to_thread(_rewrite, policy_file, CHANGED)
        try:
            async with asyncio.timeout(10):  # a hang guard, not a timing assertion
                return await swapped
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    assert asyncio.run(scenario()).policy.routing.near_tie == 0.1
