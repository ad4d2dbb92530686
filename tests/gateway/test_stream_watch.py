"""StreamWatch: counting SSE events and spotting usage and error events in passing.

Times are plain floats standing in for ``time.perf_counter()``; no clock is read.
"""

from __future__ import annotations

import random

import orjson
import pytest

from gateway.streaming import StreamWatch, error_event

_HEAD = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
ROLE = _HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
FINISH = _HEAD + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
# OpenAI's stream_options.include_usage: every chunk carries "usage":null, the last its usage.
FINISH_NULL_USAGE = (
    _HEAD + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}\n\n'
)
USAGE = (
    _HEAD + b'"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}\n\n'
)
DONE = b"data: [DONE]\n\n"
ERROR = b'data: {"error": {"message": "engine died", "type": "internal", "code": 500}}\n\n'


def _token(text: str) -> bytes:
    content = orjson.dumps(text)
    return _HEAD + b'"choices":[{"index":0,"delta":{"content":' + content + b"}}]}\n\n"


def _fed(*chunks: bytes) -> StreamWatch:
    watch = StreamWatch()
    for i, chunk in enumerate(chunks):
        watch.feed(chunk, 10.0 + i)
    return watch


# -- counting -------------------------------------------------------------------------


def test_counts_one_event_per_chunk() -> None:
    watch = _fed(ROLE, _token("a"), _token("b"), FINISH, DONE)
    assert watch.events == 5


def test_counts_every_event_in_a_chunk_holding_several() -> None:
    watch = _fed(ROLE + _token("a") + _token("b"), FINISH + DONE)
    assert watch.events == 5


def test_first_and_last_times_are_of_the_first_and_last_chunk() -> None:
    watch = StreamWatch()
    for now in (3.0, 3.5, 4.25):
        watch.feed(_token("x"), now)
    assert (watch.first_at, watch.last_at) == (3.0, 4.25)


# -- usage ----------------------------------------------------------------------------


def test_finds_usage_in_a_usage_chunk() -> None:
    watch = _fed(ROLE, _token("a"), FINISH, USAGE, DONE)
    assert (watch.prompt_tokens, watch.completion_tokens) == (5, 7)


def test_finds_usage_in_a_chunk_that_also_holds_other_events() -> None:
    watch = _fed(ROLE, _token("a") + FINISH + USAGE + DONE)
    assert watch.completion_tokens == 7


def test_null_usage_is_not_taken_for_usage() -> None:
    watch = _fed(ROLE, _token("a"), FINISH_NULL_USAGE, DONE)
    assert watch.completion_tokens is None


@pytest.mark.parametrize("cut", [len(USAGE) // 2, len(USAGE) - 5])
def test_finds_usage_split_across_two_chunks(cut: int) -> None:
    watch = _fed(ROLE, _token("a") + USAGE[:cut], USAGE[cut:] + DONE)
    assert watch.completion_tokens == 7


def test_finds_usage_in_the_chunk_after_one_with_null_usage() -> None:
    watch = _fed(ROLE, _token("a"), FINISH_NULL_USAGE, USAGE, DONE)
    assert watch.completion_tokens == 7


def test_finds_usage_in_a_chunk_that_also_holds_null_usage() -> None:
    watch = _fed(ROLE, _token("a"), FINISH_NULL_USAGE + USAGE + DONE)
    assert watch.completion_tokens == 7


# -- errors ---------------------------------------------------------------------------


def test_detects_an_error_event() -> None:
    watch = _fed(ROLE, _token("a"), ERROR)
    assert watch.error == "engine died"


def test_detects_an_error_event_after_tokens_in_the_same_chunk() -> None:
    watch = _fed(ROLE, _token("a") + _token("b") + ERROR)
    assert watch.error == "engine died"


def test_detects_an_error_whose_value_is_a_string() -> None:
    watch = _fed(ROLE, b'data: {"error": "overloaded"}\n\n')
    assert watch.error == "overloaded"


def test_detects_an_error_event_split_inside_its_key() -> None:
    cut = ERROR.index(b"rror")
    watch = _fed(ROLE, _token("a") + ERROR[:cut], ERROR[cut:])
    assert watch.error == "engine died"


@pytest.mark.parametrize("cut", [ERROR.index(b"died"), len(ERROR) - 5])
def test_detects_an_error_event_split_inside_its_body(cut: int) -> None:
    watch = _fed(ROLE, _token("a") + ERROR[:cut], ERROR[cut:])
    assert watch.error == "engine died"


@pytest.mark.parametrize(
    "text", ["error", "an error occurred", '{"error": "quoted"}', 'say "error": now']
)
def test_generated_text_containing_error_is_not_an_error(text: str) -> None:
    watch = _fed(ROLE, _token(text), FINISH, DONE)
    assert watch.error is None


def test_keeps_the_first_error() -> None:
    second = b'data: {"error": {"message": "second"}}\n\n'
    watch = _fed(ROLE, ERROR, second)
    assert watch.error == "engine died"


# -- tokens and TPOT ------------------------------------------------------------------


def test_output_tokens_come_from_usage_when_present() -> None:
    watch = _fed(ROLE, _token("a"), FINISH, USAGE, DONE)
    assert watch.output_tokens() == 7


def test_output_tokens_fall_back_to_events_less_role_finish_and_done() -> None:
    watch = _fed(ROLE, *(_token("t") for _ in range(4)), FINISH, DONE)
    assert watch.output_tokens() == 4


def test_output_tokens_fallback_is_never_negative() -> None:
    assert _fed(ROLE).output_tokens() == 0


def test_tpot_is_the_mean_gap_between_tokens_after_the_first() -> None:
    watch = StreamWatch()
    watch.feed(ROLE, 1.0)
    watch.feed(USAGE.replace(b'"completion_tokens":7', b'"completion_tokens":11'), 2.0)
    # 11 tokens over 1 s: 10 gaps of 100 ms.
    assert watch.tpot_ms() == pytest.approx(100.0)


def test_tpot_uses_the_event_count_without_usage() -> None:
    watch = StreamWatch()
    watch.feed(ROLE, 1.0)
    for _ in range(5):
        watch.feed(_token("t"), 1.5)
    watch.feed(FINISH + DONE, 1.8)
    # 5 tokens over 0.8 s: 4 gaps of 200 ms.
    assert watch.tpot_ms() == pytest.approx(200.0)


def test_tpot_is_none_for_a_single_token() -> None:
    watch = StreamWatch()
    watch.feed(ROLE + _token("a"), 1.0)
    watch.feed(FINISH + DONE, 2.0)
    assert watch.tpot_ms() is None


def test_tpot_is_none_when_everything_arrived_at_once() -> None:
    watch = StreamWatch()
    watch.feed(ROLE + _token("a") + _token("b") + _token("c") + FINISH + DONE, 1.0)
    assert watch.tpot_ms() is None


# -- error_event ----------------------------------------------------------------------


def test_error_event_is_one_sse_data_event() -> None:
    event = error_event("pool failed")
    assert (event.startswith(b"data: "), event.endswith(b"\n\n"), event.count(b"\n")) == (
        True,
        True,
        2,
    )


def test_error_event_parses_back_to_openais_error_shape() -> None:
    event = error_event("pool failed", code="upstream_timeout")
    assert orjson.loads(event[len(b"data: ") :]) == {
        "error": {
            "message": "pool failed",
            "type": "upstream_error",
            "param": None,
            "code": "upstream_timeout",
        }
    }


def test_error_event_defaults_its_code_to_upstream_error() -> None:
    body = orjson.loads(error_event("x")[len(b"data: ") :])
    assert body["error"]["code"] == "upstream_error"


def test_error_event_is_seen_by_a_stream_watch() -> None:
    assert _fed(ROLE, error_event('bad "quote" and error: here')).error == (
        'bad "quote" and error: here'
    )


def _by_lines(stream: bytes) -> tuple[int, bool, int | None, str | None]:
    """The reference: the whole stream split into lines, each looked at."""
    watch = StreamWatch()
    events, done = 0, False
    for line in stream.split(b"\n")[:-1]:
        if line.startswith(b"data:"):
            events += 1
            done = done or line.startswith(b"data: [DONE]")
            watch._parse(line[5:].strip())
    return events, done, watch.completion_tokens, watch.error


@pytest.mark.parametrize("seed", range(8))
def test_any_chunking_finds_what_the_whole_stream_holds(seed: int) -> None:
    """Cut anywhere (inside ``data:``, inside a key, between ``\\n`` and ``\\n``), the
    counts and findings are those of the stream read line by line."""
    rng = random.Random(seed)
    parts = [ROLE] + [_token(rng.choice(["a", "data: x", "\\n", "é"])) for _ in range(6)]
    parts += [rng.choice([FINISH, ERROR]), USAGE, b": keep-alive\n\n", DONE]
    stream = b"".join(parts)
    cuts = sorted(rng.sample(range(1, len(stream)), 12))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    watch = _fed(*chunks)
    assert (watch.events, watch.done, watch.completion_tokens, watch.error) == _by_lines(stream)


def test_keys_spelled_with_a_space_before_their_value_are_found() -> None:
    # Python's json.dumps (some engines' servers) writes ", " and ": " between items.
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}\n\n'
    error = b'data: {"error" : {"message": "engine fell over"}}\n\n'
    watch = _fed(_token("a") + usage + error)
    assert (watch.prompt_tokens, watch.completion_tokens) == (3, 5)
    assert watch.error == "engine fell over"
