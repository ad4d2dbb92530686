"""The test harness's simulated engine: a port another process holds is not taken for
the engine's own (its health check would be answered by that process)."""

from __future__ import annotations

import socket

from tests.gateway.harness import Engine


def test_an_engine_whose_port_is_taken_starts_on_another_and_listens_there() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        engine = Engine("a10g-llama-3.1-8b", "upstream-chat", time_scale=0.0, port=taken)
        try:
            engine.start()
            assert engine.port != taken
            assert engine._listening()
        finally:
            engine.kill()
