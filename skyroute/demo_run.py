"""The policy and price file a ``skyroute demo`` run works on, made from the packaged ones.

The packaged ``demo-policy.yaml`` is also the simulator's and the tests' reference
fleet, so it keeps fixed prices and no scaling sections. A demo run copies it into its
run directory (comments kept) and changes three things, all visible in that copy:

- every ``127.0.0.1`` endpoint moves to a free port (``skyroute.demo.with_free_ports``);
- prices come from the static price feed: each pool's ``price.source`` becomes
  ``static`` (its fixed ``usd_per_gpu_hour`` is dropped) and ``demo-prices.json`` next to
  the policy holds each pool's instance row from ``demo_prices.csv``; a ``pricing``
  section names that file and refreshes it every few seconds, so ``skyroute prices set``
  (or an edit of the file) moves traffic;
- the pools of :data:`AUTOSCALED_MODEL` get a ``scaling`` section (their replicas are
  engine processes that the autoscaler starts through the ``local`` provider) and
  replica bounds the autoscaler works within.

Pure text in, text out: nothing here touches the disk.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "AUTOSCALED_MODEL",
    "PRICE_FILE",
    "demo_price_rows",
    "run_policy_text",
]

# One model's pools only: the autoscaler plans a model over its pools' longest
# provisioning time, so all of that model's pools need the short one of local engines.
AUTOSCALED_MODEL = "llama-3.1-8b"
PRICE_FILE = "demo-prices.json"
# Seconds: simulated engines are up in a few seconds, not the minutes of a cloud VM.
PROVISIONING_S = 5
REPLICAS = "{min: 1, max: 4, initial: 1}"
PRICE_REFRESH_S = 5

_POOL = re.compile(r"^  - id: (\S+)\s*$")
_FIELD = re.compile(r"^    (\w+):\s*(.*?)\s*(?:#.*)?$")
_PRICE_FIELD = re.compile(r"^      (\w+):\s*(.*?)\s*(?:#.*)?$")


def _pool_blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line, end line, pool id) of every pool item under ``pools:``."""
    starts = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _POOL.match(line))]
    out = []
    for n, (start, pool_id) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        # The block ends at the next top-level key (``client_regions:``) or item.
        for j in range(start + 1, end):
            if lines[j] and not lines[j].startswith(" ") and not lines[j].startswith("#"):
                end = j
                break
        out.append((start, end, pool_id))
    return out


def _fields(lines: list[str]) -> dict[str, str]:
    return {m.group(1): m.group(2) for line in lines if (m := _FIELD.match(line))}


def run_policy_text(text: str) -> tuple[str, list[dict[str, str]]]:
    """The demo run's policy text and the (provider, region, instance_type, purchase)
    rows its pools now take their prices from (see the module docstring). A policy that
    already has a ``pricing`` section keeps its prices as they are."""
    lines = text.splitlines()
    priced = not any(line.startswith("pricing:") for line in lines)
    wanted: list[dict[str, str]] = []
    out = list(lines)
    for start, end, pool_id in reversed(_pool_blocks(lines)):
        block = lines[start:end]
        fields = _fields(block)
        new_block: list[str] = []
        in_price = False
        price: dict[str, str] = {}
        for original in block:
            line = original
            if _FIELD.match(line):
                in_price = line.startswith("    price:")
            elif in_price and (m := _PRICE_FIELD.match(line)):
                price[m.group(1)] = m.group(2)
                if priced and m.group(1) == "source" and m.group(2) == "policy":
                    line = "      source: static  # demo: from the static price file"
                elif priced and m.group(1) == "usd_per_gpu_hour":
                    continue
            if line.startswith("    replicas:") and fields.get("model") == AUTOSCALED_MODEL:
                group = "demo-" + pool_id.replace(":", "-")
                new_block += [
                    f"    replicas: {REPLICAS}  # demo: the autoscaler sizes this pool",
                    f"    scaling: {{group: {group}, provisioning_s: {PROVISIONING_S}}}"
                    "  # local engines",
                ]
                continue
            new_block.append(line)
        out[start:end] = new_block
        if priced and price.get("source") == "policy" and price.get("instance_type"):
            wanted.append(
                {
                    "provider": fields.get("provider", ""),
                    "region": fields.get("region", ""),
                    "instance_type": price["instance_type"],
                    "purchase": price.get("purchase", "on_demand"),
                }
            )
    if priced:
        out += [
            "",
            "# Added by `skyroute demo`: every pool's price comes from the static price file",
            f"# {PRICE_FILE} next to this policy. Change one with `skyroute prices set POOL PRICE`",
            "# (USD per GPU-hour) or edit the file: the price feed reads it every few seconds.",
            "pricing:",
            f"  static_file: {PRICE_FILE}",
            f"  refresh_interval_s: {PRICE_REFRESH_S}",
            "  jitter: 0",
        ]
    return "\n".join(out) + "\n", list(reversed(wanted))


def demo_price_rows(
    wanted: Iterable[Mapping[str, str]], csv_text: str
) -> list[dict[str, str | float | int]]:
    """The static price file's rows: for each wanted key, its instance row of
    ``demo_prices.csv`` (USD per instance-hour for its purchase option, GPU count and
    type). Raises KeyError for a key the CSV has no row for."""
    lines = [ln for ln in csv_text.splitlines() if ln.strip() and not ln.startswith("#")]
    table = {(r["provider"], r["region"], r["instance_type"]): r for r in csv.DictReader(lines)}
    rows: list[dict[str, str | float | int]] = []
    seen: set[tuple[str, ...]] = set()
    for key in wanted:
        ident = (key["provider"], key["region"], key["instance_type"], key["purchase"])
        if ident in seen:
            continue
        seen.add(ident)
        row = table[ident[:3]]
        column = "usd_per_hour_spot" if key["purchase"] == "spot" else "usd_per_hour_on_demand"
        rows.append(
            {
                **dict(key),
                "usd_per_hour": float(row[column]),
                "gpu_count": int(row["gpu_count"]),
                "gpu_type": row["gpu_type"],
            }
        )
    return rows
