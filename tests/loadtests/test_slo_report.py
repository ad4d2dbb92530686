"""SLO attainment rules and the end-of-run summary of the load tests."""

from __future__ import annotations

import pytest

from loadtests.slo_report import Outcome, SloTarget, Tally, meets, parse_targets, render

INTERACTIVE = SloTarget(ttft_ms=800, tpot_ms=60)


def streamed(ttft_s: float, last_s: float, tokens: int, ok: bool = True) -> Outcome:
    return Outcome("interactive", "t0", True, ok, last_s, tokens, ttft_s, last_s, "aws", "x")


def test_a_stream_meets_its_slo_on_ttft_and_mean_tpot() -> None:
    assert meets(streamed(0.5, 0.5 + 0.05 * 10, 11), INTERACTIVE)
    assert not meets(streamed(0.9, 1.0, 2), INTERACTIVE), "TTFT over 800 ms"
    assert not meets(streamed(0.5, 0.5 + 0.07 * 10, 11), INTERACTIVE), "TPOT 70 ms"


def test_a_non_streamed_request_is_judged_against_the_latest_compliant_finish() -> None:
    def plain(e2e_s: float) -> Outcome:
        return Outcome("interactive", "t0", False, True, e2e_s, 11)

    assert meets(plain(0.8 + 0.06 * 10), INTERACTIVE)
    assert not meets(plain(0.8 + 0.06 * 10 + 0.01), INTERACTIVE)


def test_a_failed_request_never_meets_its_slo() -> None:
    assert not meets(streamed(0.1, 0.2, 3, ok=False), INTERACTIVE)


def test_targets_parse_and_reject_nonsense() -> None:
    assert parse_targets("interactive=800/60, batch=30000/500")["batch"] == SloTarget(30000, 500)
    for bad in ("interactive=800", "x=0/1", ""):
        with pytest.raises(ValueError):
            parse_targets(bad)


def test_tallies_merge_and_the_summary_names_failing_classes() -> None:
    worker_a, worker_b = Tally(), Tally()
    worker_a.add(streamed(0.1, 0.2, 3), INTERACTIVE)
    worker_b.add(streamed(2.0, 2.1, 3), INTERACTIVE)
    master = Tally()
    master.merge(worker_a.to_dict())
    master.merge(worker_b.to_dict())
    assert master.attainment("interactive") == 0.5
    assert master.below(0.9) == {"interactive": 0.5}
    text = "\n".join(render(master, {"interactive": INTERACTIVE}, 0.9))
    assert "RESULT: FAIL: SLO attainment below 90.0%: interactive 50.0%" in text
    assert "aws       x       2         100.0%" in text
    assert "RESULT: PASS" in "\n".join(render(master, {"interactive": INTERACTIVE}, 0.5))
