"""The test suite's own redis-server helpers: a port taken between choosing it and binding it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.cluster import ClusterNode
from tests.conftest import RedisExitedError, RedisServer


@pytest.mark.redis
def test_a_port_taken_before_the_first_start_moves_the_server_to_another() -> None:
    with socket.socket() as taken:  # bound, not listening: redis-server cannot bind it, nothing answers
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        server = RedisServer()
        server._use_port(port)  # as if another process took the port it chose
        server.start()
        try:
            assert server.port != port and str(server.port) in server.url
        finally:
            server.remove()


@pytest.mark.redis
def test_a_port_given_by_the_caller_is_kept() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        server = RedisServer(port=port)
        try:
            with pytest.raises(RedisExitedError):
                server.start()
        finally:
            server.remove()


@pytest.mark.cluster
def test_a_cluster_node_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    with socket.socket() as taken:  # bound, not listening
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        node = ClusterNode(tmp_path, port)
        node.start()
        try:
            assert node.port != port and node.process is not None and node.process.poll() is None
        finally:
            node.stop()
