"""Regenerate ``loadtests/sim_report.md``: every policy on every trace and stress variant.

    python -m loadtests.sim_report [--out DIR] [--quick]

Runs ``skyroute simulate`` (in process, the README's settings: ``--scale-fleet auto``,
client regions 60/20/20) on the Azure conversation trace and its variants (code
completion, long context, bursts, and the original at twice and half its rate) and on
the Mooncake synthetic trace; each with the reactive scaler and the achievable reference
(a), again at seed 1 (another draw of client regions and of the policies' random
tie-breaks), then nine variants no setting was chosen on (``UNSEEN``: other rates, an
EU-heavy client mix, code completion at twice the rate and with bursts, long context at
half the rate, Mooncake at twice and half, the conversation hour six times back to
back), then each of the first seven with the planner
(``decide()``), and the conversation trace under the planner at seed 1 too. A summary
table at the top gives skyroute's verdict on every run. Writes one table per run: each
policy's provisioned cost, SLO attainment, whether it reaches 99 % of the attainable
attainment, and its gap to (a) and to the valid bound (b), then the verdict against the
issue's targets. ``--quick`` replays the first 3,000 requests only. Each run's
result.json and plots stay under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from skyroute.simulate_cmd import register

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"
CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = TRACES / "mooncake_synthetic_trace.jsonl"
REGIONS = "aws:us-east-1=0.6,gcp:us-central1=0.2,aws:eu-west-1=0.2"
EU_HEAVY = "aws:us-east-1=0.2,gcp:us-central1=0.2,aws:eu-west-1=0.6"
TARGET = 0.99


class Run(NamedTuple):
    """One ``skyroute simulate`` run of the report."""

    label: str
    trace: Path
    variant: str
    speedup: float
    scaler: str
    seed: int
    reference: bool  # search the achievable reference (a)
    regions: str = REGIONS


_REACTIVE = (
    ("conversation", CONV, "original", 1.0),
    ("conversation, code completion", CONV, "code", 1.0),
    ("conversation, long context", CONV, "long-context", 1.0),
    ("conversation, bursts x3", CONV, "burst", 1.0),
    ("conversation, rate x2", CONV, "original", 2.0),
    ("conversation, rate x0.5", CONV, "original", 0.5),
    ("Mooncake synthetic", MOONCAKE, "original", 1.0),
)
# Variants no setting was chosen on (session 29): a change that helps the runs above can
# still lose attainment here (pricing spill pools lower did, at low rates).
UNSEEN = (
    Run("conversation, rate x4", CONV, "original", 4.0, "reactive", 0, True),
    Run("conversation, rate x0.25", CONV, "original", 0.25, "reactive", 0, True),
    Run("conversation, EU-heavy clients", CONV, "original", 1.0, "reactive", 0, True, EU_HEAVY),
    Run("conversation, code completion x2", CONV, "code", 2.0, "reactive", 0, True),
    Run("conversation, code completion + bursts", CONV, "code+burst", 1.0, "reactive", 0, True),
    Run("conversation, long context x0.5", CONV, "long-context", 0.5, "reactive", 0, True),
    Run("Mooncake synthetic x2", MOONCAKE, "original", 2.0, "reactive", 0, True),
    Run("Mooncake synthetic x0.5", MOONCAKE, "original", 0.5, "reactive", 0, True),
    Run("conversation, six hours back to back", CONV, "x6-hours", 1.0, "reactive", 0, True),
)
RUNS: tuple[Run, ...] = (
    *(Run(*r, "reactive", seed, True) for seed in (0, 1) for r in _REACTIVE),
    *UNSEEN,
    Run("conversation", CONV, "original", 1.0, "planner", 0, False),
    Run("conversation", CONV, "original", 1.0, "planner", 1, False),
    *(Run(*r, "planner", 0, False) for r in _REACTIVE[1:]),
)


def simulate(out: Path, run: Run, quick: bool) -> dict[str, Any]:
    """One ``skyroute simulate`` run (arrivals ``speedup`` times as fast); its result.json."""
    parser = argparse.ArgumentParser(prog="skyroute")
    register(parser.add_subparsers(dest="command", required=True))
    args = [
        "simulate", "--trace", str(run.trace), "--variant", run.variant, "--scale-fleet",
        "auto", "--client-regions", run.regions, "--scaler", run.scaler, "--seed",
        str(run.seed), "--speedup", str(run.speedup), "--out", str(out), "--no-progress",
    ]  # fmt: skip
    if run.reference:
        args.append("--reference")
    if quick:
        args += ["--max-requests", "3000", "--warmup-s", "120"]
    parsed = parser.parse_args(args)
    parsed.func(parsed)
    doc: dict[str, Any] = json.loads((out / "result.json").read_text())
    return doc


def _gap(usd: float, ref: float | None) -> str:
    return "" if not ref else f"{100 * (usd / ref - 1):+.1f}%"


@dataclass(frozen=True)
class Verdict:
    """One run against the issue's targets: skyroute's cost and attainment, the
    threshold (99 % of the attainable), the cheapest baseline at or above
    ``min(skyroute's attainment, threshold)``, and the references (a) and (b)."""

    usd: float
    attainment: float
    threshold: float | None
    rival: dict[str, Any] | None
    best_usd: float | None
    bound_usd: float

    @property
    def saving(self) -> float | None:
        """Skyroute's saving against the rival, as a share of the rival's cost."""
        return None if self.rival is None else 1 - self.usd / self.rival["provisioned_usd"]

    def line(self) -> str:
        """The verdict as one sentence, under the run's table."""
        th = self.threshold or 0.0
        out = f"skyroute {100 * self.attainment:.2f} % (threshold {100 * th:.2f} %): " + (
            "reaches it" if self.attainment >= th else "misses it"
        )
        saving = self.saving
        if self.rival is not None and saving is not None:
            how = f"{100 * saving:.1f}% cheaper" if saving >= 0 else f"{-100 * saving:.1f}% dearer"
            out += (
                f"; cheapest baseline at that attainment {self.rival['policy']} "
                f"${self.rival['provisioned_usd']:.2f}: skyroute {how}"
            )
        else:
            out += "; no baseline reaches that attainment"
        if self.best_usd is not None:
            out += f"; vs (a) {_gap(self.usd, self.best_usd)}"
        ordered = self.best_usd is None or self.bound_usd <= self.best_usd + 1e-9
        return out + f"; (b) ≤ (a): {ordered}."

    def row(self, label: str, scaler: str, seed: int) -> str:
        """The run as a row of the report's summary table."""
        th = self.threshold or 0.0
        rival = (
            f"{self.rival['policy']} {self.rival['provisioned_usd']:.2f}"
            if self.rival is not None
            else "none reaches it"
        )
        saving = "" if self.saving is None else f"{100 * self.saving:+.1f}%"
        return (
            f"| {label} | {scaler} | {seed} | {self.usd:.2f} | {100 * self.attainment:.2f} "
            f"| {'yes' if self.attainment >= th else 'no'} | {rival} | {saving} "
            f"| {_gap(self.usd, self.best_usd)} | {_gap(self.usd, self.bound_usd)} |"
        )


SUMMARY_HEAD = [
    "| run | scaler | seed | skyroute $ | SLO % | reaches 99 % of attainable "
    "| cheapest baseline at that attainment, $ | skyroute's saving | gap to (a) | gap to (b) |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def verdict(doc: dict[str, Any], reference: dict[str, Any] | None) -> Verdict | None:
    """Skyroute's verdict on one run (None if skyroute was not simulated)."""
    policies = [p["summary"] for p in doc["policies"]]
    sky = next((s for s in policies if s["policy"] == "skyroute"), None)
    if sky is None:
        return None
    threshold = reference["threshold"] if reference else None
    at = sky["slo_attainment"]
    floor = at if threshold is None else min(at, threshold)
    rivals = [
        s for s in policies if s["policy"] != "skyroute" and s["slo_attainment"] >= floor - 1e-9
    ]
    return Verdict(
        usd=sky["provisioned_usd"],
        attainment=at,
        threshold=threshold,
        rival=min(rivals, key=lambda s: s["provisioned_usd"], default=None),
        best_usd=reference["best"]["usd"] if reference and reference["best"] else None,
        bound_usd=doc["relaxation_bound"]["total_usd"],
    )


def table(doc: dict[str, Any], reference: dict[str, Any] | None) -> list[str]:
    """The run's policies as Markdown rows with gaps and the verdict line."""
    relax = doc["relaxation_bound"]["total_usd"]
    best = reference["best"]["usd"] if reference and reference["best"] else None
    threshold = reference["threshold"] if reference else None
    lines = [
        "| policy | provisioned $ | SLO % | reaches 99 % of attainable | gap to (a) | gap to (b) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in (p["summary"] for p in doc["policies"]):
        ok = "" if threshold is None else ("yes" if s["slo_attainment"] >= threshold else "no")
        lines.append(
            f"| {s['policy']} | {s['provisioned_usd']:.2f} | {100 * s['slo_attainment']:.2f} "
            f"| {ok} | {_gap(s['provisioned_usd'], best)} | {_gap(s['provisioned_usd'], relax)} |"
        )
    if reference is not None:
        b = reference["best"]
        lines.append(
            "| (a) achievable reference | "
            + (
                f"{b['usd']:.2f} | {100 * b['attainment']:.2f} | yes | | |"
                if b
                else "none | | | | |"
            )
        )
    lines.append(f"| (b) valid bound, 99 % of attainable | {relax:.2f} | | | | |")
    v = verdict(doc, reference)
    if v is not None and threshold is not None:
        lines += ["", v.line()]
    return lines


def main() -> None:
    """Run every case and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/skyroute-sim-report"))
    parser.add_argument("--quick", action="store_true", help="first 3,000 requests only")
    parser.add_argument("--report", type=Path, default=ROOT / "loadtests" / "sim_report.md")
    args = parser.parse_args()
    refs: dict[tuple[str, str, float, int, str], dict[str, Any] | None] = {}
    body: list[str] = []
    summary: list[str] = []
    for run in RUNS:
        label, trace, variant, speedup, scaler, seed, ref, regions = run
        mix = "" if regions == REGIONS else "-eu"
        out = args.out / f"{trace.stem}-{variant}-x{speedup:g}{mix}-{scaler}-{seed}"
        started = time.perf_counter()
        doc = simulate(out, run, args.quick)
        took = time.perf_counter() - started
        # The reference replays skyroute's routing with the run's seed: a planner run
        # takes the reactive run's search of the same seed.
        key = (str(trace), variant, speedup, seed, regions)
        if ref:
            refs[key] = doc.get("reference")
        reference = refs.get(key)
        v = verdict(doc, reference)
        if v is not None:
            summary.append(v.row(label, scaler, seed))
        body += [
            f"## {label}: {scaler} scaler, seed {seed}",
            "",
            f"{doc['scenario']['requests']} requests, fleet scale "
            f"{doc['scenario']['scale_fleet']:.5g}; simulated in {doc['runtime_s']:.1f} s "
            + (
                f"(whole run with the reference search {took:.0f} s)."
                if ref
                else f"(whole run {took:.0f} s). (a) from the reactive run's search (the "
                "reference does not depend on the scaler)."
            ),
            "",
            *table(doc, reference),
            "",
        ]
    head = [
        "# `skyroute simulate` on every trace and stress variant",
        "",
        "Generated by `python -m loadtests.sim_report`"
        + (" --quick (first 3,000 requests)" if args.quick else "")
        + f" on {time.strftime('%Y-%m-%d')}; see the script's docstring for the runs.",
        "(a) is the achievable reference (the cheapest fleet of a fixed search that reaches "
        "99 % of the attainable SLO in the same simulator; not a bound). (b) is the valid "
        "lower bound for 99 % of the attainable SLO (`simulator/relaxation.py`). "
        "The reactive scaler sizes each pool from what was routed to it, so a baseline that "
        "spreads load keeps every pool alive (and pays for it); the planner rows run every "
        "policy under the autoscaler's `decide()` instead.",
        "",
        "## Summary",
        "",
        "Skyroute on every run against the issue's targets: at least 99 % of the attainable "
        "attainment; then at least 10 % cheaper than the cheapest baseline that reaches as "
        "much (or the threshold, whichever is lower); within 10 % of (a). Under the planner "
        "every policy gets the same fleet, so there the saving is 0 unless a baseline "
        "misses the threshold.",
        "",
        *SUMMARY_HEAD,
        *summary,
        "",
    ]
    args.report.write_text("\n".join(head + body))
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
