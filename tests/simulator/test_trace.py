"""Reading traces: the Azure CSV and the JSONL format."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.errors import SimulationError
from simulator.trace import detect_unit, read_trace
from tests.simulator.conftest import AZURE_HEAD


def test_azure_csv_arrivals_are_seconds_from_the_first_request() -> None:
    trace = read_trace(AZURE_HEAD)
    assert len(trace) == 400
    # 18:15:46.6805900 -> 18:15:50.9951690
    assert trace.arrival_s[:2].tolist() == pytest.approx([0.0, 4.314579])
    assert (trace.prompt_tokens[0], trace.output_tokens[0]) == (374, 44)


def test_jsonl_takes_numeric_or_iso_timestamps_and_sorts(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 12.5, "input_length": 10, "output_length": 3},
        {"timestamp": 10.0, "input_length": 20, "output_length": 4},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trace = read_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 2.5]
    assert trace.prompt_tokens.tolist() == [20, 10]


def test_jsonl_iso_timestamps(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": "2024-05-01T00:00:01.5Z", "input_length": 1, "output_length": 1}\n'
        '{"timestamp": "2024-05-01T00:00:00Z", "input_length": 2, "output_length": 2}\n'
    )
    assert read_trace(path).arrival_s.tolist() == [0.0, 1.5]


def test_speedup_divides_inter_arrival_times() -> None:
    trace = read_trace(AZURE_HEAD)
    assert trace.sped_up(4.0).duration_s == pytest.approx(trace.duration_s / 4.0)


def test_a_bad_line_is_refused_with_its_number(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 1, "output_length": 1}\n{"timestamp": 2}\n')
    with pytest.raises(SimulationError, match=r"t.jsonl:2"):
        read_trace(path)


def test_a_csv_without_the_azure_columns_is_refused(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time,prompt\n1,2\n")
    with pytest.raises(SimulationError, match="need columns"):
        read_trace(path)


# The first 200 requests of kvcache-ai/Mooncake FAST25-release/traces/synthetic_trace.jsonl
# @ 3b5a5941 (timestamps in ms; hash_ids dropped).
MOONCAKE_HEAD = AZURE_HEAD.parent / "mooncake_first200.jsonl"


def test_mooncake_millisecond_timestamps_are_detected() -> None:
    trace = read_trace(MOONCAKE_HEAD)
    assert trace.time_unit == "ms"
    assert trace.duration_s == pytest.approx(58.501)  # not 16 hours


def test_an_explicit_unit_overrides_the_detection() -> None:
    trace = read_trace(MOONCAKE_HEAD, time_unit="s")
    assert (trace.time_unit, trace.time_unit_note) == ("s", "given")
    assert trace.duration_s == pytest.approx(58_501.0)


def test_fractional_seconds_with_short_gaps_stay_seconds() -> None:
    stamps = np.cumsum(np.full(50, 0.25))
    assert detect_unit(stamps)[0] == "s"


def test_whole_second_timestamps_with_short_gaps_stay_seconds() -> None:
    stamps = np.repeat(np.arange(100.0), 3)  # 3 requests a second, 1 s resolution
    assert detect_unit(stamps)[0] == "s"


def test_epochs_are_told_apart_by_magnitude() -> None:
    assert detect_unit(np.asarray([1.7e9, 1.7e9 + 30.0]))[0] == "s"
    assert detect_unit(np.asarray([1.7e12, 1.7e12 + 2.0]))[0] == "ms"


def test_iso_timestamps_are_date_times_whatever_the_unit_flag(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": "2024-05-01T00:00:01.5Z", "input_length": 1, "output_length": 1}\n'
        '{"timestamp": "2024-05-01T00:00:00Z", "input_length": 2, "output_length": 2}\n'
    )
    trace = read_trace(path, time_unit="ms")
    assert trace.time_unit == "date-time" and trace.arrival_s.tolist() == [0.0, 1.5]


def test_burstgpt_columns_are_found(tmp_path) -> None:
    # The layout of HPMLL/BurstGPT's BurstGPT_*.csv (seconds from the log's start).
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "6,ChatGPT,1087,230,1317,Conversation log\n"
        "8,GPT-4,417,276,693,Conversation log\n"
    )
    trace = read_trace(path)
    assert (trace.time_unit, trace.arrival_s.tolist()) == ("s", [0.0, 1.0, 3.0])
    assert trace.prompt_tokens.tolist() == [472, 1087, 417]
    assert trace.output_tokens.tolist() == [18, 230, 276]


def test_jsonl_keys_by_other_names(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [
        {"arrival_time": 1.0, "prompt_tokens": 7, "completion_tokens": 2, "turn": 1},
        {"arrival_time": 3.0, "prompt_tokens": 9, "completion_tokens": 5, "turn": 2},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trace = read_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 2.0]
    assert trace.output_tokens.tolist() == [2, 5]


def test_utc_offsets_are_read_and_put_on_one_clock(tmp_path) -> None:
    # The 2024 Azure week-long traces write "+00:00"; a local-time trace across the
    # spring daylight-saving change has two offsets, 2 s apart in real time.
    path = tmp_path / "t.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,10,1\n"
        "2024-05-10 00:00:01.509930+00:00,20,2\n"
    )
    assert read_trace(path).arrival_s.tolist() == pytest.approx([0.0, 1.5])
    dst = tmp_path / "dst.jsonl"
    dst.write_text(
        '{"timestamp": "2024-03-10T01:59:59-08:00", "input_length": 1, "output_length": 1}\n'
        '{"timestamp": "2024-03-10T03:00:01-07:00", "input_length": 1, "output_length": 1}\n'
    )
    assert read_trace(dst).arrival_s.tolist() == pytest.approx([0.0, 2.0])


def test_a_missing_field_is_named_with_the_names_that_would_do(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 3, "tokens_out": 2}\n')
    with pytest.raises(SimulationError, match=r"output: one of generatedtokens, outputlength"):
        read_trace(path)


def test_max_rows_stops_reading_early(tmp_path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("timestamp,input_length,output_length\n1,1,1\n2,2,2\n3,3,3\nbad,x,y\n")
    assert read_trace(csv_path, max_rows=3).prompt_tokens.tolist() == [1, 2, 3]
    lines = tmp_path / "t.jsonl"
    lines.write_text(
        '{"timestamp": 1, "input_length": 1, "output_length": 1}\n'
        '{"timestamp": 2, "input_length": 2, "output_length": 2}\nnot json\n'
    )
    assert len(read_trace(lines, max_rows=2)) == 2
    with pytest.raises(SimulationError, match=r"t\.jsonl:3"):
        read_trace(lines)
