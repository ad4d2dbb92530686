"""The in-pool simulator (``simulator.inpool``) and the Mooncake trace format with
``hash_ids`` (``simulator.prefix_trace``): hand-checkable arithmetic on tiny pools,
then the policies' order on a real slice of the Mooncake synthetic trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from router.policy import SLOClass
from simengine.perf_model import EngineProfile
from simulator.errors import SimulationError
from simulator.inpool import POLICIES, InPoolPool, InPoolSetup, simulate_in_pool
from simulator.prefix_trace import PrefixTrace, read_prefix_jsonl
from simulator.trace import from_columns

DATA = Path(__file__).parent / "data"
MOONCAKE = DATA / "mooncake_hash_first300.jsonl"
# 1000 prompt tokens/s per request, TPOT 10 ms, 4 slots, 100 blocks of 10 tokens cached.
PROFILE = EngineProfile("t", 4, 1000.0, 10.0, 10.0, 1000.0, 100_000, 1000)


def _setup(replicas: int = 2, kv_blocks: int = 100) -> InPoolSetup:
    pool = InPoolPool("aws:x:p", PROFILE, replicas, 1.0, kv_blocks, 4)
    return InPoolSetup((pool,), SLOClass(ttft_ms=500, tpot_ms=50), block_tokens=10)


def _trace(times: list[float], blocks: list[tuple[int, ...]], output: int = 1) -> PrefixTrace:
    prompt = [10 * len(b) for b in blocks]
    return PrefixTrace(from_columns(times, prompt, [output] * len(times)), tuple(blocks), 10)


def test_the_mooncake_format_reads_block_ids_and_millisecond_timestamps() -> None:
    trace = read_prefix_jsonl(MOONCAKE)
    assert len(trace) == 300 and trace.trace.time_unit == "ms"
    assert trace.blocks[0][:3] == (0, 1, 2) and trace.block_tokens == 512
    # 512-token blocks: the ids cover the prompt (the last one partly).
    assert all(
        len(b) == -(-int(p) // 512) for b, p in zip(trace.blocks, trace.prompt_tokens, strict=True)
    )


def test_block_ids_follow_their_requests_when_arrivals_are_sorted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 2000, "input_length": 5, "output_length": 1, "hash_ids": [7]}\n'
        '{"timestamp": 1000, "input_length": 9, "output_length": 1, "hash_ids": [8, 9]}\n'
    )
    trace = read_prefix_jsonl(path, time_unit="ms")
    assert list(trace.prompt_tokens) == [9, 5] and trace.blocks == ((8, 9), (7,))
    assert list(trace.arrival_s) == [0.0, 1.0]


def test_a_line_without_hash_ids_is_refused_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    with pytest.raises(SimulationError, match=":1: bad trace line"):
        read_prefix_jsonl(path)


def test_a_repeated_prompt_prefills_only_what_is_not_cached() -> None:
    # One replica: the second request reuses 4 of its 5 blocks (the last token is
    # always computed, so 49 of 50 tokens would be the most), prefilling 10 tokens.
    trace = _trace([0.0, 10.0], [(1, 2, 3, 4, 5), (1, 2, 3, 4, 6)])
    result = simulate_in_pool(trace, _setup(replicas=1), "least-queue")
    assert result.ttft_s.tolist() == pytest.approx([0.05, 0.01])
    assert result.hit_rate == pytest.approx(40 / 100)


def test_requests_queue_for_a_batch_slot_on_their_replica() -> None:
    # Five 1 s prefills at once on one 4-slot replica: the fifth waits for a slot.
    trace = _trace([0.0] * 5, [tuple(range(k * 100, k * 100 + 100)) for k in range(5)])
    result = simulate_in_pool(trace, _setup(replicas=1, kv_blocks=0), "least-queue")
    assert sorted(result.ttft_s.tolist()) == pytest.approx([1.0, 1.0, 1.0, 1.0, 2.0])
    assert result.slo_attainment == 0.0


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(SimulationError, match="unknown in-pool policy"):
        simulate_in_pool(_trace([0.0], [(1,)]), _setup(), "sticky")


def test_prefix_affinity_keeps_shared_prefixes_where_they_are_cached() -> None:
    # Four prefixes, each asked for 20 times, spaced out so load stays low: affinity
    # sends each back to the replica holding it; random placement misses often.
    rng = np.random.default_rng(3)
    heads = [tuple(range(k * 1000, k * 1000 + 40)) for k in range(4)]
    blocks = [heads[int(rng.integers(4))] + (10_000 + i,) for i in range(80)]
    trace = _trace([0.5 * i for i in range(80)], blocks)
    setup = _setup(replicas=4, kv_blocks=100)
    affinity = simulate_in_pool(trace, setup, "prefix-affinity")
    random = simulate_in_pool(trace, setup, "random")
    ideal = simulate_in_pool(trace, setup, "ideal-cache")
    assert affinity.hit_rate > random.hit_rate + 0.1
    assert ideal.hit_rate >= affinity.hit_rate
    assert affinity.ttft_ms(50) < random.ttft_ms(50)


def test_every_policy_serves_every_request_of_a_mooncake_slice_once() -> None:
    trace = read_prefix_jsonl(MOONCAKE).head(120)
    pools = (
        InPoolPool("aws:x:cheap", PROFILE, 3, 1.0, 500, 4),
        InPoolPool("aws:x:dear", PROFILE, 2, 2.0, 500, 4),
    )
    setup = InPoolSetup(pools, SLOClass(ttft_ms=2000, tpot_ms=50), block_tokens=512)
    for policy in POLICIES:
        result = simulate_in_pool(trace, setup, policy, seed=1)
        assert (result.pool >= 0).all() and len(result.pool) == 120, policy
        assert np.isfinite(result.ttft_s).all() and (result.ttft_s >= 0).all(), policy
        # 3 replicas at $1/h and 2 at $2/h over the run.
        assert result.cost_usd == pytest.approx(7.0 * result.duration_s / 3600)
        assert result.imbalance >= 1.0 and 0.0 <= result.hit_rate <= 1.0
