"""A local fake of the Cloud Billing Catalog REST path ``GET /v1/services/{id}/skus``,
paginated by ``pageSize``/``pageToken`` -> ``nextPageToken`` like the real API.

It serves the derived SKUs of gcp_skus.yaml plus the verbatim real SKU sample (network
egress), in the real JSON shape (``pricingInfo[].pricingExpression.tieredRates[]``,
unit price as ``units`` + ``nanos``).
"""

from __future__ import annotations

import json
from typing import Any

from tests.pricing.data import api_example, gcp_skus
from tests.pricing.fake_http import FakeServer, Reply, Request

SERVICE = "services/6F81-5844-456A"


def sku_json(entry: dict[str, Any]) -> dict[str, Any]:
    """A real-shaped SKU object from one gcp_skus.yaml entry."""
    usd = float(entry["usd"])
    units = int(usd)
    return {
        "name": f"{SERVICE}/skus/{entry['id']}",
        "skuId": entry["id"],
        "description": entry["description"],
        "category": {
            "serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
            "resourceGroup": entry["group"], "usageType": entry["usage"],
        },
        "serviceRegions": entry["regions"],
        "pricingInfo": [{
            "summary": "",
            "pricingExpression": {
                "usageUnit": entry["unit"], "usageUnitDescription": entry["unit"],
                "baseUnit": "s", "baseUnitDescription": "second", "displayQuantity": 1,
                "tieredRates": [{
                    "startUsageAmount": 0,
                    "unitPrice": {"currencyCode": "USD", "units": str(units),
                                  "nanos": round((usd - units) * 1e9)},
                }],
            },
            "aggregationInfo": {"aggregationLevel": "ACCOUNT", "aggregationInterval": "DAILY",
                                "aggregationCount": 1},
            "currencyConversionRate": 1,
            "effectiveTime": "2025-03-06T00:00:00Z",
        }],
        "serviceProviderName": "Google",
    }  # fmt: skip


class FakeCatalog(FakeServer):
    """``drop_region`` hides a region's SKUs; ``page_size`` caps what a page returns."""

    def __init__(self, page_size: int = 7) -> None:
        super().__init__()
        self.page_size = page_size
        self.drop_region: str | None = None
        self.skus = [sku_json(e) for e in gcp_skus()]
        self.skus += api_example("gcp_cloudbilling_sku_real_item.json")["skus"]

    def set_price(self, description: str, usd: float) -> None:
        """Change the unit price of the SKU with this description."""
        for sku in self.skus:
            if sku["description"] == description:
                units = int(usd)
                rate = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]
                rate["unitPrice"].update(units=str(units), nanos=round((usd - units) * 1e9))

    def respond(self, request: Request) -> Reply:
        if request.method != "GET" or request.path != f"/v1/{SERVICE}/skus":
            return Reply(404, json.dumps({"error": {"code": 404, "message": "not found"}}).encode())
        size = min(int(request.query.get("pageSize", ["5000"])[0]), self.page_size)
        offset = int(request.query.get("pageToken", ["0"])[0] or 0)
        page = offset // size + 1
        if self.page_fails(page):
            error = {
                "error": {"code": 503, "message": "backend unavailable", "status": "UNAVAILABLE"}
            }
            return Reply(503, json.dumps(error).encode())
        visible = [s for s in self.skus if self.drop_region not in s["serviceRegions"]]
        out: dict[str, Any] = {"skus": visible[offset : offset + size]}
        if offset + size < len(visible):
            out["nextPageToken"] = str(offset + size)
        return Reply(200, json.dumps(out).encode())
