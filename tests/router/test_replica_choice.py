"""Choosing a replica inside a pool: least wait, prefix affinity under bounded load, sessions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from base.errors import RoutingError
from router.prefix_index import PrefixIndex, prompt_block_hashes
from router.replica_choice import (
    AffinitySettings,
    PoolTiming,
    ReplicaChooser,
    ReplicaRequest,
    ReplicaTable,
)
from router.replica_timing import wait_ms

IDS = tuple(f"10.0.0.{i}:8000" for i in range(8))
TIMING = PoolTiming(
    slots=16, prefill_ms_per_token=0.1, tpot_base_ms=10.0, tpot_full_ms=30.0, mean_output_tokens=100
)
SYSTEM = "You are a careful assistant. Answer in one paragraph, cite sources. " * 20


def prompt(text: str) -> ReplicaRequest:
    return ReplicaRequest(prompt_tokens=len(text) // 4, block_hashes=prompt_block_hashes(text))


def table(inflight: list[float] | np.ndarray | None = None, **kw: object) -> ReplicaTable:
    return ReplicaTable.build(IDS, inflight=inflight, **kw)  # type: ignore[arg-type]


def test_least_wait_picks_the_least_loaded_replica() -> None:
    chooser = ReplicaChooser()
    choice = chooser.choose(
        prompt("hi"), table([3, 1, 2, 2, 5, 4, 0, 1]), TIMING, prefix_affinity=False
    )
    assert (choice.index, choice.reason) == (6, "least_wait")


def test_predicted_wait_counts_the_queue_beyond_the_batch() -> None:
    one = ReplicaTable.build(("r",), inflight=[20.0])
    choice = ReplicaChooser().choose(ReplicaRequest(1000), one, TIMING, prefix_affinity=False)
    # 5 requests ahead of it x (100 tokens x 30 ms / 16 slots) + a full batch's step
    # (16 x 20 ms / 16) + the first step + 1000 tokens of prefill at 0.1 ms.
    assert choice.predicted_ms == pytest.approx(5 * 187.5 + 20.0 + 10.0 + 100.0)


def test_equally_good_replicas_take_turns() -> None:
    chooser = ReplicaChooser()
    chosen = [
        chooser.pick(ReplicaRequest(100), table(), TIMING, prefix_affinity=False).index
        for _ in range(len(IDS))
    ]
    assert sorted(chosen) == list(range(len(IDS)))


def test_an_engine_queue_from_elsewhere_loses_traffic_with_nothing_in_flight_here() -> None:
    chooser = ReplicaChooser()
    queue = [40.0, np.nan, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    inflight = np.zeros(len(IDS))
    for _ in range(30):
        choice = chooser.pick(
            prompt("q"), table(inflight, engine_queue=queue), TIMING, prefix_affinity=False
        )
        assert choice.index != 0
        inflight[choice.index] += 1


def test_requests_sharing_a_prefix_land_on_the_same_replica() -> None:
    chooser = ReplicaChooser()
    chosen = {
        chooser.pick(
            prompt(SYSTEM + f"Question {i}: why?"), table(), TIMING, prefix_affinity=True
        ).replica_id
        for i in range(20)
    }
    assert len(chosen) == 1


def test_different_prefixes_spread_over_the_replicas() -> None:
    chooser = ReplicaChooser()
    chosen = {
        chooser.pick(prompt(f"{i:04d} " + SYSTEM), table(), TIMING, prefix_affinity=True).replica_id
        for i in range(64)
    }
    assert len(chosen) >= 6


def test_the_longest_matched_prefix_wins() -> None:
    chooser = ReplicaChooser()
    short, longer = SYSTEM[:512], SYSTEM[:1024]
    chooser.record(prompt(short), IDS[2], prefix_affinity=True)
    chooser.record(prompt(longer), IDS[5], prefix_affinity=True)
    choice = chooser.choose(prompt(SYSTEM), table(), TIMING, prefix_affinity=True)
    assert (choice.replica_id, choice.reason) == (IDS[5], "prefix")
    assert choice.matched_tokens == 4 * 64


def test_a_prefix_hit_predicts_a_shorter_time_to_first_token() -> None:
    chooser = ReplicaChooser()
    req = prompt(SYSTEM)
    cold = chooser.pick(req, table(), TIMING, prefix_affinity=True)
    warm = chooser.choose(req, table(), TIMING, prefix_affinity=True)
    assert warm.replica_id == cold.replica_id
    assert warm.matched_tokens == 5 * 64
    assert warm.predicted_ms == pytest.approx(cold.predicted_ms - 0.1 * 5 * 64)


def test_choose_alone_learns_nothing() -> None:
    chooser = ReplicaChooser()
    chooser.choose(prompt(SYSTEM), table(), TIMING, prefix_affinity=True)
    assert len(chooser.index) == 0


def test_two_gateways_that_never_talked_send_a_new_prefix_to_the_same_replica() -> None:
    one, two = ReplicaChooser(), ReplicaChooser()
    for i in range(20):
        req = prompt(f"conversation {i} " + SYSTEM)
        a = one.choose(req, table(), TIMING, prefix_affinity=True)
        b = two.choose(req, table(), TIMING, prefix_affinity=True)
        assert (a.replica_id, a.reason) == (b.replica_id, "hash")


def test_a_hot_prefix_spreads_once_the_bounded_load_limit_is_hit() -> None:
    chooser = ReplicaChooser(AffinitySettings(load_factor=1.25))
    inflight = np.full(len(IDS), 4.0)
    first = None
    for i in range(48):
        choice = chooser.pick(
            prompt(SYSTEM + f"user {i}"), table(inflight), TIMING, prefix_affinity=True
        )
        first = first or choice.replica_id
        inflight[choice.index] += 1
        # Bounded load: no replica above 1.25 x the mean (rounded up), ever.
        assert inflight.max() <= math.ceil(1.25 * inflight.mean())
    hot = inflight - 4.0
    assert hot[IDS.index(first)] == hot.max()
    assert np.count_nonzero(hot) >= 3
    # Replicas the prefix spilled to hold it now: the next request finds a match there.
    nxt = chooser.choose(prompt(SYSTEM + "again"), table(inflight), TIMING, prefix_affinity=True)
    assert nxt.reason == "prefix"


def test_affinity_holds_while_the_bound_allows() -> None:
    chooser = ReplicaChooser()
    # The bound, ceil(1.25 x (96 + k) / 8), is 16 for each of these four requests, and 16
    # is the batch size: the matched replica can take them all without queueing.
    inflight = np.full(len(IDS), 12.0)
    chosen = set()
    for i in range(4):
        choice = chooser.pick(
            prompt(SYSTEM + f"user {i}"), table(inflight), TIMING, prefix_affinity=True
        )
        inflight[choice.index] += 1
        chosen.add(choice.replica_id)
    assert len(chosen) == 1


def test_at_low_load_a_shared_prefix_stays_put_up_to_the_minimum_bound() -> None:
    chooser = ReplicaChooser(AffinitySettings(min_bound=4))
    inflight = np.zeros(len(IDS))
    chosen = []
    for i in range(5):
        choice = chooser.pick(
            prompt(SYSTEM + f"user {i}"), table(inflight), TIMING, prefix_affinity=True
        )
        inflight[choice.index] += 1
        chosen.append(choice.replica_id)
    # ceil(1.25 x 5 / 8) is 1, but no replica is refused below 4 requests.
    assert len(set(chosen[:4])) == 1
    assert chosen[4] != chosen[0]


def test_affinity_yields_when_the_matched_queue_costs_more_than_the_cache_saves() -> None:
    chooser = ReplicaChooser()
    chooser.record(prompt(SYSTEM), IDS[0], prefix_affinity=True)
    # All replicas past their 16 batch slots: a request more queued waits a whole
    # 100-token service / 16 slots (~190 ms) to save ~32 ms of prefill.
    inflight = np.full(len(IDS), 19.0)
    inflight[0] = 20.0
    choice = chooser.choose(prompt(SYSTEM), table(inflight), TIMING, prefix_affinity=True)
    assert choice.index != 0
    assert choice.reason == "least_wait"


def test_a_removed_replicas_prefixes_move_and_every_request_gets_a_replica() -> None:
    chooser = ReplicaChooser()
    prefixes = [f"tenant {i} " + SYSTEM for i in range(40)]
    before = {p: chooser.pick(prompt(p), table(), TIMING, prefix_affinity=True) for p in prefixes}
    gone = before[prefixes[0]].replica_id
    chooser.forget(gone)
    rest = ReplicaTable.build(tuple(r for r in IDS if r != gone))
    after = {}
    for p in prefixes:
        choice = chooser.pick(prompt(p + " follow-up"), rest, TIMING, prefix_affinity=True)
        assert choice.replica_id != gone
        after[p] = choice.replica_id
    for p in prefixes:
        if before[p].replica_id != gone:
            assert after[p] == before[p].replica_id  # only the removed replica's keys move
        else:
            again = chooser.choose(prompt(p + " third"), rest, TIMING, prefix_affinity=True)
            assert (again.replica_id, again.reason) == (after[p], "prefix")


def test_a_draining_replica_gets_nothing_even_for_its_own_prefix() -> None:
    chooser = ReplicaChooser()
    first = chooser.pick(prompt(SYSTEM), table(), TIMING, prefix_affinity=True)
    available = [rid != first.replica_id for rid in IDS]
    for i in range(10):
        choice = chooser.pick(
            prompt(SYSTEM + str(i)), table(available=available), TIMING, prefix_affinity=True
        )
        assert choice.replica_id != first.replica_id


def test_no_available_replica_is_a_routing_error() -> None:
    with pytest.raises(RoutingError):
        ReplicaChooser().choose(
            prompt("x"), table(available=[False] * len(IDS)), TIMING, prefix_affinity=False
        )


def test_session_ids_stick() -> None:
    chooser = ReplicaChooser()
    rng = np.random.default_rng(7)
    first = chooser.pick(
        ReplicaRequest(100, session_id="chat-42"), table(), TIMING, prefix_affinity=False
    )
    for turn in range(20):
        inflight = rng.integers(3, 7, size=len(IDS)).astype(float)
        inflight[first.index] = 3.0
        choice = chooser.pick(
            ReplicaRequest(100 + turn, session_id="chat-42"),
            table(inflight),
            TIMING,
            prefix_affinity=False,
        )
        assert (choice.replica_id, choice.reason) == (first.replica_id, "session")


def test_new_sessions_spread_by_hash() -> None:
    chooser = ReplicaChooser()
    chosen = {
        chooser.pick(
            ReplicaRequest(10, session_id=f"s{i}"), table(), TIMING, prefix_affinity=False
        ).replica_id
        for i in range(64)
    }
    assert len(chosen) >= 6


def test_a_session_moves_when_its_replica_leaves_and_then_sticks_again() -> None:
    chooser = ReplicaChooser()
    first = chooser.pick(ReplicaRequest(10, session_id="s"), table(), TIMING, prefix_affinity=False)
    rest = ReplicaTable.build(tuple(r for r in IDS if r != first.replica_id))
    moved = chooser.pick(ReplicaRequest(10, session_id="s"), rest, TIMING, prefix_affinity=False)
    assert moved.replica_id != first.replica_id
    again = chooser.pick(ReplicaRequest(10, session_id="s"), rest, TIMING, prefix_affinity=False)
    assert (again.replica_id, again.reason) == (moved.replica_id, "session")


def test_a_session_leaves_a_replica_over_the_load_bound() -> None:
    chooser = ReplicaChooser()
    first = chooser.pick(ReplicaRequest(10, session_id="s"), table(), TIMING, prefix_affinity=False)
    inflight = np.ones(len(IDS))
    inflight[first.index] = 9.0
    moved = chooser.choose(
        ReplicaRequest(10, session_id="s"), table(inflight), TIMING, prefix_affinity=False
    )
    assert moved.replica_id != first.replica_id


def test_block_hashes_chain_and_are_the_same_in_every_process() -> None:
    a = prompt_block_hashes("a" * 256 + "b" * 256)
    b = prompt_block_hashes("c" * 256 + "b" * 256)
    assert a[1] != b[1]
    assert prompt_block_hashes("a" * 600) == prompt_block_hashes("a" * 512)
    # Fixed values: a hash that changed between processes or releases would split the
    # gateways' agreement on where a prefix goes.
    assert prompt_block_hashes("x" * 512) == [8353643016785631760, 4254614521125935632]
    assert len(prompt_block_hashes("z" * 10_000, max_blocks=8)) == 8


def test_index_forgets_least_recently_used_tails_first() -> None:
    index = PrefixIndex(blocks_per_replica=4)
    index.record([1, 2, 3], "r")
    index.record([7, 8], "r")
    assert index.blocks_of("r") == 4
    assert index.match([1, 2, 3]) == [(2, 1 << index.slot("r"))]


def test_index_forget_frees_the_replica_and_its_hashes() -> None:
    index = PrefixIndex()
    index.record([1, 2], "a")
    index.record([1, 2, 3], "b")
    index.forget("b")
    assert index.match([1, 2, 3]) == [(2, 1 << index.slot("a"))]
    index.forget("a")
    assert len(index) == 0


def test_a_prefix_many_replicas_hold_goes_to_the_least_loaded_of_them() -> None:
    ids = tuple(f"r{i}" for i in range(16))
    chooser = ReplicaChooser()
    for rid in ids[:12]:  # more holders than the bit-walk handles: the mask is unpacked
        chooser.record(prompt(SYSTEM), rid, prefix_affinity=True)
    inflight = np.full(16, 4.0)  # the four without the prefix are the least loaded
    inflight[:12] = 6.0
    inflight[7] = 5.0
    choice = chooser.choose(
        prompt(SYSTEM + "?"), ReplicaTable.build(ids, inflight), TIMING, prefix_affinity=True
    )
    assert (choice.replica_id, choice.reason) == ("r7", "prefix")


def _reference_prefix_choice(
    chooser: ReplicaChooser, request: ReplicaRequest, t: ReplicaTable, timing: PoolTiming
) -> int:
    """The definition, over the whole pool: the eligible replica of least predicted time
    to first token (lowest position on ties), matched prefixes as skipped prefill."""
    load = np.fmax(t.inflight, t.engine_queue)
    avail = t.available
    n = int(avail.sum())
    bound = math.ceil(chooser.settings.load_factor * (float(load[avail].sum()) + 1.0) / n)
    bound = max(bound, min(chooser.settings.min_bound, timing.slots))
    eligible = avail & (load <= bound - 1.0)
    if not eligible.any():
        eligible = avail & (load <= load[avail].min())
    depth = np.zeros(len(t.ids))
    for blocks, mask in chooser.index.match(request.block_hashes):
        for i, rid in enumerate(t.ids):
            if mask >> chooser.index.slot(rid) & 1:
                depth[i] = blocks
    cached = np.minimum(depth * chooser.settings.block_tokens, max(request.prompt_tokens - 1, 0))
    wait = [wait_ms(float(x), timing) for x in load]
    score = np.array(wait) - timing.prefill_ms_per_token * cached
    return int(np.where(eligible, score, np.inf).argmin())


@pytest.mark.parametrize("seed", range(6))
def test_prefix_choice_equals_the_whole_pool_argmin(seed: int) -> None:
    """Scoring only the least loaded replica per matched depth picks what an argmin over
    every replica would: narrow and wide (unpacked) masks, replicas unavailable,
    fractional engine loads, loads over the bound."""
    rng = np.random.default_rng(seed)
    ids = tuple(f"10.2.0.{i}:8000" for i in range(40))
    chooser = ReplicaChooser(AffinitySettings(block_tokens=64))
    prefixes = [[int(x) for x in rng.integers(1, 2**62, size=6)] for _ in range(12)]
    for _ in range(400):
        hashes = prefixes[int(rng.integers(12))][: int(rng.integers(1, 7))]
        chooser.record(
            ReplicaRequest(400, hashes), ids[int(rng.integers(40))], prefix_affinity=True
        )
    for _ in range(200):
        engine = np.where(rng.random(40) < 0.3, rng.random(40) * 30, np.nan)
        t = ReplicaTable.build(ids, rng.integers(0, 25, size=40), engine, rng.random(40) < 0.85)
        if not t.available.any():
            continue
        request = ReplicaRequest(int(rng.integers(1, 500)), prefixes[int(rng.integers(12))])
        choice = chooser.choose(request, t, TIMING, prefix_affinity=True)
        assert choice.index == _reference_prefix_choice(chooser, request, t, TIMING)
