"""Engine /metrics pages (fixtures in tests/adapters/fixtures, each naming its source)
parsed into one EngineLoad per replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.upstream.engine_metrics import EngineKind, EngineLoad, parse_engine_load
from base.errors import EngineMetricsError, UpstreamError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_vllm_v1_sums_requests_over_data_parallel_engines() -> None:
    load = parse_engine_load(fixture("vllm_v1_dp2.prom"))
    assert load.kind is EngineKind.VLLM
    assert (load.running, load.waiting) == (12.0, 4.0)


def test_vllm_v1_kv_use_is_the_mean_over_engines() -> None:
    load = parse_engine_load(fixture("vllm_v1_dp2.prom"))
    assert load.kv_cache_usage == pytest.approx(0.40)


def test_vllm_v1_hit_rate_comes_from_the_token_counters() -> None:
    load = parse_engine_load(fixture("vllm_v1_dp2.prom"))
    assert load.prefix_cache_queries == 15000.0
    assert load.prefix_cache_hits == 6000.0
    assert load.prefix_cache_hit_rate == pytest.approx(0.4)


def test_vllm_v1_prefers_the_current_kv_name_over_the_deprecated_one() -> None:
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
    )
    assert parse_engine_load(text).kv_cache_usage == pytest.approx(0.2)


def test_vllm_v0_reads_the_old_kv_gauge_and_hit_rate_gauge() -> None:
    load = parse_engine_load(fixture("vllm_v0.prom"))
    assert load.kind is EngineKind.VLLM
    assert (load.running, load.waiting) == (2.0, 9.0)
    assert load.kv_cache_usage == pytest.approx(0.9731)
    assert load.prefix_cache_hit_rate == pytest.approx(0.25)
    assert load.prefix_cache_queries is None


def test_vllm_v0_hit_rate_of_minus_one_means_caching_off() -> None:
    text = (
        'vllm:num_requests_running{model_name="m"} 1.0\n'
        'vllm:gpu_prefix_cache_hit_rate{model_name="m"} -1.0\n'
    )
    assert parse_engine_load(text).prefix_cache_hit_rate is None


def test_vllm_counters_with_no_queries_give_no_hit_rate() -> None:
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 0.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0\n'
    )
    assert parse_engine_load(text).prefix_cache_hit_rate is None


def test_sglang_docs_sample() -> None:
    load = parse_engine_load(fixture("sglang_docs.prom"))
    assert load.kind is EngineKind.SGLANG
    assert (load.running, load.waiting) == (162.0, 2826.0)
    assert load.kv_cache_usage == pytest.approx(0.28)
    assert load.prefix_cache_hit_rate == pytest.approx(0.007507552643049313)


def test_sglang_sums_requests_and_averages_fractions_over_dp_ranks() -> None:
    load = parse_engine_load(fixture("sglang_dp2.prom"))
    assert (load.running, load.waiting) == (16.0, 4.0)
    assert load.kv_cache_usage == pytest.approx(0.4)
    assert load.prefix_cache_hit_rate == pytest.approx(0.4)


def test_tgi_reads_batch_and_queue_and_reports_no_kv() -> None:
    load = parse_engine_load(fixture("tgi.prom"))
    assert load == EngineLoad(EngineKind.TGI, running=24.0, waiting=7.0)


def test_tgi_queue_gauge_alone_reads_as_an_empty_batch() -> None:
    load = parse_engine_load("# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n")
    assert (load.kind, load.running, load.waiting) == (EngineKind.TGI, 0.0, 3.0)


def test_nan_samples_and_malformed_lines_are_skipped() -> None:
    text = (
        "garbage line without value\n"
        'vllm:num_requests_running{engine="0",model_name="m"} NaN\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4\n'
        'vllm:num_requests_running{engine="2",model_name="m"} not-a-number\n'
        'vllm:num_requests_running{engine="3",model_name="m" 7\n'
        "vllm:num_requests_waiting\n"
        'vllm:num_requests_waiting{model_name="m"} 2 1712345678000\n'
    )
    load = parse_engine_load(text)
    assert (load.running, load.waiting) == (4.0, 2.0)


def test_label_values_may_hold_braces_and_quotes() -> None:
    text = 'vllm:num_requests_running{model_name="a}b\\"c,d"} 5\n'
    assert parse_engine_load(text).running == 5.0


def test_similar_names_are_not_confused() -> None:
    text = (
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1\n'
    )
    assert parse_engine_load(text).waiting == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<html><body>502 Bad Gateway</body></html>",
        "# HELP python_gc_objects_collected_total x\npython_gc_objects_collected_total 3\n",
        'vllm:num_requests_running{model_name="m"} NaN\n',
    ],
)
def test_a_page_without_known_metrics_raises_one_clear_error(text: str) -> None:
    with pytest.raises(EngineMetricsError, match="none of the load metrics"):
        parse_engine_load(text)


def test_the_error_belongs_to_the_upstream_family() -> None:
    assert issubclass(EngineMetricsError, UpstreamError)


def test_hit_rate_since_uses_counter_deltas() -> None:
    before = EngineLoad(EngineKind.VLLM, 0, 0, prefix_cache_queries=1000, prefix_cache_hits=100)
    after = EngineLoad(EngineKind.VLLM, 0, 0, prefix_cache_queries=2000, prefix_cache_hits=900)
    assert after.hit_rate_since(before) == pytest.approx(0.8)


def test_hit_rate_since_a_restart_uses_the_new_totals() -> None:
    before = EngineLoad(EngineKind.VLLM, 0, 0, prefix_cache_queries=5000, prefix_cache_hits=900)
    after = EngineLoad(EngineKind.VLLM, 0, 0, prefix_cache_queries=100, prefix_cache_hits=25)
    assert after.hit_rate_since(before) == pytest.approx(0.25)


def test_hit_rate_since_falls_back_to_a_reported_rate() -> None:
    before = EngineLoad(EngineKind.SGLANG, 0, 0, prefix_cache_hit_rate=0.1)
    after = EngineLoad(EngineKind.SGLANG, 0, 0, prefix_cache_hit_rate=0.3)
    assert after.hit_rate_since(before) == 0.3
