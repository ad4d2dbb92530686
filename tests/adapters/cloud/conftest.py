"""Local cloud endpoints for the node-group tests, each started once per session on first use.

``harness`` is parametrised over every provider unless a test picks its own providers
(``@pytest.mark.parametrize("harness", [...], indirect=True)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.adapters.cloud.aws_fake import MotoWithFaults
from tests.adapters.cloud.azure_fake import AzureFake
from tests.adapters.cloud.gcp_fake import GcpFake
from tests.adapters.cloud.harness import (
    AwsHarness,
    AzureHarness,
    FakeHarness,
    GcpHarness,
    Harness,
    LocalHarness,
)
from tests.adapters.cloud.tls import LocalCA, make_local_ca

_BUILDERS: dict[str, Callable[[pytest.FixtureRequest], Harness]] = {
    "aws": lambda r: AwsHarness(r.getfixturevalue("moto"), r.getfixturevalue("monkeypatch")),
    "gcp-zonal": lambda r: GcpHarness(r.getfixturevalue("gcp_fake"), zonal=True),
    "gcp-regional": lambda r: GcpHarness(r.getfixturevalue("gcp_fake"), zonal=False),
    "azure": lambda r: AzureHarness(r.getfixturevalue("azure_fake"), r.getfixturevalue("local_ca")),
    "local": lambda r: LocalHarness(),
    "fake": lambda r: FakeHarness(),
}
PROVIDERS = tuple(_BUILDERS)
CAPABILITIES = {
    "aws": AwsHarness.capabilities,
    "gcp-zonal": GcpHarness.capabilities,
    "gcp-regional": GcpHarness.capabilities,
    "azure": AzureHarness.capabilities,
    "local": LocalHarness.capabilities,
    "fake": FakeHarness.capabilities,
}


def providers_with(capability: str) -> list[str]:
    return [p for p in PROVIDERS if capability in CAPABILITIES[p]]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness" not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        names = names.split(",") if isinstance(names, str) else names
        if "harness" in [n.strip() for n in names]:
            return
    metafunc.parametrize("harness", PROVIDERS, indirect=True)


@pytest.fixture
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    built = _BUILDERS[request.param](request)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoWithFaults]:
    server = MotoWithFaults().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcp_fake() -> Iterator[GcpFake]:
    fake = GcpFake()
    fake.server.start()
    yield fake
    fake.server.stop()


@pytest.fixture(scope="session")
def local_ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return make_local_ca(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="session")
def azure_fake(local_ca: LocalCA) -> Iterator[AzureFake]:
    fake = AzureFake(local_ca.server_context())
    fake.server.start()
    yield fake
    fake.server.stop()
