"""The answer objects the forwarder returns: the same bytes on the wire as Starlette's
``Response`` for the same body and headers."""

from __future__ import annotations

import pytest
from starlette.responses import Response

from base.errors import UpstreamInvalidAnswer
from gateway.openai_request import Operation
from gateway.upstream_answers import JsonAnswer, ModelRenamer, checked_usage

HEADERS = {"x-request-id": "req-1", "x-skyroute-pool": "aws:us-east-1:h100"}
RAW = [(k.encode(), v.encode()) for k, v in HEADERS.items()]


@pytest.mark.parametrize("status", [200, 400, 422])
def test_a_json_answer_has_the_headers_starlette_would_give_it(status: int) -> None:
    body = b'{"choices": [{}]}'
    ours = JsonAnswer(body, RAW, status)
    theirs = Response(body, status_code=status, headers=HEADERS, media_type="application/json")
    assert (ours.status_code, ours.body, sorted(ours.raw_headers)) == (
        theirs.status_code,
        theirs.body,
        sorted(theirs.raw_headers),
    )


def test_a_json_answers_headers_can_still_be_set_by_name() -> None:
    answer = JsonAnswer(b"{}", RAW)
    answer.headers["x-request-id"] = "req-2"
    assert answer.headers.getlist("x-request-id") == ["req-2"]


def test_checked_usage_reads_the_counts_and_refuses_a_body_that_is_no_answer() -> None:
    body = b'{"model": "m", "choices": [{}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}'
    assert checked_usage(body, Operation.CHAT, "p") == (3, 4, "m")
    with pytest.raises(UpstreamInvalidAnswer):
        checked_usage(b'{"data": []}', Operation.CHAT, "p")


def test_the_renamer_rewrites_the_model_in_both_spellings() -> None:
    rename = ModelRenamer("up", "client")
    assert rename(b'{"model":"up"} {"model": "up"}') == b'{"model":"client"} {"model": "client"}'
