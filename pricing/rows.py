"""Validate quotes row by row into price-table rows.

A quote becomes a ``PriceRow`` only if its price is a finite positive number of USD per
hour, its GPU count is known (from the payload, else the catalog), and its price per
GPU-hour lies within the policy's sanity range. Anything else is rejected with one
log line naming the row and the reason, and never reaches routing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

from live.price_table import PriceRow
from pricing.catalog import Catalog
from pricing.feed import Quote
from router.policy import PricingSettings

logger = logging.getLogger(__name__)

PURCHASES = ("on_demand", "spot")


@dataclass(frozen=True)
class Bounds:
    """The accepted range of USD per GPU-hour, inclusive."""

    min_usd_per_gpu_hour: float
    max_usd_per_gpu_hour: float

    @classmethod
    def of(cls, settings: PricingSettings) -> Bounds:
        """The policy's range."""
        return cls(settings.min_usd_per_gpu_hour, settings.max_usd_per_gpu_hour)


@dataclass(frozen=True)
class Rejection:
    """A quote that did not become a row, and why."""

    quote: Quote
    reason: str


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return out if math.isfinite(out) else None


def _gpu_count(quote: Quote, catalog: Catalog) -> int | None:
    given = _number(quote.gpu_count) if quote.gpu_count not in (None, "") else None
    if given is not None:
        return int(given) if given > 0 and given.is_integer() else None
    shape = catalog.get(quote.provider, quote.instance_type)
    return shape.gpu_count if shape is not None and shape.gpu_count > 0 else None


def validate(
    quote: Quote, bounds: Bounds, catalog: Catalog, fetched_at_s: float
) -> PriceRow | Rejection:
    """The row ``quote`` stands for, or the reason it is refused. Pure."""
    if quote.purchase not in PURCHASES:
        return Rejection(quote, f"unknown purchase option {quote.purchase!r}")
    if not quote.region or not quote.instance_type:
        return Rejection(quote, "missing region or instance type")
    usd = _number(quote.usd_per_hour)
    if usd is None:
        return Rejection(quote, "non-numeric price")
    if usd < 0:
        return Rejection(quote, "negative price")
    if usd == 0:
        return Rejection(quote, "zero price")
    gpus = _gpu_count(quote, catalog)
    if gpus is None:
        return Rejection(quote, "unknown GPU count")
    per_gpu = usd / gpus
    if not bounds.min_usd_per_gpu_hour <= per_gpu <= bounds.max_usd_per_gpu_hour:
        return Rejection(
            quote,
            f"{per_gpu:.6g} USD per GPU-hour outside [{bounds.min_usd_per_gpu_hour:g}, "
            f"{bounds.max_usd_per_gpu_hour:g}]",
        )
    shape = catalog.get(quote.provider, quote.instance_type)
    return PriceRow(
        provider=quote.provider,
        region=quote.region,
        instance_type=quote.instance_type,
        gpu_type=quote.gpu_type or (shape.gpu_type if shape else ""),
        gpu_count=gpus,
        purchase=quote.purchase,
        usd_per_hour=usd,
        usd_per_gpu_hour=per_gpu,
        source=quote.source,
        fetched_at_s=fetched_at_s,
    )


def validate_all(
    quotes: Iterable[Quote], bounds: Bounds, catalog: Catalog, fetched_at_s: float
) -> tuple[list[PriceRow], list[Rejection]]:
    """Split ``quotes`` into rows and rejections, logging one warning per rejection.

    When a payload quotes the same key twice, the later valid quote wins.
    """
    rows: dict[object, PriceRow] = {}
    rejected: list[Rejection] = []
    for quote in quotes:
        out = validate(quote, bounds, catalog, fetched_at_s)
        if isinstance(out, Rejection):
            rejected.append(out)
            logger.warning(
                "price row rejected from %s (%s): %s usd_per_hour=%r gpu_count=%r: %s",
                quote.source,
                quote.origin or "payload",
                quote.key,
                quote.usd_per_hour,
                quote.gpu_count,
                out.reason,
            )
        else:
            rows[out.key] = out
    return list(rows.values()), rejected
