"""A finished request is recorded once: its usage record (the bill, journaled) before its
answer is written, the rest of its accounting after, before the process handles anything
else."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from gateway.decisions import DecisionLog
from gateway.fast_paths import endpoint
from gateway.finish import RequestContext, RequestFinisher
from gateway.metrics import GatewayMetrics
from gateway.usage import UsageLog
from live.access_table import UsageRecord
from live.demand_table import DemandRecord
from router.scoring import RouteRequest

ROUTE = RouteRequest("m", 400, None, "standard", "aws:us-east-1")


def finisher() -> RequestFinisher:
    usage: UsageLog[UsageRecord] = UsageLog()
    demand: UsageLog[DemandRecord] = UsageLog()
    return RequestFinisher(usage, demand, DecisionLog(), GatewayMetrics())


def context(request_id: str) -> RequestContext:
    return RequestContext("acme", request_id, 500, 0.0)


def finish_soon(f: RequestFinisher, request_id: str) -> None:
    f.finish_soon(context(request_id), ROUTE, None, 400, 100, 0.001, "ok")


def test_the_usage_record_is_made_at_once_the_rest_on_the_loops_next_turn_each_once() -> None:
    f = finisher()

    async def next_turn() -> None:
        # The loop runs callbacks in the order they were scheduled: this one comes after
        # anything scheduled before it.
        turned = asyncio.Event()
        asyncio.get_running_loop().call_soon(turned.set)
        await turned.wait()

    async def main() -> list[tuple[int, int]]:
        finish_soon(f, "r1")
        seen = [(len(f.usage), len(f.demand))]
        await next_turn()
        seen.append((len(f.usage), len(f.demand)))
        await next_turn()
        seen.append((len(f.usage), len(f.demand)))
        return seen

    assert asyncio.run(main()) == [(1, 0), (1, 1), (1, 1)]
    [record] = f.usage.take()
    assert (record.request_id, record.tenant, record.prompt_tokens) == ("r1", "acme", 400)
    assert (record.completion_tokens, record.status) == (100, "ok")
    assert len(f.demand) == 1


def test_without_a_running_loop_the_record_is_made_at_once() -> None:
    f = finisher()
    finish_soon(f, "r1")
    assert [r.request_id for r in f.usage.take()] == ["r1"]


def test_the_bill_is_made_before_the_answer_the_rest_after_it_and_before_the_next() -> None:
    """Through the fast-path endpoint as the gateway serves it: when the last byte of the
    answer is sent its usage record is made (a process killed from then on has it in its
    journal) and its demand record is not yet; a request handled next sees both made."""
    f = finisher()
    at_send: list[tuple[int, int]] = []
    at_next_request: list[tuple[int, int]] = []

    async def handler(request: Request) -> Response:
        if request.url.path == "/first":
            finish_soon(f, "r1")
        else:
            at_next_request.append((len(f.usage), len(f.demand)))
        return Response(b"{}", media_type="application/json")

    app = endpoint(handler)

    def scope(path: str) -> dict[str, object]:
        return {"type": "http", "method": "POST", "path": path, "headers": [],
                "query_string": b""}  # fmt: skip

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            at_send.append((len(f.usage), len(f.demand)))

    async def main() -> None:
        # As a task, like the server's per-request task: its end takes a turn of the loop.
        first = asyncio.ensure_future(app(scope("/first"), receive, send))
        await first
        await app(scope("/second"), receive, send)

    asyncio.run(main())
    assert at_send == [(1, 0), (1, 1)]
    assert at_next_request == [(1, 1)]
