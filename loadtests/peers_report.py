"""Rows and printed tables of ``bench_peers.py``.

The full table has one row per (mode, concurrency, target). The summary puts each gateway's
CPU per request next to the floor's (the bare aiohttp proxy in the same run) and checks
issue 19's target for skyroute: at most ``FLOOR_RATIO_TARGET`` times the floor. CPU per
request is the figure to compare on a shared machine: unlike req/s, it does not depend on
what else runs on the cores.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOOR = "bare"
FLOOR_RATIO_TARGET = 1.3  # issue 19: skyroute CPU/request <= 1.3 x the bare proxy's
TARGET_RPS_RATIO = 20.0  # issue 9: skyroute >= 20x LiteLLM's req/s per worker
GATEWAYS = ("bare", "bare-asgi", "skyroute", "portkey", "litellm")


@dataclass
class Row:
    mode: str  # nonstream | stream
    concurrency: int
    target: str  # direct | bare | bare-asgi | skyroute | portkey | litellm
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    proxy_cpu_ms_per_req: float | None = None  # the gateway's process tree (None: direct)
    engine_cpu_ms_per_req: float = 0.0
    loadgen_cpu_ms_per_req: float = 0.0  # this process alone, not its children
    # skyroute's store worker, when it runs apart (--skyroute-store-worker external)
    worker_cpu_ms_per_req: float | None = None
    first_error: str = ""


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _print_table(cols: list[str], table: list[list[str]]) -> None:
    widths = [max(len(c), *(len(x[i]) for x in table)) for i, c in enumerate(cols)]
    print("\n" + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for line in table:
        print(" | ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)))


def print_rows(rows: list[Row]) -> None:
    """Every measured cell: req/s, latency, added latency, CPU per request of the gateway,
    the engine and the load generator, errors."""
    cols = ["mode", "conc", "target", "req/s", "p50 ms", "p99 ms", "+p50 ms", "+p99 ms",
            "gateway CPU ms/req", "engine CPU", "loadgen CPU", "errors"]  # fmt: skip
    table = [
        [r.mode, str(r.concurrency), r.target, f"{r.rps:.0f}", f"{r.p50_ms:.2f}",
         f"{r.p99_ms:.2f}", _fmt(r.added_p50_ms), _fmt(r.added_p99_ms),
         _fmt(r.proxy_cpu_ms_per_req, ".3f"), f"{r.engine_cpu_ms_per_req:.3f}",
         f"{r.loadgen_cpu_ms_per_req:.3f}", str(r.errors)]
        for r in rows
    ]  # fmt: skip
    if table:
        _print_table(cols, table)
    apart = [r for r in rows if r.worker_cpu_ms_per_req is not None]
    if apart:
        print("\nskyroute's store worker, a process of its own (ledger writes), CPU ms/request: "
              + ", ".join(f"{r.mode} c={r.concurrency} {r.worker_cpu_ms_per_req:.3f}"
                          for r in apart))  # fmt: skip


def floor_summary(rows: list[Row], skyroute_workers: int = 1) -> dict[str, dict[str, object]]:
    """Per ``mode/c=N``: each gateway's CPU ms/request, req/s, p50/p99 and CPU ratio to the
    floor; printed as one table, returned for the JSON. ``skyroute_workers``: how many
    workers skyroute ran (``serve --workers``), said in the table's title."""
    by = {(r.mode, r.concurrency, r.target): r for r in rows}
    present = [g for g in GATEWAYS if any(r.target == g for r in rows)]
    cells = sorted(
        {(r.mode, r.concurrency) for r in rows}, key=lambda k: (k[0] != "nonstream", k[1])
    )
    out: dict[str, dict[str, object]] = {}
    table: list[list[str]] = []
    misses: list[str] = []
    compared = False
    for mode, conc in cells:
        floor = by.get((mode, conc, FLOOR))
        floor_cpu = floor.proxy_cpu_ms_per_req if floor and floor.requests else None
        line = [mode, str(conc)]
        entry: dict[str, object] = {}
        for g in present:
            r = by.get((mode, conc, g))
            if r is None or r.requests == 0:
                line.append("failed" if r is not None else "-")
                entry[g] = None
                continue
            cpu = r.proxy_cpu_ms_per_req or 0.0
            ratio = cpu / floor_cpu if floor_cpu else None
            entry[g] = {"cpu_ms_per_req": cpu, "rps": r.rps, "p50_ms": r.p50_ms,
                        "p99_ms": r.p99_ms, "errors": r.errors,
                        "cpu_x_floor": None if ratio is None else round(ratio, 2)}  # fmt: skip
            shown = f"{cpu:.3f}" + ("" if ratio is None or g == FLOOR else f" ({ratio:.2f}x)")
            line.append(f"{shown} {r.rps:.0f}/s {r.p50_ms:.1f}/{r.p99_ms:.1f}")
            if g == "skyroute" and ratio is not None:
                compared = True
                if ratio > FLOOR_RATIO_TARGET:
                    misses.append(f"{mode} c={conc} {ratio:.2f}x")
        out[f"{mode}/c={conc}"] = entry
        table.append(line)
    if table:
        each = (
            "one worker each"
            if skyroute_workers == 1
            else (
                f"one worker each but skyroute, {skyroute_workers} workers (its CPU is theirs and "
                "their store worker's, on the same CPUs)"
            )
        )
        print(f"\ngateway CPU ms/request (x the bare proxy's), req/s, p50/p99 ms; {each}:")
        _print_table(["mode", "conc", *present], table)
    if compared:
        verdict = "met in every cell" if not misses else "NOT met at " + ", ".join(misses)
        print(
            f"target: skyroute CPU/request <= {FLOOR_RATIO_TARGET:g}x the bare proxy's: {verdict}"
        )
    return out


def litellm_comparison(rows: list[Row]) -> dict[str, object]:
    """skyroute against LiteLLM per ``mode/c=N`` (issue 9's targets), printed."""
    by = {(r.mode, r.concurrency, r.target): r for r in rows}
    comparison: dict[str, object] = {}
    for (mode, conc, target), sky in by.items():
        lite = by.get((mode, conc, "litellm"))
        if target != "skyroute" or lite is None or lite.rps <= 0:
            continue
        comparison[f"{mode}/c={conc}"] = {
            "rps_ratio": round(sky.rps / lite.rps, 1),
            "cpu_ratio": round(
                (lite.proxy_cpu_ms_per_req or 0.0) / max(sky.proxy_cpu_ms_per_req or 0.0, 1e-9), 1
            ),
            "skyroute_p99_ms": sky.p99_ms,
            "litellm_p99_ms": lite.p99_ms,
            "skyroute_lower_p99": sky.p99_ms < lite.p99_ms,
        }
    if comparison:
        print(f"\nskyroute vs LiteLLM, one worker each (target: >= {TARGET_RPS_RATIO:g}x req/s "
              "and lower p99 at every concurrency):")  # fmt: skip
        for key, c in comparison.items():
            assert isinstance(c, dict)
            print(f"  {key:16} {c['rps_ratio']:6.1f}x req/s  {c['cpu_ratio']:6.1f}x less CPU/req  "
                  f"p99 {c['skyroute_p99_ms']:.2f} ms vs {c['litellm_p99_ms']:.2f} ms"
                  + ("" if c["skyroute_lower_p99"] else "   (skyroute p99 NOT lower)"))  # fmt: skip
    return comparison


def warnings_for(rows: list[Row]) -> list[str]:
    """Load-generator-bound cells (direct < 1.5x the fastest gateway) and first errors."""
    by = {(r.mode, r.concurrency, r.target): r for r in rows}
    out: list[str] = []
    for (mode, conc, target), r in by.items():
        if target != "direct":
            continue
        fastest = max((by[(mode, conc, g)].rps for g in GATEWAYS if (mode, conc, g) in by),
                      default=0.0)  # fmt: skip
        if fastest and r.rps < 1.5 * fastest:
            out.append(
                f"WARNING: {mode} c={conc}: direct {r.rps:.0f} req/s < 1.5 x the fastest "
                f"gateway ({fastest:.0f} req/s): the load generator may be the bottleneck"
            )
    out += [f"first error of {r.mode} c={r.concurrency} {r.target}: {r.first_error}"
            for r in rows if r.first_error]  # fmt: skip
    return out
