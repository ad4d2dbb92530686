"""Cross-reference checks of a routing policy, on the plain document.

They read the parsed YAML (or a validated policy's ``model_dump()``) rather than the
models, so ``policy check`` can report broken references in the same run as field errors:
a document whose fields do not validate is still checked for every reference it holds.
Entries of the wrong shape are skipped here; field validation reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def cross_reference_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every broken reference in ``doc``, each as ``"key.path: reason"``. Pure."""
    problems: list[str] = []
    slo_classes = _mapping(doc.get("slo_classes"))
    models = _mapping(doc.get("models"))
    client_regions = _mapping(doc.get("client_regions"))
    raw_pools = doc.get("pools")
    pools: list[Any] = raw_pools if isinstance(raw_pools, list) else []
    for name, model in models.items():
        default_slo = _mapping(model).get("default_slo")
        if slo_classes and default_slo is not None and default_slo not in slo_classes:
            problems.append(f"models.{name}.default_slo: unknown SLO class {default_slo!r}")
    seen: set[str] = set()
    locations: set[str] = set()
    for i, pool in enumerate(pools):
        if not isinstance(pool, Mapping):
            continue
        pool_id, model = pool.get("id"), pool.get("model")
        if pool_id in seen:
            problems.append(f"pools[{i}].id: duplicate pool id {pool_id!r}")
        if isinstance(pool_id, str):
            seen.add(pool_id)
        if models and model is not None and model not in models:
            problems.append(f"pools[{i}].model: unknown model {model!r}")
        locations.add(f"{pool.get('provider')}:{pool.get('region')}")
    problems += _version_problems(models, pools)
    default_region = _mapping(doc.get("routing")).get("default_client_region")
    if client_regions and default_region is not None and default_region not in client_regions:
        problems.append(f"routing.default_client_region: unknown client region {default_region!r}")
    served = {name: False for name in models}
    for name, region in client_regions.items():
        rtt = _mapping(_mapping(region).get("rtt_ms"))
        for pool in _items(pools):
            if (
                f"{pool.get('provider')}:{pool.get('region')}" in rtt
                and pool.get("model") in served
            ):
                served[pool["model"]] = True
        unknown = set(rtt) - locations
        if unknown:
            problems.append(f"client_regions.{name}.rtt_ms: no pool in {sorted(unknown)}")
    for tname, raw in _mapping(doc.get("tenants")).items():
        problems += _tenant_problems(
            str(tname), _mapping(raw), slo_classes, client_regions, models, locations
        )
    if client_regions and pools:
        problems += [
            f"models.{m}: no pool serves it from any client region"
            for m, ok in served.items()
            if not ok
        ]
    return problems


def _version_problems(models: Mapping[str, Any], pools: list[Any]) -> list[str]:
    """A model whose pools declare versions names the one that serves it, and every one
    of its pools says which version it serves."""
    problems: list[str] = []
    for name, raw in models.items():
        serving = _mapping(raw).get("version")
        mine = [
            (i, p.get("version"))
            for i, p in enumerate(pools)
            if isinstance(p, Mapping) and p.get("model") == name
        ]
        declared = {v for _, v in mine if v is not None}
        if not declared and serving is None:
            continue
        if serving is None:
            problems.append(
                f"models.{name}.version: its pools declare versions {sorted(declared)}; "
                "say which one serves"
            )
        elif serving not in declared:
            problems.append(f"models.{name}.version: no pool serves version {serving!r}")
        problems += [
            f"pools[{i}].version: model {name!r} has versions; say which this pool serves"
            for i, v in mine
            if v is None
        ]
    return problems


def _tenant_problems(
    name: str,
    tenant: Mapping[str, Any],
    slo_classes: Mapping[str, Any],
    client_regions: Mapping[str, Any],
    models: Mapping[str, Any],
    locations: set[str],
) -> list[str]:
    problems: list[str] = []
    default_slo = tenant.get("default_slo")
    if default_slo is not None and slo_classes and default_slo not in slo_classes:
        problems.append(f"tenants.{name}.default_slo: unknown SLO class {default_slo!r}")
    region = tenant.get("client_region")
    if region is not None and client_regions and region not in client_regions:
        problems.append(f"tenants.{name}.client_region: unknown client region {region!r}")
    allowed = tenant.get("allowed_models", ["*"])
    unknown_models = [m for m in allowed if m != "*" and m not in models] if models else []
    if isinstance(allowed, list) and unknown_models:
        problems.append(f"tenants.{name}.allowed_models: unknown models {unknown_models}")
    regions = tenant.get("allowed_regions") or []
    unknown_regions = sorted(set(regions) - locations) if isinstance(regions, list) else []
    if unknown_regions:
        problems.append(f"tenants.{name}.allowed_regions: no pool in {unknown_regions}")
    return problems
