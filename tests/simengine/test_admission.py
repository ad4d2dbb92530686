"""FIFO batch-slot admission."""

from __future__ import annotations

import asyncio

from simengine.admission import BatchSlots


def test_waiters_are_admitted_in_arrival_order() -> None:
    async def scenario() -> list[int]:
        slots = BatchSlots(1)
        order: list[int] = []
        await slots.acquire()

        async def worker(i: int) -> None:
            await slots.acquire()
            order.append(i)
            slots.release()

        tasks = [asyncio.create_task(worker(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert slots.waiting == 5
        slots.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_cancelled_waiter_does_not_leak_a_slot() -> None:
    async def scenario() -> tuple[int, int]:
        slots = BatchSlots(1)
        await slots.acquire()
        waiter = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        slots.release()
        return slots.running, slots.waiting

    assert asyncio.run(scenario()) == (0, 0)


def test_waiter_cancelled_after_handover_passes_slot_on() -> None:
    async def scenario() -> tuple[int, int]:
        slots = BatchSlots(1)
        await slots.acquire()
        first = asyncio.create_task(slots.acquire())
        second = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)
        slots.release()  # hands the slot to `first`...
        first.cancel()  # ...which is cancelled before it resumes
        await asyncio.gather(first, return_exceptions=True)
        await second
        return slots.running, slots.waiting

    assert asyncio.run(scenario()) == (1, 0)
