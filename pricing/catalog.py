"""GPU instance shapes: how many GPUs of which type, vCPUs and memory, per instance type.

Price APIs do not always say how many GPUs an instance has (EC2 spot history, Azure
Retail Prices, GCP SKUs never do), so the count comes from ``instances.csv``, a subset
of public catalogs with its sources and corrections written at its top.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Shape:
    """One instance type: ``gpu_count`` GPUs of ``gpu_type``, ``vcpus``, ``memory_gib`` GiB."""

    provider: str
    instance_type: str
    gpu_type: str
    gpu_count: int
    vcpus: int
    memory_gib: float


class Catalog:
    """Shapes by (provider, instance type). Immutable."""

    def __init__(self, shapes: Iterable[Shape]) -> None:
        self._shapes: Mapping[tuple[str, str], Shape] = {
            (s.provider, s.instance_type): s for s in shapes
        }

    def get(self, provider: str, instance_type: str) -> Shape | None:
        """The shape, or None if the catalog does not know this instance type."""
        return self._shapes.get((provider, instance_type))

    def of(self, provider: str) -> list[Shape]:
        """Every known shape of one provider."""
        return [s for (p, _), s in self._shapes.items() if p == provider]

    @classmethod
    def builtin(cls) -> Catalog:
        """The catalog shipped with skyroute (``pricing/instances.csv``)."""
        text = resources.files("pricing").joinpath("instances.csv").read_text()
        return cls.from_csv_lines(text.splitlines())

    @classmethod
    def from_csv_lines(cls, lines: Iterable[str]) -> Catalog:
        """Parse ``provider,instance_type,gpu_type,gpu_count,vcpus,memory_gib`` rows
        (lines starting with ``#`` are comments). Raises ValueError on a bad row."""
        rows = csv.DictReader(line for line in lines if line.strip() and not line.startswith("#"))
        return cls(
            Shape(
                provider=r["provider"],
                instance_type=r["instance_type"],
                gpu_type=r["gpu_type"].upper(),
                gpu_count=int(r["gpu_count"]),
                vcpus=int(r["vcpus"]),
                memory_gib=float(r["memory_gib"]),
            )
            for r in rows
        )
