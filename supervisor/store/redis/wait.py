"""`[pool] wait_replicas`: a script, then WAIT on the same connection.

WAIT counts the replicas that acknowledged the writes of the connection it is sent on,
so both go in one pipeline: one connection, one round trip.  On a Cluster, the pipeline
sends the script to the node of its keys' slot and WAIT to that node (`target_nodes`),
and a pipeline groups each node's commands on one connection.  The script is sent by
EVALSHA; after NOSCRIPT (a new master's empty script cache; the script did not run) it
is loaded and sent again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from supervisor.store.redis.connection import RedisClient

# How long a dispatch or a claim waits for its replicas (ms).  A claimed job's fence
# counts from the claim's sending, so this wait comes out of its first lease.
WAIT_TIMEOUT_MS = 1000


async def run_and_wait(client: RedisClient, sha: str, source: str, keys: Sequence[str | bytes],
                       args: Sequence[Any], replicas: int) -> tuple[Any, int]:
    """The script's raw answer, and how many replicas acknowledged its writes."""
    for _ in range(2):
        async with client.pipeline(transaction=False) as pipe:
            # Not `pipe.evalsha`: a cluster pipeline refuses that method, not the command
            # (it sends EVALSHA to the node of its keys' slot).
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
            if isinstance(client, RedisCluster):
                first = keys[0]
                node = client.get_node_from_key(
                    first if isinstance(first, str) else first.decode())
                pipe.execute_command("WAIT", replicas, WAIT_TIMEOUT_MS, target_nodes=node)
            else:
                pipe.wait(replicas, WAIT_TIMEOUT_MS)
            answer, acks = await pipe.execute(raise_on_error=False)
        if isinstance(answer, NoScriptError):
            await client.script_load(source)
            continue
        for result in (answer, acks):
            if isinstance(result, Exception):
                raise result
        return answer, int(acks)
    raise NoScriptError(f"script {sha} could not be loaded")
