"""A local fake of the AWS Price List API's ``GetProducts`` (JSON 1.1 protocol: POST /
with ``X-Amz-Target: AWSPriceListService.GetProducts``, paginated by ``NextToken``).

Its products are built from the real on-demand prices in aws_vms.csv: per instance type
and region one plain Linux product, plus a Windows and a capacity-reservation variant
that only correct ``TERM_MATCH`` filters keep out. The verbatim aws-cli sample item (an
EBS storage product) rides on every first page, as a non-instance item to skip.
"""

from __future__ import annotations

import json
from typing import Any

from tests.pricing.data import api_example, csv_rows
from tests.pricing.fake_http import FakeServer, Reply, Request

TARGET = "AWSPriceListService.GetProducts"


def product(instance_type: str, region: str, usd: str, gpus: str, **attrs: str) -> dict[str, Any]:
    """One Price List product document, shaped like the real ones."""
    sku = f"FAKE{abs(hash((instance_type, region, tuple(attrs.items())))) % 10**12:012d}"
    attributes = {
        "servicecode": "AmazonEC2", "instanceType": instance_type, "regionCode": region,
        "location": region, "locationType": "AWS Region", "operatingSystem": "Linux",
        "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
        "licenseModel": "No License required", "gpu": gpus, "operation": "RunInstances",
        "usagetype": f"BoxUsage:{instance_type}", **attrs,
    }  # fmt: skip
    term = f"{sku}.JRTCKXETXF"
    return {
        "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                term: {
                    "priceDimensions": {
                        f"{term}.6YS6EN2CT7": {
                            "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                            "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                            "rateCode": f"{term}.6YS6EN2CT7", "pricePerUnit": {"USD": usd},
                        }
                    },
                    "sku": sku, "effectiveDate": "2024-06-01T00:00:00Z",
                    "offerTermCode": "JRTCKXETXF", "termAttributes": {},
                }
            }
        },
        "version": "20240601000000",
        "publicationDate": "2024-06-01T00:00:00Z",
    }  # fmt: skip


class FakePricing(FakeServer):
    """GetProducts over the products in ``self.products``; 3 items a page by default.

    ``drop_region`` hides a region's products; ``bad_item`` adds one non-JSON item.
    """

    def __init__(self, page_size: int = 3) -> None:
        super().__init__()
        self.page_size = page_size
        self.drop_region: str | None = None
        self.bad_item = False
        self.products: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for row in csv_rows("aws_vms.csv"):
            key = (row["InstanceType"], row["Region"])
            if key in seen:
                continue
            seen.add(key)
            gpus = str(int(float(row["AcceleratorCount"])))
            self.products.append(product(*key, row["Price"], gpus))
            self.products.append(
                product(*key, str(float(row["Price"]) * 1.5), gpus, operatingSystem="Windows")
            )
            self.products.append(
                product(*key, "0.0", gpus, capacitystatus="UnusedCapacityReservation")
            )

    def set_price(self, instance_type: str, region: str, usd: str) -> None:
        """Change the Linux on-demand price of one instance type in one region."""
        for doc in self.products:
            attrs = doc["product"]["attributes"]
            plain = attrs["operatingSystem"] == "Linux" and attrs["capacitystatus"] == "Used"
            if plain and (attrs["instanceType"], attrs["regionCode"]) == (instance_type, region):
                dims = next(iter(doc["terms"]["OnDemand"].values()))["priceDimensions"]
                next(iter(dims.values()))["pricePerUnit"]["USD"] = usd

    def respond(self, request: Request) -> Reply:
        if request.method != "POST" or request.headers.get("x-amz-target") != TARGET:
            return Reply(400, json.dumps({"__type": "UnknownOperationException"}).encode())
        body = json.loads(request.body)
        offset = int(body.get("NextToken") or 0)
        page = offset // self.page_size + 1
        if self.page_fails(page):
            return Reply(
                500, json.dumps({"__type": "InternalErrorException", "Message": "boom"}).encode()
            )
        matches = [
            json.dumps(p) for p in self.products if self._matches(p, body.get("Filters", []))
        ]
        chunk = matches[offset : offset + self.page_size]
        if page == 1:
            chunk.append(api_example("aws_pricing_get_products_example.json")["PriceList"][0])
            if self.bad_item:
                chunk.append("{not json")
        out: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": chunk}
        if offset + self.page_size < len(matches):
            out["NextToken"] = str(offset + self.page_size)
        return Reply(200, json.dumps(out).encode(), "application/x-amz-json-1.1")

    def _matches(self, doc: dict[str, Any], filters: list[dict[str, str]]) -> bool:
        attrs = doc["product"]["attributes"]
        if attrs["regionCode"] == self.drop_region:
            return False
        return all(
            f["Type"] == "TERM_MATCH" and attrs.get(f["Field"]) == f["Value"] for f in filters
        )
