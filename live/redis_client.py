"""Connecting to Redis: one server, a Sentinel-managed master, or a Redis Cluster, chosen
by the URL; and the few places where the cluster client must be driven differently.

URLs (``SKYROUTE_REDIS_URL``):

    redis://[user:pass@]host:port/db          one server (also rediss://, unix://)
    redis+cluster://[user:pass@]host:port     a Redis Cluster, reached through any of its
    rediss+cluster://host:port,host2:port2    nodes (more seeds: comma-separated)
    redis+sentinel://host:port[,host:port]/service_name[/db]
                                              the master Sentinel names ``service_name``

Every key schema in ``live/`` puts the keys that one script or transaction touches
together under one hash tag, so the same scripts run unchanged on every kind.

``run_pipeline`` is how every table runs a pipeline: the connection always goes back to
the pool, and a Redis failure leaves as ``TableError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import Pipeline, PubSub
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.asyncio.sentinel import Sentinel
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from base.errors import TableError

RedisClient: TypeAlias = Redis | RedisCluster
AnyPipeline: TypeAlias = Pipeline | ClusterPipeline

_CLUSTER = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_SENTINEL = {"redis+sentinel", "rediss+sentinel"}


def _hosts(netloc: str) -> tuple[str, str | None, str | None]:
    """(host list, username, password) of a URL's network location."""
    auth, _, hosts = netloc.rpartition("@")
    user, _, password = auth.partition(":")
    return hosts, unquote(user) or None, unquote(password) or None


def _pairs(hosts: str, default_port: int) -> list[tuple[str, int]]:
    out = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:  # no port given
            host, port = port, ""
        out.append((host.strip("[]"), int(port) if port else default_port))
    return out


def connect(url: str, **options: Any) -> RedisClient:
    """A client for ``url`` (see the module docstring). ``options`` are connection
    options (``socket_timeout`` …) for every connection the client opens.

    Raises ValueError for a URL it cannot use. Connects lazily: a server that does not
    answer fails the first command, not this call.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _CLUSTER:
        hosts, user, password = _hosts(parts.netloc)
        nodes = [ClusterNode(h, p) for h, p in _pairs(hosts, 6379)]
        if not nodes:
            raise ValueError(f"no cluster node in {url!r}")
        return RedisCluster(
            startup_nodes=nodes,
            username=user,
            password=password,
            ssl=_CLUSTER[scheme] == "rediss",
            **options,
        )
    if scheme in _SENTINEL:
        hosts, user, password = _hosts(parts.netloc)
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ValueError(f"{url!r} names no Sentinel service (…/service_name)")
        db = int(path[1]) if len(path) > 1 else 0
        sentinel = Sentinel(  # type: ignore[no-untyped-call]  # untyped in redis-py
            _pairs(hosts, 26379),
            sentinel_kwargs={k: v for k, v in options.items() if k.startswith("socket_")},
            username=user,
            password=password,
            db=db,
            ssl=scheme == "rediss+sentinel",
            **options,
        )
        master: _SentinelMaster = sentinel.master_for(path[0], redis_class=_SentinelMaster)
        master.sentinels = list(sentinel.sentinels)
        return master
    if scheme in ("redis", "rediss", "unix"):
        client: Redis = Redis.from_url(url, **options)
        return client
    raise ValueError(f"unsupported Redis URL scheme {parts.scheme!r} in SKYROUTE_REDIS_URL")


class _SentinelMaster(Redis):
    """The master a Sentinel names; closing it closes the Sentinel connections too."""

    sentinels: list[Redis]

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        for client in getattr(self, "sentinels", []):
            await client.aclose()


def is_cluster(client: RedisClient | AnyPipeline) -> bool:
    """Whether ``client`` talks to a Redis Cluster."""
    return isinstance(client, RedisCluster | ClusterPipeline)


async def queue_script(
    pipe: AnyPipeline, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]
) -> None:
    """Queue one run of ``script`` on ``pipe``.

    On one server this is EVALSHA (the pipeline loads missing scripts before it runs).
    A cluster pipeline cannot do that on every node it will reach, and a node that
    restarted or failed over has an empty script cache, so there it is EVAL of the
    script's text: the same single round trip, never a NOSCRIPT failure.
    """
    if isinstance(pipe, ClusterPipeline):
        pipe.eval(script.script, len(keys), *keys, *args)  # type: ignore[arg-type]
    else:
        await script(keys=keys, args=args, client=pipe)


async def pubsub(client: RedisClient) -> PubSub:
    """A pub/sub connection of ``client`` (use it as an async context manager).

    On a cluster, SUBSCRIBE goes to the node of the channel's slot (any node hears a
    PUBLISH: the cluster broadcasts it), and that slot must be known first.
    """
    if isinstance(client, RedisCluster):
        await client.initialize()
        return client.pubsub(ignore_subscribe_messages=True)
    return client.pubsub(ignore_subscribe_messages=True)


async def commands_run(client: RedisClient) -> int:
    """Commands every primary of ``client``'s Redis has run so far, by INFO commandstats
    (commands run inside Lua scripts included, INFO itself not): for benchmarks, whose
    deltas of it are Redis work. Raises RedisError."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        nodes = [Redis(host=n.host, port=int(n.port)) for n in client.get_primaries()]
    else:
        nodes = [client]
    total = 0
    for node in nodes:
        stats = await node.info("commandstats")
        total += sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
        if node is not client:
            await node.aclose()
    return total


async def run_pipeline(pipe: AnyPipeline, what: str) -> list[Any]:
    """Execute ``pipe`` and reset it whatever happens, so that a failed pipeline gives
    its connection back to the pool; a Redis failure is raised as TableError("{what}:
    ...")."""
    try:
        result: list[Any] = await pipe.execute()
        return result
    except RedisError as exc:
        raise TableError(f"{what}: {exc}") from exc
    finally:
        await pipe.reset()  # type: ignore[no-untyped-call]
