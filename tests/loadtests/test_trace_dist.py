"""Trace loading, length sampling and the replay schedule of the load tests."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from loadtests.trace_dist import (
    PACKAGED_SAMPLE,
    ReplaySchedule,
    Trace,
    TraceRequest,
    load_trace,
    prompt_text,
)


def test_the_packaged_sample_parses_with_its_source_comment() -> None:
    assert PACKAGED_SAMPLE.read_text().startswith("# First 300 s")
    trace = load_trace(PACKAGED_SAMPLE)
    assert len(trace.requests) == 1445
    assert trace.requests[0] == TraceRequest(0.0, 374, 44)
    assert 299 < trace.duration_s < 300


def test_a_bad_row_is_reported_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,x\n")
    with pytest.raises(ValueError, match="row 2"):
        load_trace(bad)


def test_draws_follow_the_trace_distribution() -> None:
    trace = load_trace(PACKAGED_SAMPLE)
    rng = random.Random(1)
    drawn = sorted(trace.draw(rng).output_tokens for _ in range(4000))
    real = sorted(r.output_tokens for r in trace.requests)
    assert abs(drawn[len(drawn) // 2] - real[len(real) // 2]) <= 0.1 * real[len(real) // 2]


def test_prompt_text_has_four_characters_per_token() -> None:
    assert len(prompt_text(1000)) == 4000


def test_replay_hands_out_requests_in_order_at_sped_up_times() -> None:
    trace = Trace(tuple(TraceRequest(t, 10, 5) for t in (0.0, 2.0, 4.0, 10.0)), PACKAGED_SAMPLE)
    schedule = ReplaySchedule(trace.window(2.0, None), speedup=2.0)
    due = []
    while (claimed := schedule.claim()) is not None:
        due.append(claimed[0])
    assert due == [0.0, 1.0, 4.0]
    assert schedule.exhausted and not schedule.done  # three still in flight
    for _ in due:
        schedule.finished()
    assert schedule.done
    assert schedule.arrival_rate(0.0, window_s=2.0) == 1.0


def test_replay_counts_late_sends() -> None:
    schedule = ReplaySchedule(load_trace(PACKAGED_SAMPLE), speedup=1.0)
    schedule.sent_at(0.2)
    schedule.sent_at(3.0)
    assert (schedule.sent, schedule.late, schedule.max_lag_s) == (2, 1, 3.0)
