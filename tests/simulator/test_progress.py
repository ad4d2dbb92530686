"""The stderr progress bar."""

from __future__ import annotations

import io

from simulator.progress import ProgressBar


def test_progress_bar_redraws_in_place_up_to_100_percent() -> None:
    out = io.StringIO()
    bar = ProgressBar(200, stream=out, width=10)
    bar.set_label("skyroute")
    for _ in range(4):
        bar(50)
    bar.close()
    frames = out.getvalue().split("\r")[1:]
    assert frames[0].startswith("[##--------]  25% skyroute")
    assert frames[-1].startswith("[##########] 100% skyroute")
    assert out.getvalue().endswith("\n")
