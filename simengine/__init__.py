"""Simulated inference engine: a vLLM stand-in with a latency model of GPU/model pairs.

- :mod:`simengine.perf_model`: pure latency model (``EngineProfile``, ``PROFILES``),
  shared with the discrete-event simulator; importing it pulls in no web stack.
- :mod:`simengine.server`: the OpenAI-compatible aiohttp server (``SimEngine``,
  ``build_app``, ``start_server``, ``serve``, ``run_engine``).
- ``python -m simengine``: command-line entry point.
"""

from __future__ import annotations

from simengine.perf_model import PROFILES, EngineProfile, get_profile

__all__ = ["PROFILES", "EngineProfile", "get_profile"]
