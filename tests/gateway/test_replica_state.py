"""Per-replica state (``gateway.replicas``) and the scraper that feeds it
(``gateway.replica_scraper``). The state is pure (times passed in); the scraper is run
for one round at a time against real simulated engines."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from adapters.upstream import UpstreamClient
from adapters.upstream.engine_metrics import EngineKind, EngineLoad
from gateway.openai_request import Operation, parse_request
from gateway.replica_attempts import RequestReplicas
from gateway.replica_scraper import ReplicaScraper
from gateway.replicas import PoolReplicas, prompt_text
from gateway.routing_state import RoutingState
from router.compiled import CompiledPolicy, compile_policy
from router.policy_loader import parse_policy
from router.scoring import RouteRequest
from router.snapshot import PoolRow
from tests.gateway.harness import Engine

POOL = "aws:us-east-1:a"
OTHER = "gcp:us-central1:b"
NOW = 1000.0
REQUEST = RouteRequest(
    model="m", prompt_tokens=100, max_output_tokens=10, slo_class="fast", client_region="here"
)


def _policy(a_endpoints: list[str], b_endpoints: list[str] | None = None) -> CompiledPolicy:
    def pool(pid: str, endpoints: list[str]) -> dict[str, object]:
        provider, region, _ = pid.split(":")
        return {
            "id": pid, "provider": provider, "region": region, "model": "m",
            "upstream_model": "upstream-chat", "gpu_type": "L4", "gpus_per_replica": 1,
            "endpoints": endpoints, "price": {"usd_per_gpu_hour": 1.0},
            "goodput": {"tokens_per_s": 1000, "prefill_tokens_per_s": 10000,
                        "max_concurrency": 4, "tpot_ms": 20},
        }  # fmt: skip

    pools = [pool(POOL, a_endpoints)]
    if b_endpoints:
        pools.append(pool(OTHER, b_endpoints))
    doc = {
        "version": 1,
        "slo_classes": {"fast": {"ttft_ms": 60000, "tpot_ms": 100}},
        "models": {"m": {"default_slo": "fast", "expected_output_tokens": 10}},
        "pools": pools,
        "client_regions": {
            "here": {"rtt_ms": {p["provider"] + ":" + p["region"]: 5 for p in pools}}
        },
        "routing": {"default_client_region": "here"},
        "health": {"replica_failures": 2},
    }
    return compile_policy(parse_policy(yaml.safe_dump(doc)))


def _load(running: float, waiting: float) -> EngineLoad:
    return EngineLoad(EngineKind.VLLM, running, waiting, 0.5)


def _pool(n: int = 2) -> PoolReplicas:
    state = RoutingState(_policy([f"http://r{i}.example:8000" for i in range(n)]))
    return state.replicas.by_id[POOL]


# -- the pure state --------------------------------------------------------------------


def test_failed_scrapes_in_a_row_take_a_replica_out_and_one_success_brings_it_back() -> None:
    pool = _pool()
    pool.on_scrape(0, None, "timeout", NOW)
    assert pool.usable == 2
    pool.on_scrape(0, None, "timeout", NOW + 1)
    assert (pool.usable, pool.state_of(0, NOW + 1)) == (1, "scrape_failing")
    pool.on_scrape(0, _load(1, 0), None, NOW + 2)
    assert (pool.usable, pool.state_of(0, NOW + 2)) == (2, "ready")


def test_an_answer_without_engine_metrics_keeps_the_replica_in_service() -> None:
    pool = _pool()
    for t in range(5):
        pool.on_scrape(0, None, None, NOW + t)
    assert pool.usable == 2 and math.isnan(pool.table.engine_queue[0])


def test_a_picked_replica_is_never_one_the_request_already_failed_on() -> None:
    pool = _pool()
    picks = {pool.pick(None, NOW, exclude=[0]).index for _ in range(4)}  # type: ignore[union-attr]
    assert picks == {1}


def test_failed_requests_in_a_row_eject_a_replica_for_a_backoff() -> None:
    pool = _pool()
    assert pool.on_failure(0, "503", NOW)
    assert pool.on_failure(0, "503", NOW)
    assert pool.state_of(0, NOW) == "ejected"
    assert [pool.pick(None, NOW + 1).index for _ in range(3)] == [1, 1, 1]  # type: ignore[union-attr]
    assert pool.pick(None, NOW + 60) is not None and pool.usable == 2


def test_request_failures_never_eject_the_last_usable_replica() -> None:
    pool = _pool(1)
    for _ in range(5):
        assert not pool.on_failure(0, "503", NOW)
    assert pool.usable == 1


def test_the_engines_queue_drives_the_choice() -> None:
    pool = _pool()
    pool.on_scrape(0, _load(4, 30), None, NOW)
    pool.on_scrape(1, _load(0, 0), None, NOW)
    assert [pool.pick(None, NOW).index for _ in range(4)] == [1, 1, 1, 1]  # type: ignore[union-attr]


def test_in_flight_per_replica_is_counted_and_released() -> None:
    pool = _pool()
    pool.acquire(1)
    pool.acquire(1)
    pool.release(1)
    pool.release(0)
    assert list(pool.inflight) == [0.0, 1.0]


def test_a_reload_keeps_what_is_known_of_replicas_that_stay() -> None:
    state = RoutingState(_policy(["http://r0.example:8000", "http://r1.example:8000"]))
    pool = state.replicas.by_id[POOL]
    pool.on_scrape(1, _load(2, 3), None, NOW)
    pool.acquire(1)
    state.swap_policy(_policy(["http://r1.example:8000", "http://r2.example:8000"]))
    moved = state.replicas.by_id[POOL]
    assert (moved.replicas[0].load, moved.inflight[0], moved.table.engine_queue[0]) == (
        _load(2, 3), 1.0, 5.0,
    )  # fmt: skip


def test_replicas_the_node_group_reports_replace_the_static_list_and_follow_it() -> None:
    state = RoutingState(_policy(["http://static.example:8000"]))
    found = ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    state.swap_snapshot({POOL: PoolRow(endpoints=found)}, NOW)
    pool = state.replicas.by_id[POOL]
    assert pool.table.ids == found
    pool.on_scrape(1, _load(1, 1), None, NOW)
    pool.acquire(1)
    state.swap_snapshot({POOL: PoolRow(endpoints=found[1:])}, NOW)
    left = state.replicas.by_id[POOL]
    assert (left.table.ids, left.inflight[0], left.replicas[0].load) == (
        found[1:], 1.0, _load(1, 1),
    )  # fmt: skip
    state.swap_snapshot({POOL: PoolRow()}, NOW)
    assert state.replicas.by_id[POOL].table.ids == ("http://static.example:8000",)


def test_engine_load_from_elsewhere_deepens_the_pools_queue() -> None:
    state = RoutingState(_policy(["http://a.example:8000"], ["http://b.example:8000"]))
    before = float(state.rank(REQUEST, NOW).ttft_ms[0])
    state.acquire(POOL)
    # Ten requests running or waiting at the engine, one of them this gateway's own.
    state.set_engine_load([10.0, 0.0])
    after = state.rank(REQUEST, NOW)
    assert state.engine_extra(POOL) == 9.0
    assert float(after.load[0]) == (1 + 9 + 1) / 4 and float(after.ttft_ms[0]) > before


def test_a_pool_without_a_usable_replica_is_routed_around() -> None:
    state = RoutingState(_policy(["http://a.example:8000"], ["http://b.example:8000"]))
    pool = state.replicas.by_id[POOL]
    for t in range(2):
        pool.on_scrape(0, None, "refused", NOW + t)
    state.set_engine_load(state.replicas.engine_load())
    assert [pid for pid, _, _ in state.rank(REQUEST, NOW).attempts()] == [OTHER]


def test_prompt_text_joins_chat_roles_and_contents_in_order() -> None:
    payload = {"messages": [{"role": "system", "content": "be brief"},
                            {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}  # fmt: skip
    assert prompt_text(payload) == "system\nbe brief\nuser\nhi"


def _chat_request(text: str) -> RequestReplicas:
    state = RoutingState(_policy(["http://r0.example:8000", "http://r1.example:8000"]))
    body = f'{{"model": "m", "messages": [{{"role": "user", "content": "{text}"}}]}}'
    parsed = parse_request(body.encode(), Operation.CHAT)
    return RequestReplicas(
        state.replicas, parsed, None, prefix_affinity=True, monotonic=lambda: NOW
    )


def test_a_failed_attempt_is_retried_on_the_pools_other_replica_then_not_again() -> None:
    replicas = _chat_request("hello")
    first = replicas.pick(POOL)
    assert first is not None and replicas.another(first)
    second = replicas.pick(POOL)
    assert second is not None and second.index != first.index
    assert not replicas.another(second) and replicas.pick(POOL) is None


def test_only_a_model_with_prefix_affinity_hashes_its_prompt() -> None:
    long_prompt = "x" * 1024
    assert len(_chat_request(long_prompt).request.block_hashes) == 4
    state = RoutingState(_policy(["http://r0.example:8000"]))
    parsed = parse_request(
        f'{{"model": "m", "prompt": "{long_prompt}"}}'.encode(), Operation.COMPLETION
    )
    plain = RequestReplicas(state.replicas, parsed, "s-1", prefix_affinity=False)
    assert (plain.request.block_hashes, plain.request.session_id) == ([], "s-1")


# -- the scraper, against real engines ---------------------------------------------------


class _CountingUpstream:
    """Answers every GET with a vLLM page (1 running, 2 waiting) and counts the URLs."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        self.urls.append(url)
        return 200, b"vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n"


def test_an_address_several_pools_share_is_scraped_once_per_round_for_all() -> None:
    shared = "http://shared.example:8000"
    state = RoutingState(_policy([shared, "http://own.example:8000"], [shared]))
    upstream = _CountingUpstream()
    asyncio.run(ReplicaScraper(state, upstream).round())  # type: ignore[arg-type]
    assert sorted(upstream.urls) == ["http://own.example:8000/metrics", f"{shared}/metrics"]
    queues = [list(state.replicas.by_id[pid].table.engine_queue) for pid in (POOL, OTHER)]
    assert queues == [[3.0, 3.0], [3.0]]


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    started = [Engine("a10g-llama-3.1-8b", "upstream-chat", 1.0, seed=i).start() for i in (1, 2)]
    try:
        yield started
    finally:
        for engine in started:
            engine.kill()


def test_a_scrape_round_reads_each_engines_load_and_marks_a_dead_one(
    engines: list[Engine], tmp_path: Path
) -> None:
    state = RoutingState(_policy([e.url for e in engines]))
    engines[1].kill()

    async def rounds() -> None:
        upstream = UpstreamClient()
        try:
            scraper = ReplicaScraper(state, upstream)
            for _ in range(2):
                await scraper.round()
        finally:
            await upstream.close()

    asyncio.run(rounds())
    pool = state.replicas.by_id[POOL]
    live, dead = pool.replicas
    assert live.load is not None and live.load.kind is EngineKind.VLLM
    assert live.scrape_failures == 0 and pool.table.engine_queue[0] == 0.0
    assert (dead.scrape_failures, pool.usable, pool.state_of(1, 0.0)) == (2, 1, "scrape_failing")
