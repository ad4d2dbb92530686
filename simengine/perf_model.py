"""Latency model of one inference-engine replica (a GPU/model pair served by vLLM).

Pure arithmetic, no I/O: the simulated engine server sleeps for these durations, and the
discrete-event simulator advances its clock by them, so both agree by construction.

The model is deliberately simple:

- prefill (time to first token) is linear in the prompt: ``prompt_tokens / prefill_tokens_per_s``;
- decode time per output token (TPOT) grows linearly with batch occupancy, from
  ``tpot_base_ms`` with one running sequence to ``tpot_full_ms`` with every batch slot busy;
- as in vLLM, the prefill step emits the first output token, so a request's service time
  is its prefill plus ``output_tokens - 1`` decode steps;
- with a prefix cache, prefill runs only on the prompt tokens not already cached: callers
  pass ``prefill_ms`` the uncached count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class EngineProfile:
    """Performance envelope of one replica.

    Attributes:
        name: profile name, ``<gpu>-<model>``.
        batch_slots: sequences one replica decodes concurrently (vLLM ``max_num_seqs``).
        prefill_tokens_per_s: prompt tokens processed per second (sets TTFT).
        tpot_base_ms: time per output token, ms, with one sequence in the batch.
        tpot_full_ms: time per output token, ms, with all ``batch_slots`` busy.
        embed_tokens_per_s: input tokens embedded per second.
        max_context: longest prompt plus completion, tokens.
        kv_cache_tokens: KV-cache capacity of one replica, tokens (what is left of GPU
            memory after the weights, at vLLM's default 0.9 utilisation); it sizes the
            prefix cache. 0 means no prefix caching (embedders, hand-made test profiles).

    Raises:
        ValueError: on non-positive rates or slots, or ``tpot_full_ms < tpot_base_ms``.
    """

    name: str
    batch_slots: int
    prefill_tokens_per_s: float
    tpot_base_ms: float
    tpot_full_ms: float
    embed_tokens_per_s: float
    max_context: int
    kv_cache_tokens: int = 0

    def __post_init__(self) -> None:
        if self.batch_slots < 1 or self.max_context < 1:
            raise ValueError(f"{self.name}: batch_slots and max_context must be >= 1")
        if self.kv_cache_tokens < 0:
            raise ValueError(f"{self.name}: kv_cache_tokens must be >= 0")
        if min(self.prefill_tokens_per_s, self.embed_tokens_per_s, self.tpot_base_ms) <= 0:
            raise ValueError(f"{self.name}: rates and tpot_base_ms must be > 0")
        if self.tpot_full_ms < self.tpot_base_ms:
            raise ValueError(f"{self.name}: tpot_full_ms must be >= tpot_base_ms")

    @property
    def _tpot_slope_ms(self) -> float:
        """Extra TPOT, ms, per additional running sequence."""
        if self.batch_slots == 1:
            return 0.0
        return (self.tpot_full_ms - self.tpot_base_ms) / (self.batch_slots - 1)

    def prefill_ms(self, prompt_tokens: int) -> float:
        """Time to first token, ms, for a prompt of ``prompt_tokens`` (excluding queueing)."""
        return max(prompt_tokens, 0) * 1000.0 / self.prefill_tokens_per_s

    def embed_ms(self, input_tokens: int) -> float:
        """Time to embed ``input_tokens`` input tokens, ms (excluding queueing)."""
        return max(input_tokens, 0) * 1000.0 / self.embed_tokens_per_s

    def tpot_ms(self, running: int) -> float:
        """Time per output token, ms, with ``running`` sequences in the batch (incl. this one).

        ``running`` is clipped to ``[1, batch_slots]``.
        """
        occupied = min(max(running, 1), self.batch_slots)
        return self.tpot_base_ms + self._tpot_slope_ms * (occupied - 1)

    def tpot_ms_many(self, running: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Vectorised :meth:`tpot_ms`: element-wise TPOT, ms, for an array of occupancies."""
        occupied = np.clip(np.asarray(running, dtype=np.float64), 1, self.batch_slots)
        return self.tpot_base_ms + self._tpot_slope_ms * (occupied - 1.0)

    def service_ms(self, prompt_tokens: int, output_tokens: int, running: int) -> float:
        """Admission-to-last-token time, ms, at occupancy ``running`` throughout decoding.

        ``prefill_ms(prompt_tokens) + (output_tokens - 1) * tpot_ms(running)``: the first
        token comes out of prefill.
        """
        decode_steps = max(output_tokens - 1, 0)
        return self.prefill_ms(prompt_tokens) + decode_steps * self.tpot_ms(running)

    def max_running_within(self, tpot_slo_ms: float) -> int:
        """Largest occupancy whose TPOT is <= ``tpot_slo_ms``; 0 if even one sequence misses it."""
        if tpot_slo_ms < self.tpot_base_ms:
            return 0
        slope = self._tpot_slope_ms
        if slope == 0.0:
            return self.batch_slots
        # The epsilon keeps an SLO that lands exactly on a step from losing it to rounding.
        fits = 1 + math.floor((tpot_slo_ms - self.tpot_base_ms) / slope + 1e-9)
        return min(fits, self.batch_slots)

    def goodput_tokens_per_s(self, tpot_slo_ms: float) -> float:
        """Output tokens/s one replica sustains while every sequence meets ``tpot_slo_ms``.

        The batch is filled to the largest occupancy ``r*`` with ``tpot_ms(r*) <= slo``; goodput
        is ``r* / tpot_ms(r*) * 1000``. It is 0 when the SLO is below ``tpot_base_ms``.
        """
        running = self.max_running_within(tpot_slo_ms)
        if running == 0:
            return 0.0
        return running * 1000.0 / self.tpot_ms(running)


def _profiles(*profiles: EngineProfile) -> Mapping[str, EngineProfile]:
    return MappingProxyType({p.name: p for p in profiles})


# Figures are rounded approximations, not measurements. They are anchored on public vLLM
# results (the vLLM v0.6 performance blog: Llama 3 8B on 1xH100 and 70B on 4xH100 at
# TPOT of roughly 10-50 ms under load; vLLM's published nightly serving benchmarks) and on
# roofline estimates: base TPOT ~ bf16 weight bytes per GPU / HBM bandwidth plus overhead,
# prefill ~ 2 * params FLOPs per token at 35-50% MFU. Batch slots follow vLLM's default
# max_num_seqs=256 where KV memory allows, fewer on 24-32 GB cards. Llama runs in bf16
# (fp16 on V100, which lacks bf16). KV capacity: free memory / KV bytes per token, which is
# layers x KV heads x head dim x 2 (K and V) x 2 bytes: 128 KiB for Llama 3.1 8B (32 x 8 x
# 128), 320 KiB for 70B (80 x 8 x 128).
PROFILES: Mapping[str, EngineProfile] = _profiles(
    # 8x H100-80G SXM, TP8: 140 GB of weights at 3.35 TB/s per GPU; ~430 GB of KV cache.
    EngineProfile("h100-llama-3.1-70b", 256, 20_000.0, 14.0, 45.0, 20_000.0, 131_072, 1_300_000),
    # 8x A100-80G SXM, TP8: 2.0 TB/s per GPU, ~1/3 of H100 dense bf16 FLOPs.
    EngineProfile("a100-llama-3.1-70b", 256, 8_000.0, 25.0, 75.0, 8_000.0, 131_072, 1_300_000),
    # 1x H100-80G: 16 GB of weights, ~55 GB left for KV cache.
    EngineProfile("h100-llama-3.1-8b", 256, 25_000.0, 7.0, 28.0, 25_000.0, 131_072, 440_000),
    # 1x A100-80G.
    EngineProfile("a100-llama-3.1-8b", 256, 10_000.0, 11.0, 45.0, 10_000.0, 131_072, 440_000),
    # 1x L4-24G: 300 GB/s; ~5 GB of KV cache bounds batch and context.
    EngineProfile("l4-llama-3.1-8b", 32, 3_000.0, 58.0, 95.0, 3_000.0, 16_384, 40_000),
    # 1x A10G-24G (AWS g5): 600 GB/s, ~70 dense fp16 TFLOPs.
    EngineProfile("a10g-llama-3.1-8b", 32, 2_200.0, 30.0, 60.0, 2_200.0, 16_384, 40_000),
    # 1x V100-32G, fp16: 900 GB/s, no FlashAttention; ~12 GB of KV cache.
    EngineProfile("v100-llama-3.1-8b", 64, 2_000.0, 22.0, 60.0, 2_000.0, 32_768, 95_000),
    # BAAI/bge-large-en-v1.5 (335M params, 512-token window); TPOT is unused by embedders.
    EngineProfile("a10g-bge-large", 64, 30_000.0, 5.0, 10.0, 30_000.0, 512),
    EngineProfile("l4-bge-large", 64, 15_000.0, 8.0, 16.0, 15_000.0, 512),
)


def profile_name(gpu_type: str, model: str) -> str:
    """The profile of a GPU type and model: GPU family + model, e.g. ``a100-llama-3.1-70b``.

    Raises KeyError if there is no such profile.
    """
    name = f"{gpu_type.split('-', maxsplit=1)[0].lower()}-{model}"
    if name not in PROFILES:
        raise KeyError(f"no simulated-engine profile {name!r}")
    return name


def get_profile(name: str) -> EngineProfile:
    """Return the profile called ``name``.

    Raises:
        KeyError: if ``name`` is unknown; the message lists the valid names.
    """
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown engine profile {name!r}; valid profiles: {valid}") from None
