"""The usage journal: what a process killed at any point leaves behind is replayed once."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway import usage_journal
from gateway.usage import UsageLog
from gateway.usage_journal import UsageJournal, decode, encode, open_journal
from live.access_table import UsageRecord


def record(n: int) -> UsageRecord:
    return UsageRecord(
        ts_s=1_764_000_000.0 + n, request_id=f"req-{n}", tenant="acme", model="llama",
        pool="aws:p", provider="aws", region="us-east-1", prompt_tokens=10,
        completion_tokens=n, cost_nusd=1_000 + n, status="ok", est_tokens=20,
        uid=f"epoch.{n:x}",
    )  # fmt: skip


def append(journal: UsageJournal, *ns: int) -> list[UsageRecord]:
    """Journal the ``ns``-th records; the records."""
    records = [record(n) for n in ns]
    for r in records:
        journal.append(r)
    return records


def crash(journal: UsageJournal) -> None:
    """What SIGKILL does to the journal: its descriptor (and lock) goes, its data stays."""
    os.close(journal._fd)


def ids(records: list[UsageRecord]) -> list[str]:
    return [r.request_id for r in records]


def test_records_appended_are_replayed_after_a_crash_with_every_field(tmp_path: Path) -> None:
    journal, replayed = open_journal(tmp_path, "gw-1")
    assert replayed == []
    sent = append(journal, 0, 1, 2)
    crash(journal)

    again, replayed = open_journal(tmp_path, "gw-1")
    assert replayed == sent
    crash(again)


def test_records_a_checkpoint_covers_are_not_replayed(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, "gw-1")
    for n in range(3):
        journal.append(record(n))
    journal.flushed(2)  # the flush took records 0 and 1; 2 came during its round trip
    journal.append(record(3))
    crash(journal)

    again, replayed = open_journal(tmp_path, "gw-1")
    assert ids(replayed) == ["req-2", "req-3"]
    crash(again)


def test_replayed_records_are_journaled_again_until_flushed(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, "gw-1")
    first = append(journal, 0)[0]
    crash(journal)
    second, replayed = open_journal(tmp_path, "gw-1")  # died again before its flush
    crash(second)

    third, replayed = open_journal(tmp_path, "gw-1")
    assert replayed == [first]
    third.flushed(third.position)
    crash(third)
    fourth, replayed = open_journal(tmp_path, "gw-1")
    assert replayed == []
    crash(fourth)


def test_a_flush_that_leaves_nothing_unflushed_empties_the_file(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, "gw-1")
    for n in range(5):
        journal.append(record(n))
    journal.flushed(journal.position)
    assert journal.path.stat().st_size == 0
    journal.append(record(5))
    assert ids(decode(journal.path.read_bytes())) == ["req-5"]
    crash(journal)


def test_a_large_file_is_rewritten_with_only_its_unflushed_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage_journal, "MAX_BYTES", 2_000)
    journal, _ = open_journal(tmp_path, "gw-1")
    for n in range(200):
        journal.append(record(n))
        if n % 10 == 9:
            journal.flushed(journal.position - 1)  # one record always left unflushed
    assert journal.path.stat().st_size < 2_000 + 2 * len(encode(0, record(0)))
    crash(journal)

    again, replayed = open_journal(tmp_path, "gw-1")
    assert ids(replayed) == ["req-199"]
    crash(again)


def test_a_live_processs_journal_is_neither_shared_nor_adopted(tmp_path: Path) -> None:
    live, _ = open_journal(tmp_path, "gw-1")
    kept = append(live, 0)[0]

    same_id, replayed = open_journal(tmp_path, "gw-1")
    other_id, replayed_too = open_journal(tmp_path, "gw-2")
    assert replayed == replayed_too == []
    assert same_id.path != live.path
    assert decode(live.path.read_bytes()) == [kept]
    for journal in (live, same_id, other_id):
        crash(journal)


def test_a_dead_replicas_journal_is_adopted_by_another_id_and_deleted(tmp_path: Path) -> None:
    dead, _ = open_journal(tmp_path, "old-pod")
    lost = append(dead, 0, 1)
    crash(dead)

    journal, replayed = open_journal(tmp_path, "new-pod")
    assert replayed == lost
    assert not dead.path.exists()
    assert decode(journal.path.read_bytes()) == lost
    crash(journal)


def test_journals_of_another_redis_prefix_are_not_adopted(tmp_path: Path) -> None:
    dead, _ = open_journal(usage_journal.journal_dir(tmp_path, "sr:a"), "gw-1")
    dead.append(record(0))
    crash(dead)

    journal, replayed = open_journal(usage_journal.journal_dir(tmp_path, "sr:b"), "gw-2")
    assert replayed == []
    assert dead.path.exists()
    crash(journal)


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, "gw-1")
    kept = append(journal, 0, 1)
    crash(journal)
    with journal.path.open("ab") as f:
        f.write(encode(2, record(2))[:-20])  # killed inside a write

    again, replayed = open_journal(tmp_path, "gw-1")
    assert replayed == kept
    crash(again)


def test_a_record_in_two_files_is_replayed_once(tmp_path: Path) -> None:
    # A start-up killed after rewriting its own file and before deleting the adopted one.
    dead, _ = open_journal(tmp_path, "old-pod")
    lost = append(dead, 0)[0]
    crash(dead)
    (tmp_path / "gw-1.usage").write_bytes(encode(0, lost))

    journal, replayed = open_journal(tmp_path, "gw-1")
    assert replayed == [lost]
    crash(journal)


def test_a_failed_write_is_counted_logged_once_and_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    journal, _ = open_journal(tmp_path, "gw-1")
    log: UsageLog[UsageRecord] = UsageLog()
    log.journal = journal
    real: Callable[[int, bytes], int] = os.write

    def disk_full(fd: int, data: bytes) -> int:
        if fd == journal._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", disk_full)
    with caplog.at_level(logging.ERROR, logger="gateway.usage_journal"):
        log.record(record(0))
        log.record(record(1))
    monkeypatch.undo()
    log.record(record(2))

    assert journal.errors == 2
    assert len(caplog.records) == 1
    assert ids(log.take()) == ["req-0", "req-1", "req-2"]  # the in-memory path goes on
    assert ids(decode(journal.path.read_bytes())) == ["req-2"]
    crash(journal)


def test_a_clean_close_deletes_the_file_only_when_everything_is_flushed(
    tmp_path: Path,
) -> None:
    journal, _ = open_journal(tmp_path, "gw-1")
    journal.append(record(0))
    journal.flushed(journal.position)
    journal.close()
    assert not journal.path.exists()

    journal, _ = open_journal(tmp_path, "gw-1")
    journal.append(record(1))
    journal.close()
    again, replayed = open_journal(tmp_path, "gw-1")
    assert ids(replayed) == ["req-1"]
    crash(again)


def test_decode_keeps_the_records_after_the_last_checkpoint() -> None:
    data = b"".join(encode(n, record(n)) for n in range(4))
    data += b'{"flushed":3}\nnot json\n[1,2]\n'
    assert ids(decode(data)) == ["req-3"]
