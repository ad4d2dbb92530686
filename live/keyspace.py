"""How ``live/`` spells a key that must share a Redis Cluster slot with others.

Redis Cluster hashes only the part of a key between the first ``{`` and the next ``}``
(the hash tag) when there is one. Keys that one Lua script or one transaction touches
together carry the same tag, so they live on one node and the script runs there.
Every key still starts with the prefix, so ``SCAN MATCH {prefix}:*`` finds them all.
"""

from __future__ import annotations


def tagged(prefix: str, group: str, *parts: str) -> str:
    """``{prefix}:{{group}}:{parts…}``: every key of ``group`` hashes to one slot."""
    return ":".join((prefix, "{" + group + "}", *parts))


def tag_of(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes (its hash tag, else the whole key)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key
