"""Readers of the copied fixture rows in tests/fixtures/pricing (comment lines skipped)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pricing"


def csv_rows(name: str) -> list[dict[str, str]]:
    """Rows of a fixture CSV whose first lines are ``#`` source comments."""
    lines = (FIXTURES / name).read_text().splitlines()
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))


def api_example(name: str) -> dict[str, Any]:
    """One of the verbatim API samples (each carries a ``_source`` key)."""
    data: dict[str, Any] = json.loads((FIXTURES / "api_examples" / name).read_text())
    return data


def gcp_skus() -> list[dict[str, Any]]:
    """The derived SKU list of gcp_skus.yaml."""
    doc = yaml.safe_load((FIXTURES / "gcp_skus.yaml").read_text())
    skus: list[dict[str, Any]] = doc["skus"]
    return skus
