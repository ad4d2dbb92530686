"""``tune_gc``: what is alive at start-up leaves the collector's walks, and the young
generation is sized for a server, so that steady traffic triggers no collection."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from skyroute.serve import GC_GEN0_THRESHOLD, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_start_up_objects_are_frozen_and_the_young_generation_is_larger() -> None:
    survivor = [{"policy": n} for n in range(1_000)]
    tune_gc()
    assert gc.get_freeze_count() >= len(survivor)
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
    # What a request allocates and drops (net zero) never reaches a collection.
    collections_before = sum(s["collections"] for s in gc.get_stats())
    for _ in range(20_000):
        _ = {"request": [1, 2, 3]}
    assert sum(s["collections"] for s in gc.get_stats()) == collections_before


@pytest.mark.usefixtures("restored_gc")
def test_tuning_twice_is_harmless() -> None:
    tune_gc()
    frozen = gc.get_freeze_count()
    tune_gc()
    assert gc.get_freeze_count() >= frozen
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD


@pytest.mark.usefixtures("restored_gc")
def test_the_collector_is_on_after_tuning_when_start_up_turned_it_off() -> None:
    gc.disable()
    try:
        tune_gc()
        assert gc.isenabled()
    finally:
        gc.enable()
