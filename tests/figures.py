"""Figures that integration tests measure (fault injection, flips) and print at the end
of the run, so CI logs show them. Never asserted as timings."""

from __future__ import annotations

FIGURES: list[str] = []


def report(line: str) -> None:
    """Record one line of measured figures for the end-of-run summary."""
    FIGURES.append(line)
    print(line)
