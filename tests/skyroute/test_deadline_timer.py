"""``DeadlineTimer`` on a manual clock: one loop timer per connection, whatever the
number of requests, and every armed deadline fires on time, never late."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from skyroute.front_door import DeadlineTimer


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualLoop:
    """The loop's clock and ``call_at``, advanced by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.created = 0
        self._queue: list[tuple[float, int, Handle, Callable[[], object]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object]) -> Handle:
        handle = Handle()
        self.created += 1
        heapq.heappush(self._queue, (when, next(self._order), handle, callback))
        return handle

    def advance(self, to: float) -> None:
        while self._queue and self._queue[0][0] <= to:
            when, _, handle, callback = heapq.heappop(self._queue)
            self.now = when
            if not handle.cancelled:
                callback()
        self.now = to

    def pending(self) -> int:
        return sum(not h.cancelled for _, _, h, _ in self._queue)


def timer() -> tuple[ManualLoop, DeadlineTimer, list[tuple[float, bool]]]:
    loop = ManualLoop()
    fired: list[tuple[float, bool]] = []
    return loop, DeadlineTimer(loop, lambda tag: fired.append((loop.now, tag))), fired  # type: ignore[arg-type]


def test_a_thousand_requests_make_one_timer_and_fire_nothing() -> None:
    loop, door, fired = timer()
    for n in range(1_000):
        loop.advance(n * 0.01)
        door.arm(10.0, True)  # request begins: header deadline
        door.arm(30.0, False)  # headers complete: body deadline
        door.disarm()  # answered
    loop.advance(100.0)
    assert fired == []
    assert loop.created <= 2
    assert loop.pending() == 0


def test_a_deadline_fires_at_its_time_after_moving_later() -> None:
    loop, door, fired = timer()
    door.arm(10.0, True)
    loop.advance(5.0)
    door.arm(30.0, False)  # later than the pending timer: no new one
    loop.advance(34.9)
    assert fired == []
    loop.advance(40.0)
    assert fired == [(35.0, False)]


def test_an_earlier_deadline_than_the_pending_timer_is_not_late() -> None:
    loop, door, fired = timer()
    door.arm(1.0, True)
    loop.advance(0.5)
    door.arm(30.0, False)  # the body of a slow upload
    loop.advance(2.0)  # the header timer fired early and re-armed for 30.5
    door.disarm()
    door.arm(1.0, True)  # the next request's headers: due at 3.0, before 30.5
    loop.advance(10.0)
    assert fired == [(3.0, True)]


def test_close_cancels_the_timer() -> None:
    loop, door, fired = timer()
    door.arm(1.0, True)
    door.close()
    door.close()
    loop.advance(5.0)
    assert fired == []
    assert loop.pending() == 0
