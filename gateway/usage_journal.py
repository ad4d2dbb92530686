"""A gateway replica's write-ahead journal of usage records: a process killed at any
point (SIGKILL, the OOM killer) loses none of the requests it served.

One file per replica id, ``{dir}/{quote(redis prefix)}/{quote(replica id)}.usage``, held
under an exclusive ``flock`` for the life of the process, made of JSON lines:

    [seq, ts_s, request_id, tenant, model, pool, provider, region, prompt_tokens,
     completion_tokens, cost_nusd, status, est_tokens, uid]     one record
    {"flushed": seq}      every record with a smaller seq is in Redis

- ``append`` (the request path): ONE ``os.write`` of one line on an ``O_APPEND``
  descriptor, no fsync: the kernel's page cache outlives the process, not the machine,
  so a power loss or kernel crash may lose the records of the last few seconds.
- ``flushed`` (the flush loop, after Redis took a batch): empties the file when no record
  is left unflushed, else appends a checkpoint line, or rewrites the file with only the
  unflushed records once it passes ``MAX_BYTES``. The file stays small.
- ``open_journal`` (start-up, before serving): takes this replica's file and every
  unlocked journal in the same directory (a lock that is free means its process is
  dead: this replica before a restart, or a pod that came back under a new id), and
  returns their unflushed records to re-queue, once each (by ``uid``).

Idempotency: every record carries a ``uid`` (``gateway.finish`` draws it: a random epoch
per process and a counter; kept when replayed), which the ledger uses as its idempotency
id (``store.usage_rows``). A process killed
after Redis took a batch and before its checkpoint replays that batch; the store counts
it once. Redis's own counters (``usage:{tenant}:{hour}`` roll-ups, ``spend`` and the TPM
bucket) count it twice: nothing reconciles roll-ups from the store, and the refill
(``live.access_refill``) only ever raises a spend counter, so that over-count stays until
the counters expire (spend: its budget period ends). That window is one Redis round trip
per flush.

Errors: a failed write (disk full) never fails a request: it is logged once and counted
in ``errors``, and the record stays on the in-memory path. ``open_journal`` raises
OSError when the directory cannot be used (the gateway then runs without a journal).
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
from collections import deque
from pathlib import Path
from urllib.parse import quote

import orjson

from live.access_table import UsageRecord

logger = logging.getLogger(__name__)

SUFFIX = ".usage"
# A file with unflushed records is rewritten, not appended to, once it is this large.
MAX_BYTES = 4 << 20


def journal_dir(base: Path | None, prefix: str) -> Path:
    """The journal directory of one Redis prefix under ``base`` (None: the user's data
    directory, ``$XDG_DATA_HOME/skyroute/journal``, as ``store.url`` chooses)."""
    if base is None:
        data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        base = Path(data) / "skyroute" / "journal"
    return base / quote(prefix, safe="")


def encode(seq: int, r: UsageRecord) -> bytes:
    """One record's journal line (``seq``: its place in the file's writer's order)."""
    return orjson.dumps(
        [seq, r.ts_s, r.request_id, r.tenant, r.model, r.pool, r.provider, r.region,
         r.prompt_tokens, r.completion_tokens, r.cost_nusd, r.status, r.est_tokens, r.uid]
    ) + b"\n"  # fmt: skip


def decode(data: bytes) -> list[UsageRecord]:
    """The records of a journal's content that no checkpoint covers, in order. Lines
    that do not parse (a torn last write) are skipped; never raises."""
    found: list[tuple[int, UsageRecord]] = []
    flushed = 0
    for line in data.split(b"\n"):
        try:
            v = orjson.loads(line)
            if isinstance(v, dict):
                flushed = max(flushed, int(v["flushed"]))
            elif isinstance(v, list) and len(v) == 14:
                record = UsageRecord(
                    float(v[1]), str(v[2]), str(v[3]), str(v[4]), str(v[5]), str(v[6]),
                    str(v[7]), int(v[8]), int(v[9]), int(v[10]), str(v[11]), int(v[12]),
                    str(v[13]),
                )  # fmt: skip
                found.append((int(v[0]), record))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return [r for seq, r in found if seq >= flushed]


class UsageJournal:
    """This replica's open, locked journal file. Not thread-safe (one event loop)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.path = path
        self._fd = fd
        # Records appended so far: the seq of the next one.
        self.position = 0
        self._unflushed: deque[tuple[int, bytes]] = deque()
        self._size = 0
        self._torn = False
        # Failed writes, truncations and rewrites (disk full, I/O error).
        self.errors = 0

    def _failed(self, what: str, exc: OSError | None) -> None:
        if self.errors == 0:
            logger.error("usage journal %s: %s failed (%s); records kept in memory only",
                         self.path, what, exc or "short write")  # fmt: skip
        self.errors += 1

    def _write(self, data: bytes) -> None:
        if self._torn:  # end the torn line first, so that the next one parses
            data = b"\n" + data
        try:
            n = os.write(self._fd, data)
        except OSError as exc:
            self._torn = True
            self._failed("write", exc)
            return
        self._size += n
        self._torn = n < len(data)
        if self._torn:
            self._failed("write", None)

    def append(self, record: UsageRecord) -> None:
        """Journal one record: one write syscall (about 1 µs in all); never raises."""
        seq = self.position
        self.position = seq + 1
        line = encode(seq, record)
        self._unflushed.append((seq, line))
        self._write(line)

    def flushed(self, upto: int) -> None:
        """Every record appended before ``position`` was ``upto`` is in Redis: forget
        them. Idempotent; never raises."""
        unflushed = self._unflushed
        while unflushed and unflushed[0][0] < upto:
            unflushed.popleft()
        if not unflushed:
            try:
                os.ftruncate(self._fd, 0)
            except OSError as exc:
                self._failed("truncate", exc)
            else:
                self._size, self._torn = 0, False
                return
        if self._size > MAX_BYTES:
            try:
                self._rewrite()
            except OSError as exc:
                self._failed("rewrite", exc)
            else:
                return
        self._write(b'{"flushed":%d}\n' % upto)

    def _rewrite(self) -> None:
        # A new file with only the unflushed records, locked before it replaces the old
        # one, so that no other process can take it in between. Raises OSError.
        data = b"".join(line for _, line in self._unflushed)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC,
                     0o600)  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.replace(tmp, self.path)
        except OSError:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(self._fd)
        self._fd, self._size, self._torn = fd, len(data), False

    def _restart(self, records: list[UsageRecord]) -> None:
        # The file's content becomes ``records`` (replayed), numbered from 0.
        self._unflushed = deque((seq, encode(seq, r)) for seq, r in enumerate(records))
        self.position = len(records)
        if records:
            self._rewrite()
        else:
            os.ftruncate(self._fd, 0)

    def close(self) -> None:
        """Release the file; delete it when every record is in Redis (a clean stop),
        else leave it for the next start. Never raises."""
        try:
            if not self._unflushed:
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
        except OSError as exc:
            self._failed("close", exc)


def _lock(path: Path, create: bool) -> int | None:
    """An open, exclusively locked descriptor of ``path``; None when a live process
    holds it, or it was deleted (adopted) by another while this one waited."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink > 0:
            return fd
    except BlockingIOError:
        pass
    os.close(fd)
    return None


def _read(fd: int) -> list[UsageRecord]:
    return decode(os.pread(fd, os.fstat(fd).st_size, 0))


def open_journal(directory: Path, replica_id: str) -> tuple[UsageJournal, list[UsageRecord]]:
    """This replica's journal, and the unflushed records of the journals left in
    ``directory`` by dead processes (its own included), each once, oldest first. Those
    records are in the new journal already; the caller queues them before serving.
    Raises OSError (then no file was changed)."""
    directory.mkdir(parents=True, exist_ok=True)
    name = quote(replica_id, safe="")
    own = directory / f"{name}{SUFFIX}"
    fd = _lock(own, create=True)
    if fd is None:  # held, or adopted by a starting process just now: once more
        fd = _lock(own, create=True)
    if fd is None:  # a live process has this replica id too: never share its file
        own = directory / f"{name}~{secrets.token_hex(4)}{SUFFIX}"
        logger.warning("usage journal of replica %s is in use; journaling to %s",
                       replica_id, own.name)  # fmt: skip
        fd = _lock(own, create=True)
        if fd is None:
            raise OSError(f"cannot lock a usage journal in {directory}")
    journal = UsageJournal(fd, own)
    adopted: list[tuple[Path, int]] = []
    unique: list[UsageRecord] = []
    try:
        records = _read(fd)
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            other = None if path == own else _lock(path, create=False)
            if other is not None:
                adopted.append((path, other))
                records += _read(other)
        seen: set[str] = set()
        for r in records:
            if r.uid and r.uid in seen:
                continue  # in two files: a start-up died between its rewrite and unlinks
            seen.add(r.uid)
            unique.append(r)
        journal._restart(unique)
    except OSError:
        for other in (journal._fd, *(o for _, o in adopted)):
            os.close(other)
        raise
    for path, other in adopted:
        path.unlink(missing_ok=True)
        os.close(other)
    if unique:
        logger.warning("usage journal: %d unflushed records of dead processes replayed "
                       "(%d journal files)", len(unique), len(adopted) + 1)  # fmt: skip
    return journal, unique
