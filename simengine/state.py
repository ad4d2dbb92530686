"""State of one simulated inference replica, shared by the HTTP handlers."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time

from simengine.admission import BatchSlots
from simengine.faults import FaultConfig
from simengine.metrics import EngineCounters
from simengine.parsing import GenerationRequest, InvalidRequest
from simengine.payloads import TextTape
from simengine.perf_model import EngineProfile
from simengine.prefix_cache import DEFAULT_BLOCK_TOKENS, PrefixCache

_OUTPUT_MEDIAN_TOKENS = 200.0
_OUTPUT_SIGMA = 0.9
_OUTPUT_MAX_TOKENS = 2048
_FAULT_TYPES = {429: "rate_limit_error"}


class SimEngine:
    """Mutable state of one simulated replica: batch slots, RNG, faults and counters.

    Args:
        profile: latency model of the replica.
        served_model: the model name requests must ask for (e.g. ``meta-llama/Llama-3.1-8B``).
        seed: seeds the RNG; same seed and same request sequence give the same outputs.
        time_scale: multiplies every simulated sleep; 0 disables sleeping altogether.
        block_tokens: tokens per KV block (vLLM ``--block-size``); the prefix cache holds
            ``profile.kv_cache_tokens // block_tokens`` blocks.
    """

    def __init__(
        self,
        profile: EngineProfile,
        served_model: str,
        *,
        seed: int = 0,
        time_scale: float = 1.0,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
    ) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.profile = profile
        self.served_model = served_model
        self.seed = seed
        self.time_scale = time_scale
        self.rng = random.Random(seed)
        self.slots = BatchSlots(profile.batch_slots)
        self.faults = FaultConfig()
        self.counters = EngineCounters()
        self.prefix_cache = PrefixCache(profile.kv_cache_tokens // block_tokens, block_tokens)
        # KV tokens reserved by admitted requests (prompt + planned output, at admission).
        self.kv_tokens_in_use = 0
        self.created = int(time.time())
        self._tape = TextTape(self.rng)
        self._ids = itertools.count(1)
        self._unhang = asyncio.Event()

    @property
    def running(self) -> int:
        """Requests holding a batch slot."""
        return self.slots.running

    @property
    def waiting(self) -> int:
        """Requests queued for a batch slot."""
        return self.slots.waiting

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV capacity held by admitted requests, 0-1 (vLLM's
        ``kv_cache_usage_perc``: cached blocks nobody uses count as free). Without a KV
        capacity in the profile: busy batch slots / batch slots."""
        capacity = self.profile.kv_cache_tokens
        if capacity <= 0:
            return self.slots.running / self.profile.batch_slots
        return min(self.kv_tokens_in_use / capacity, 1.0)

    def admit_prefill(self, req: GenerationRequest, hashes: list[int], output_tokens: int) -> float:
        """Schedule ``req`` once it holds a batch slot: look its prompt up in the prefix
        cache, reserve its KV, and return its prefill time, ms (uncached tokens only).

        The caller must :meth:`release_kv` the same ``req``/``output_tokens`` exactly once.
        """
        cached = self.prefix_cache.admit(hashes, req.prompt_tokens)
        self.kv_tokens_in_use += req.prompt_tokens + output_tokens
        return self.profile.prefill_ms(req.prompt_tokens - cached)

    def release_kv(self, req: GenerationRequest, output_tokens: int) -> None:
        """Return the KV reserved by :meth:`admit_prefill`."""
        self.kv_tokens_in_use -= req.prompt_tokens + output_tokens

    def set_faults(self, faults: FaultConfig) -> None:
        """Replace the fault config; turning ``hang`` off releases hung requests."""
        self.faults = faults
        if faults.hang:
            self._unhang.clear()
        else:
            self._unhang.set()

    def release_hung(self) -> None:
        """Let every hung request proceed (used on shutdown)."""
        self._unhang.set()

    async def inject_faults(self) -> None:
        """Apply the fault config before admission: hang, then maybe fail.

        Raises:
            InvalidRequest: with ``fail_status`` when the seeded draw says this request fails.
        """
        faults = self.faults
        if faults.hang:
            await self._unhang.wait()
        # Draw only when failures are on, so enabling faults does not perturb other outputs.
        if faults.fail_rate > 0.0 and self.rng.random() < faults.fail_rate:
            self.counters.failed += 1
            status = faults.fail_status
            kind = (
                "server_error"
                if status >= 500
                else _FAULT_TYPES.get(status, "invalid_request_error")
            )
            raise InvalidRequest(status, "simulated engine failure", code="sim_fault", type_=kind)

    def plan_output(self, req: GenerationRequest) -> tuple[int, str]:
        """Completion length, tokens, and finish reason for ``req``.

        Raises:
            InvalidRequest: 400 when prompt plus requested completion exceed ``max_context``.
        """
        room = self.profile.max_context - req.prompt_tokens
        if req.max_tokens is not None:
            if req.max_tokens > room:
                raise InvalidRequest(
                    400,
                    f"This model's maximum context length is {self.profile.max_context} tokens. "
                    f"However, you requested {req.prompt_tokens + req.max_tokens} tokens.",
                    param="max_tokens",
                    code="context_length_exceeded",
                )
            return req.max_tokens, "length"
        if room < 1:
            raise InvalidRequest(
                400,
                "prompt exceeds the maximum context length",
                param="messages",
                code="context_length_exceeded",
            )
        draw = self.rng.lognormvariate(math.log(_OUTPUT_MEDIAN_TOKENS), _OUTPUT_SIGMA)
        tokens = min(max(1, round(draw)), _OUTPUT_MAX_TOKENS)
        return (tokens, "stop") if tokens <= room else (room, "length")

    def next_id(self, prefix: str) -> str:
        """A unique response id such as ``chatcmpl-sim-7``."""
        return f"{prefix}-sim-{next(self._ids)}"

    def tape_start(self, seed: int | None = None) -> int:
        """Where on the filler tape the next completion starts: drawn, or for a request
        with a ``seed`` a place fixed by it (without a draw, so other outputs stay put)."""
        if seed is not None:
            return seed % TextTape.SIZE
        return self.rng.randrange(TextTape.SIZE)

    @property
    def tape(self) -> TextTape:
        """The engine's filler text."""
        return self._tape

    def seconds(self, ms: float) -> float:
        """Wall-clock seconds to sleep for ``ms`` simulated milliseconds."""
        return ms * self.time_scale / 1000.0

    def tpot_ms(self) -> float:
        """Current time per output token, ms, including the fault slowdown."""
        return self.profile.tpot_ms(self.slots.running) * self.faults.slowdown
