"""A local fake of the Azure Retail Prices API (GET /api/retail/prices?$filter=…),
paging through ``NextPageLink`` like the real one (a few items a page here).

Items are built from the real prices in azure_vms.csv on the template of the documented
sample item: per SKU and region a Linux pay-as-you-go meter, a Spot meter, a Low
Priority meter, a Windows product and a DevTest meter. It honours the
``armRegionName`` and ``armSkuName`` terms of ``$filter`` (and records each filter).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any
from urllib.parse import urlencode

from tests.pricing.data import api_example, csv_rows
from tests.pricing.fake_http import FakeServer, Reply, Request

PATH = "/api/retail/prices"


def _item(
    sku: str, region: str, price: str, kind: str, meter_suffix: str = "", **fields: Any
) -> dict[str, Any]:
    item = copy.deepcopy(api_example("azure_retail_prices_item_example.json")["Items"][0])
    base = sku.removeprefix("Standard_").replace("_", " ")
    item.update(
        armSkuName=sku, armRegionName=region, location=region,
        meterName=f"{base}{meter_suffix}", skuName=f"{base}{meter_suffix}",
        productName=f"Virtual Machines {base} Series", type="Consumption",
        retailPrice=float(price), unitPrice=float(price), meterId=f"{sku}-{region}-{kind}",
    )  # fmt: skip
    item.update(fields)
    return item


class FakeRetailPrices(FakeServer):
    """``drop_region`` hides a region's items; ``bad_item`` adds an item without fields."""

    def __init__(self, page_size: int = 3) -> None:
        super().__init__()
        self.page_size = page_size
        self.drop_region: str | None = None
        self.bad_item = False
        self.items: list[dict[str, Any]] = []
        for row in csv_rows("azure_vms.csv"):
            sku, region = row["InstanceType"], row["Region"]
            if not row["Price"]:
                self.items.append(_item(sku, region, "0", "payg", retailPrice=None))
                continue
            od, spot = row["Price"], row["SpotPrice"] or row["Price"]
            windows = f"Virtual Machines {sku} Series Windows"
            self.items += [
                _item(sku, region, od, "payg"),
                _item(sku, region, spot, "spot", " Spot"),
                _item(sku, region, str(float(od) * 0.2), "lowpri", " Low Priority"),
                _item(sku, region, str(float(od) * 1.4), "windows", productName=windows),
                _item(sku, region, str(float(od) * 0.5), "devtest", type="DevTestConsumption"),
            ]

    @property
    def filters(self) -> list[str]:
        """Every ``$filter`` received."""
        return [f for r in self.requests for f in r.query.get("$filter", [])]

    def set_price(self, sku: str, region: str, purchase: str, usd: float) -> None:
        """Change the Linux pay-as-you-go (or Spot) price of one SKU in one region."""
        meter = f"{sku}-{region}-{'spot' if purchase == 'spot' else 'payg'}"
        for item in self.items:
            if item["meterId"] == meter:
                item["retailPrice"] = item["unitPrice"] = usd

    def respond(self, request: Request) -> Reply:
        if request.method != "GET" or request.path != PATH:
            return Reply(404, b'{"Error": "not found"}')
        odata = request.query.get("$filter", [""])[0]
        skip = int(request.query.get("$skip", ["0"])[0])
        page = skip // self.page_size + 1
        if self.page_fails(page):
            return Reply(500, b'{"Error": {"Code": "InternalServerError"}}')
        regions = set(re.findall(r"armRegionName eq '([^']+)'", odata))
        skus = set(re.findall(r"armSkuName eq '([^']+)'", odata))
        matches = [
            i for i in self.items
            if (not regions or i["armRegionName"] in regions) and (not skus or i["armSkuName"] in skus)
            and i["armRegionName"] != self.drop_region
        ]  # fmt: skip
        chunk: list[Any] = matches[skip : skip + self.page_size]
        if page == 1 and self.bad_item:
            chunk.append({"currencyCode": "USD", "retailPrice": 1.0})
        next_link = None
        if skip + self.page_size < len(matches):
            query = urlencode({"$filter": odata, "$skip": skip + self.page_size})
            next_link = f"{self.url}{PATH}?{query}"
        out = {
            "BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
            "Items": chunk, "NextPageLink": next_link, "Count": len(chunk),
        }  # fmt: skip
        return Reply(200, json.dumps(out).encode())
