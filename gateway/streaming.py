"""Server-sent-event helpers for the streaming proxy: watch chunks pass without
re-framing them, and end a broken stream in a way the ``openai`` client reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

# A JSON key '"error":' can only appear unescaped as a key, never inside generated text
# (where quotes are escaped), so a byte search finds error events without parsing.
_ERROR_KEYS = (b'"error":', b'"error" :')
_TAIL = 16


@dataclass
class StreamWatch:
    """Counts events and finds usage and error events in an SSE byte stream.

    Times are ``time.perf_counter()`` seconds passed in by the caller.
    """

    first_at: float = 0.0
    last_at: float = 0.0
    events: int = 0
    error: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    _tail: bytes = field(default=b"", repr=False)

    def feed(self, chunk: bytes, now: float) -> None:
        """Look at one chunk as it passes."""
        if not self.first_at:
            self.first_at = now
        self.last_at = now
        self.events += chunk.count(b"data:")
        window = self._tail + chunk
        if b'"usage"' in window and b'"usage":null' not in window:
            self._parse_events(window)
        if self.error is None and any(k in window for k in _ERROR_KEYS):
            self._parse_events(window)
        self._tail = chunk[-_TAIL:]

    def _parse_events(self, window: bytes) -> None:
        for line in window.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if not data.startswith(b"{"):
                continue
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue  # split across chunks; counted from the complete copy later
            if not isinstance(event, dict):
                continue
            if "error" in event and self.error is None:
                err = event["error"]
                self.error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.completion_tokens = _int(usage.get("completion_tokens"))
                self.prompt_tokens = _int(usage.get("prompt_tokens"))

    def output_tokens(self) -> int:
        """Completion tokens: from the usage event if there was one, else one per content
        event (vLLM sends a token per event), less the role, finish and [DONE] events."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return max(self.events - 3, 0)

    def tpot_ms(self) -> float | None:
        """Mean time between tokens after the first, ms (None with fewer than 2 tokens)."""
        tokens = self.output_tokens()
        if tokens < 2 or self.last_at <= self.first_at:
            return None
        return (self.last_at - self.first_at) * 1000.0 / (tokens - 1)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_event(message: str, code: str = "upstream_error") -> bytes:
    """An SSE error event (OpenAI's shape) that makes the ``openai`` client raise."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"
