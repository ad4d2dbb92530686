"""Data plane: the OpenAI-compatible upstream client the gateway forwards through."""

from adapters.upstream.client import UpstreamClient, UpstreamResponse, UpstreamTimeouts

__all__ = ["UpstreamClient", "UpstreamResponse", "UpstreamTimeouts"]
