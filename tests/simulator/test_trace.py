"""Reading traces: the Azure CSV and the JSONL format."""

from __future__ import annotations

import json

import pytest

from simulator.errors import SimulationError
from simulator.trace import read_trace
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
