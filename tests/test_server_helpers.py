"""The helpers that start real redis-servers for the tests: a node whose ports are taken
before it binds them moves, and a failed cluster start leaves no server running (one
that did once leaked five redis-servers into the next test's warnings)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.redis_server import (
    RedisClusterServers,
    RedisServer,
    free_cluster_port,
    require_redis,
)

CLUSTER = ["--cluster-enabled", "yes"]


def test_a_cluster_node_whose_bus_port_is_taken_moves(tmp_path: Path) -> None:
    require_redis()
    server = RedisServer(tmp_path, pick=free_cluster_port)
    first = server.port
    with socket.socket() as squatter:  # another listener takes the cluster bus port
        squatter.bind(("127.0.0.1", first + 10_000))
        squatter.listen()
        server.start(persist=False, extra=CLUSTER)
        try:
            assert server.port != first
            assert server.command(b"PING").startswith(b"+PONG")
        finally:
            server.stop()


def test_a_failed_cluster_start_stops_every_node_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_redis()
    cluster = RedisClusterServers(tmp_path)
    broken = cluster.nodes[3]

    def fail(*, persist: bool, extra: list[str] | None) -> None:
        raise RuntimeError("redis-server did not start")

    monkeypatch.setattr(broken, "_start", fail)
    with pytest.raises(RuntimeError, match="did not start"):
        cluster.start()
    assert [n.proc for n in cluster.nodes] == [None] * len(cluster.nodes)
