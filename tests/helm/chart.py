"""Render the skyroute chart with Helm's own engine and validate what comes out.

``helm-python-sdk`` embeds Helm v4's Go library (no ``helm`` binary), so rendering here is
exactly ``helm template``, including values.schema.json validation and ``fail``.
``kubernetes-validate`` ships the Kubernetes JSON schemas, so validation works offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parents[2] / "helm" / "skyroute"
RELEASE = "sr"
NAMESPACE = "llm"
# Kinds the Kubernetes schemas do not cover (CRDs); checked field by field in the tests.
CRD_KINDS = {"ServiceMonitor"}


@dataclass(frozen=True)
class Rendered:
    """The manifests of one render, parsed, plus NOTES.txt."""

    docs: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
        return found[0]


def render(values: dict[str, Any] | None = None) -> Rendered:
    """``helm template sr helm/skyroute -n llm`` with ``values``. Raises helm_python.HelmError."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return Rendered(docs, notes)


def validate(doc: dict[str, Any], kube_version: str) -> None:
    """Validate one manifest against the strict schema of its kind in ``kube_version``.

    Raises kubernetes_validate.ValidationError (or SchemaNotFoundError for an unknown kind).
    """
    kubernetes_validate.validate(doc, kube_version, strict=True)


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's env as {name: EnvVar}."""
    return {e["name"]: e for e in container.get("env", [])}
