"""From Cloud Billing Catalog SKUs to GCP machine-type prices. Pure: no SDK here.

GCP bills a GPU machine as three SKUs per region and purchase option: the vCPUs
(``<Family> Instance Core running in …``, per vCPU-hour), the memory (``<Family>
Instance Ram running in …``, per GiB-hour) and the GPUs (``Nvidia <GPU> GPU running
in …``, per GPU-hour; ``… attached to Spot Preemptible VMs …`` for spot). Spot
core/RAM SKUs start with ``Spot Preemptible``. ``category.usageType`` says which
purchase option a SKU prices: ``OnDemand`` -> on_demand, ``Preemptible`` -> spot
(commitments are ignored). Unit price = ``units + nanos / 1e9`` USD of the first tier.

A machine type's USD/hour = vCPUs × core + memory GiB × RAM + GPUs × GPU, with its
shape from the catalog and this family mapping:

    machine type prefix   core/RAM SKUs   GPU SKU
    a2-highgpu-*          A2              Nvidia Tesla A100
    a2-megagpu-*          A2              Nvidia Tesla A100
    a2-ultragpu-*         A2              Nvidia Tesla A100 80GB
    a3-highgpu-*          A3              Nvidia H100 80GB
    a3-megagpu-*          A3              Nvidia H100 80GB Mega
    g2-standard-*         G2              Nvidia L4
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from live.price_table import PriceKey
from pricing.catalog import Catalog
from pricing.feed import Quote

logger = logging.getLogger(__name__)

SOURCE = "gcp"
COMPUTE_ENGINE = "services/6F81-5844-456A"

MACHINE_FAMILIES: Mapping[str, tuple[str, str]] = {
    "a2-highgpu": ("A2", "Nvidia Tesla A100"),
    "a2-megagpu": ("A2", "Nvidia Tesla A100"),
    "a2-ultragpu": ("A2", "Nvidia Tesla A100 80GB"),
    "a3-highgpu": ("A3", "Nvidia H100 80GB"),
    "a3-megagpu": ("A3", "Nvidia H100 80GB Mega"),
    "g2-standard": ("G2", "Nvidia L4"),
}
USAGE_TYPES: Mapping[str, str] = {"OnDemand": "on_demand", "Preemptible": "spot"}
_CORE_RAM = re.compile(
    r"^(?:Spot Preemptible )?(?P<family>A2|A3|G2) Instance (?P<part>Core|Ram) running in "
)
_GPU = re.compile(
    r"^(?P<gpu>Nvidia .+?) GPU (?:running in|attached to Spot Preemptible VMs running in) "
)
_UNITS = {"Core": "h", "Ram": "GiBy.h", "GPU": "h"}


@dataclass(frozen=True)
class Sku:
    """What the feed needs of one billing SKU. ``usd`` is the first tier's unit price,
    None when the SKU carries no readable USD price."""

    sku_id: str
    description: str
    resource_group: str
    usage_type: str
    regions: tuple[str, ...]
    usage_unit: str
    usd: float | None


# (component, region, purchase) -> USD per unit; component is "A2:Core", "A2:Ram" or
# "GPU:Nvidia L4" and so on.
Components = dict[tuple[str, str, str], float]


def _component(sku: Sku) -> str | None:
    if m := _CORE_RAM.match(sku.description):
        part = m["part"]
        return f"{m['family']}:{part}" if sku.usage_unit == _UNITS[part] else None
    if (m := _GPU.match(sku.description)) and sku.usage_unit == _UNITS["GPU"]:
        return f"GPU:{m['gpu']}"
    return None


def price_components(skus: Iterable[Sku]) -> tuple[Components, list[str]]:
    """Unit prices of every core, RAM and GPU SKU this feed maps, per region and
    purchase option, and a 'why' line for each such SKU that had no usable price."""
    out: Components = {}
    malformed: list[str] = []
    for sku in skus:
        purchase = USAGE_TYPES.get(sku.usage_type)
        component = _component(sku)
        if purchase is None or component is None:
            continue
        if sku.usd is None:
            malformed.append(f"sku {sku.sku_id} ({sku.description}): no USD unit price")
            continue
        for region in sku.regions:
            out[(component, region, purchase)] = sku.usd
    return out, malformed


def machine_quotes(
    components: Components, wants: Iterable[PriceKey], catalog: Catalog
) -> list[Quote]:
    """A quote per wanted GCP machine type whose three SKUs were all found. A machine
    type outside the mapping, or missing a SKU in its region, gets no quote (it shows
    as missing) and a log line."""
    quotes = []
    for key in sorted(k for k in wants if k.provider == "gcp"):
        shape = catalog.get("gcp", key.instance_type)
        family = MACHINE_FAMILIES.get(key.instance_type.rsplit("-", 1)[0])
        if shape is None or family is None:
            logger.warning("gcp price feed: no SKU mapping for machine type %s", key.instance_type)
            continue
        names = (f"{family[0]}:Core", f"{family[0]}:Ram", f"GPU:{family[1]}")
        prices = [components.get((n, key.region, key.purchase)) for n in names]
        if any(p is None for p in prices):
            absent = [n for n, p in zip(names, prices, strict=True) if p is None]
            logger.warning("gcp price feed: %s: no SKU for %s", key, ", ".join(absent))
            continue
        core, ram, gpu = (p or 0.0 for p in prices)
        usd = shape.vcpus * core + shape.memory_gib * ram + shape.gpu_count * gpu
        quotes.append(
            Quote(
                source=SOURCE,
                provider="gcp",
                region=key.region,
                instance_type=key.instance_type,
                purchase=key.purchase,
                usd_per_hour=usd,
                gpu_type=shape.gpu_type,
                gpu_count=shape.gpu_count,
                origin=f"{shape.vcpus} x core {core:g} + {shape.memory_gib:g} GiB x ram "
                f"{ram:g} + {shape.gpu_count} x gpu {gpu:g}",
            )
        )
    return quotes
