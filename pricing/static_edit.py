"""Change a price in the static price file: what ``skyroute prices set`` does.

The file stays the single source: the price feed reads it at its next refresh (or at
once, when the command refreshes it), exactly as it would read a hand edit. JSON and
YAML files are rewritten whole (a YAML file loses its comments); a CSV file is left to
be edited by hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from live.price_table import PriceKey
from router.policy import Policy

__all__ = ["read_rows", "resolve", "set_price"]

_KEY_FIELDS = ("provider", "region", "instance_type", "purchase")


def _key(row: Mapping[str, Any]) -> PriceKey:
    return PriceKey(*(str(row.get(f) or "").strip() for f in _KEY_FIELDS))


def _parts(key: PriceKey) -> list[str]:
    return [key.provider, key.region, key.instance_type, key.purchase]


def _load(path: Path) -> dict[str, Any]:
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ValueError(f"{path}: only a JSON or YAML price file can be changed; edit it by hand")
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("prices"), list):
        raise ValueError(f"{path}: the price file needs a 'prices' list")
    return doc


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON or YAML price file. Raises ValueError (wrong format or
    shape) and OSError (cannot read)."""
    return [r for r in _load(path)["prices"] if isinstance(r, dict)]


def resolve(name: str, policy: Policy, rows: Sequence[Mapping[str, Any]]) -> list[PriceKey]:
    """The price rows ``name`` stands for: a pool of ``policy`` (its instance row; the
    pool must take its price from the static file), ``provider:region:instance_type``
    with an optional ``:purchase``, or a bare instance type (every row of it).
    Raises ValueError saying what would match."""
    pool = next((p for p in policy.pools if p.id == name), None)
    if pool is not None:
        if pool.price.source != "static":
            raise ValueError(
                f"pool {name} takes its price from {pool.price.source!r}, not the static file"
                + (" (a policy override)" if pool.price.source == "policy" else "")
            )
        return [PriceKey(pool.provider, pool.region, pool.price.instance_type, pool.price.purchase)]
    parts = name.split(":")
    keys = [_key(r) for r in rows]
    if len(parts) in (3, 4):
        found = [k for k in keys if _parts(k)[: len(parts)] == parts]
    elif len(parts) == 1:
        found = [k for k in keys if k.instance_type == name]
    else:
        found = []
    if not found:
        pools = ", ".join(p.id for p in policy.pools if p.price.source == "static") or "none"
        raise ValueError(
            f"no pool or price row {name!r}; give a pool id (static-priced pools: {pools}), "
            "provider:region:instance_type[:purchase] or an instance type of the file"
        )
    return sorted(set(found), key=str)


def set_price(path: Path, keys: Sequence[PriceKey], usd_per_gpu_hour: float) -> None:
    """Set each of ``keys`` to ``usd_per_gpu_hour`` (USD per GPU-hour; the row's
    ``usd_per_hour`` is dropped so that the feed multiplies by the GPU count), adding a
    row for a key the file lacks. Atomic (write and rename); idempotent. Raises
    ValueError for a price that is not positive or a file that cannot be changed."""
    if not usd_per_gpu_hour > 0:
        raise ValueError(f"a price must be positive, not {usd_per_gpu_hour}")
    doc = _load(path)
    rows: list[Any] = doc["prices"]
    for key in keys:
        row = next((r for r in rows if isinstance(r, dict) and _key(r) == key), None)
        if row is None:
            row = dict(zip(_KEY_FIELDS, _parts(key), strict=True))
            rows.append(row)
        row.pop("usd_per_hour", None)
        row["usd_per_gpu_hour"] = usd_per_gpu_hour
    if path.suffix.lower() == ".json":
        text = json.dumps(doc, indent=2) + "\n"
    else:
        text = yaml.safe_dump(doc, sort_keys=False)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
