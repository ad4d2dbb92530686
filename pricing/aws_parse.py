"""Pure parsing of AWS price payloads into quotes (no SDK here, so it tests without I/O).

- EC2 ``DescribeSpotPriceHistory`` items: the latest price per (instance type,
  availability zone); a region's spot price is the median over its zones, because a
  pool's Auto Scaling group spreads over the zones and one outlier zone (spot at the
  on-demand price, say) should not decide it.
- Price List ``GetProducts`` items: each is a JSON document *inside a JSON string*;
  the on-demand USD/hour is the ``Hrs`` price dimension of its ``OnDemand`` term.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pricing.feed import Quote

SOURCE = "aws"
SPOT_PRODUCTS = frozenset({"Linux/UNIX", "Linux/UNIX (Amazon VPC)"})
# The Price List attributes of a plain Linux, shared-tenancy, no-preinstalled-software,
# non-reservation EC2 instance: the price a pool of on-demand instances pays.
ON_DEMAND_ATTRIBUTES: Mapping[str, str] = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
}


def _as_number(text: object) -> float | None:
    try:
        return float(str(text))
    except ValueError:
        return None


def spot_quotes(items: Iterable[Mapping[str, Any]], region: str) -> list[Quote]:
    """One spot quote per instance type in ``region`` from spot price history items.

    Items for other products (Windows, SUSE…) are ignored. If no zone of an instance
    type has a numeric price, the quote carries the raw value so validation rejects it
    with a log line.
    """
    latest: dict[tuple[str, str], tuple[datetime | str, object]] = {}
    for item in items:
        if item.get("ProductDescription") not in SPOT_PRODUCTS:
            continue
        key = (str(item.get("InstanceType", "")), str(item.get("AvailabilityZone", "")))
        stamp = item.get("Timestamp", "")
        if key not in latest or _later(stamp, latest[key][0]):
            latest[key] = (stamp, item.get("SpotPrice"))
    by_type: dict[str, list[object]] = {}
    for (instance_type, _zone), (_, price) in sorted(latest.items()):
        by_type.setdefault(instance_type, []).append(price)
    quotes = []
    for instance_type, raw in by_type.items():
        numbers = [n for n in (_as_number(p) for p in raw) if n is not None]
        median: object = statistics.median(numbers) if numbers else raw[0]
        quotes.append(
            Quote(
                source=SOURCE,
                provider="aws",
                region=region,
                instance_type=instance_type,
                purchase="spot",
                usd_per_hour=median,
                origin=f"spot history {region}, {len(raw)} zone(s)",
            )
        )
    return quotes


def _later(a: object, b: object) -> bool:
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a > b
    return str(a) > str(b)


def product_quote(item: object, origin: str) -> Quote | None:
    """The on-demand quote in one Price List item (a JSON string), or None if the item
    is not a plain Linux on-demand EC2 instance. Raises ValueError if it is unreadable."""
    try:
        doc: Any = json.loads(item) if isinstance(item, str | bytes) else item
        product = doc["product"]
        attrs = product["attributes"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{origin}: not a Price List product: {exc!s:.80}") from exc
    if not isinstance(attrs, dict) or "instanceType" not in attrs:
        return None  # storage, data transfer…: not an instance
    if any(attrs.get(k) != v for k, v in ON_DEMAND_ATTRIBUTES.items()):
        return None
    region = attrs.get("regionCode")
    if not region:
        raise ValueError(f"{origin}: product {product.get('sku')} has no regionCode")
    price = _hourly_usd(doc.get("terms", {}).get("OnDemand", {}), origin)
    return Quote(
        source=SOURCE,
        provider="aws",
        region=str(region),
        instance_type=str(attrs["instanceType"]),
        purchase="on_demand",
        usd_per_hour=price,
        gpu_count=attrs.get("gpu"),
        origin=f"{origin} sku {product.get('sku', '?')}",
    )


def _hourly_usd(terms: object, origin: str) -> object:
    if not isinstance(terms, dict):
        raise ValueError(f"{origin}: OnDemand terms are not an object")
    for term in terms.values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") == "Hrs" and str(dim.get("beginRange", "0")) == "0":
                return dim.get("pricePerUnit", {}).get("USD")
    raise ValueError(f"{origin}: no hourly OnDemand price dimension")
