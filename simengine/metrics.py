"""Prometheus exposition of the simulated engine, using current vLLM's metric names."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class EngineCounters:
    """Monotonic request and token counters since the engine started.

    Attributes:
        received: inference requests received (chat, completions, embeddings), any outcome.
        failed: requests rejected by fault injection.
        success: completed requests by finish reason (``stop``, ``length``; ``embed`` for
            embeddings).
        prompt_tokens: prompt tokens of completed requests.
        generation_tokens: output tokens of completed requests.
    """

    received: int = 0
    failed: int = 0
    success: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    generation_tokens: int = 0

    def record_success(self, finish_reason: str, prompt_tokens: int, output_tokens: int) -> None:
        """Count one completed request."""
        self.success[finish_reason] = self.success.get(finish_reason, 0) + 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += output_tokens


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(
    counters: EngineCounters,
    *,
    model_name: str,
    running: int,
    waiting: int,
    kv_cache_usage: float,
    prefix_queries_tokens: int = 0,
    prefix_hits_tokens: int = 0,
) -> str:
    """Prometheus text format (version 0.0.4) of the engine's gauges and counters.

    The names are current vLLM's (V1 engine, ``vllm/v1/metrics/loggers.py``), so routers
    scrape the simulator exactly like a real replica: gauges ``vllm:num_requests_running``,
    ``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` (0-1), and the prefix
    cache counters ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``
    (prompt tokens looked up / found cached). ``vllm:gpu_cache_usage_perc``, the KV gauge's
    name before vLLM 0.9, is served too with the same value, as vLLM did while it was
    deprecated, for scrapers that still read it.
    """
    model = f'model_name="{_label(model_name)}"'
    usage = f"{kv_cache_usage:.6f}"
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{model}}} {running}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{model}}} {waiting}",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{model}}} {usage}",
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage."
        "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        f"vllm:gpu_cache_usage_perc{{{model}}} {usage}",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of "
        "queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{model}}} {prefix_queries_tokens}",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached "
        "tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{model}}} {prefix_hits_tokens}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
    ]
    for reason, count in sorted(counters.success.items()):
        lines.append(
            f'vllm:request_success_total{{finished_reason="{_label(reason)}",{model}}} {count}'
        )
    lines += [
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{model}}} {counters.prompt_tokens}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{model}}} {counters.generation_tokens}",
        "# HELP sim:requests_received_total Inference requests received by the simulator.",
        "# TYPE sim:requests_received_total counter",
        f"sim:requests_received_total{{{model}}} {counters.received}",
        "# HELP sim:requests_failed_total Requests failed by fault injection.",
        "# TYPE sim:requests_failed_total counter",
        f"sim:requests_failed_total{{{model}}} {counters.failed}",
    ]
    return "\n".join(lines) + "\n"
