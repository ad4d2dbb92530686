"""The static feed: contracted, reserved or on-prem prices from a CSV, YAML or JSON file.

Where it names a row (provider, region, instance type, purchase option), it overrides
what the cloud feeds say. The file is read again on every refresh, so an edit applies
at the next one. Columns (CSV header, or keys of each item of the ``prices`` list of a
YAML or JSON document):

    provider, region, instance_type, purchase, usd_per_hour
    optional: gpu_type, gpu_count, usd_per_gpu_hour (used when usd_per_hour is empty)

CSV lines starting with ``#`` are comments.
"""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from base.errors import PriceFeedError
from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.feed import FeedResult, Quote
from router.policy import Policy

SOURCE = "static"
_REQUIRED = ("provider", "region", "instance_type", "purchase")


def static_path(policy: Policy, policy_path: Path) -> Path | None:
    """The policy's static price file, relative to the policy file's directory."""
    name = policy.pricing.static_file
    if not name:
        return None
    path = Path(name)
    return path if path.is_absolute() else policy_path.parent / path


def _records(path: Path) -> list[Mapping[str, Any]]:
    text = path.read_text()
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        # JSON is YAML's subset, but its own parser gives JSON's own error messages.
        doc = (json.loads(text) if suffix == ".json" else yaml.safe_load(text)) or {}
        items = doc.get("prices") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise ValueError(f"a {suffix[1:].upper()} price file needs a 'prices' list")
        return [i if isinstance(i, dict) else {"_raw": i} for i in items]
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return list(csv.DictReader(lines))


def _quote(record: Mapping[str, Any], origin: str, catalog: Catalog) -> Quote:
    absent = [k for k in _REQUIRED if not str(record.get(k) or "").strip()]
    if absent:
        raise ValueError(f"{origin}: missing {', '.join(absent)}")
    provider, instance_type = str(record["provider"]).strip(), str(record["instance_type"]).strip()
    gpu_count: object = record.get("gpu_count") or None
    usd: object = record.get("usd_per_hour")
    per_gpu = record.get("usd_per_gpu_hour")
    if usd in (None, "") and per_gpu not in (None, ""):
        shape = catalog.get(provider, instance_type)
        count = gpu_count if gpu_count is not None else (shape.gpu_count if shape else None)
        try:
            usd = float(str(per_gpu)) * float(str(count))
        except ValueError:
            usd = per_gpu  # let validation reject it with the reason
    return Quote(
        source=SOURCE,
        provider=provider,
        region=str(record["region"]).strip(),
        instance_type=instance_type,
        purchase=str(record["purchase"]).strip(),
        usd_per_hour=usd,
        gpu_type=str(record.get("gpu_type") or "").strip(),
        gpu_count=gpu_count,
        origin=origin,
    )


class StaticFeed:
    """Prices from one file; no file configured means no static prices."""

    name = SOURCE

    def __init__(self, path: Path | None, catalog: Catalog | None = None) -> None:
        self.path = path
        self.catalog = catalog or Catalog.builtin()

    async def fetch(self, wants: frozenset[PriceKey]) -> FeedResult:
        """Every row of the file (not only ``wants``: the file is the operator's word).
        Raises PriceFeedError if the file cannot be read or parsed as a whole."""
        if self.path is None:
            return FeedResult()
        return await asyncio.to_thread(self._read, self.path)

    async def aclose(self) -> None:
        """Nothing to release."""

    def _read(self, path: Path) -> FeedResult:
        try:
            records = _records(path)
        except OSError as exc:
            raise PriceFeedError(f"static {path}: {exc}", feed=SOURCE, reason="config") from exc
        except (ValueError, yaml.YAMLError, csv.Error) as exc:
            raise PriceFeedError(
                f"static {path}: {exc}", feed=SOURCE, reason="bad_payload"
            ) from exc
        quotes: list[Quote] = []
        malformed: list[str] = []
        for n, record in enumerate(records, start=1):
            try:
                quotes.append(_quote(record, f"{path.name} row {n}", self.catalog))
            except ValueError as exc:
                malformed.append(str(exc))
        return FeedResult(quotes=tuple(quotes), malformed=tuple(malformed))
