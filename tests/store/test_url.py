"""Which database (``store.url``): the embedded default, and URLs the store can never
open refused up front, before SQLAlchemy is even imported."""

from __future__ import annotations

from pathlib import Path

import pytest

from base.errors import StoreError
from store.engine import make_engine
from store.url import check_database_url, default_database_url


def test_the_default_is_an_sqlite_file_in_the_data_directory(tmp_path: Path) -> None:
    url = default_database_url(tmp_path / "data")
    assert url == f"sqlite+aiosqlite:///{tmp_path / 'data' / 'skyroute.db'}"
    assert (tmp_path / "data").is_dir()


@pytest.mark.parametrize(
    "url", ["postgresql+asyncpg://u@db/skyroute", "sqlite+aiosqlite:////var/lib/s.db"]
)
def test_a_supported_url_passes(url: str) -> None:
    assert check_database_url(url) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("sqlite:///s.db", "unsupported database URL scheme 'sqlite'"),
        ("postgresql://u@db/skyroute", "unsupported database URL scheme 'postgresql'"),
        ("skyroute.db", "expected scheme://"),
    ],
)
def test_a_url_the_store_cannot_open_is_refused_with_the_reason(url: str, reason: str) -> None:
    with pytest.raises(StoreError, match=reason):
        check_database_url(url)


def test_the_engine_refuses_the_same_schemes() -> None:
    with pytest.raises(StoreError, match="unsupported database URL scheme 'mysql\\+aiomysql'"):
        make_engine("mysql+aiomysql://u@db/skyroute")
