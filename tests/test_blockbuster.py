"""The loop's own file-system and sendfile calls under blockbuster (issue 23).

blockbuster (PyPI ``blockbuster``, used across the ASGI ecosystem to find
blocking calls in a running loop) wraps ``os.sendfile``, ``os.stat``,
``os.remove``, ``os.unlink``... and raises BlockingError when one is called
while a loop runs, unless a frame on the stack is one it allows: it names
asyncio's own (``asyncio/base_events.py:sendfile``,
``asyncio/unix_events.py:create_unix_server``...). zloop makes these calls
natively (``sock/files.zig``), so its sendfile and Unix-server paths pass as
asyncio's do, and they are never mistaken for blocking user code.
"""

import asyncio
import contextlib
import gc
import os
import socket
import warnings

import pytest

from _net import RecordingProtocol, payload, wait_for

blockbuster = pytest.importorskip("blockbuster", reason="pip install -r tests/requirements.txt")

pytestmark = pytest.mark.network


@contextlib.contextmanager
def busted():
    """blockbuster on, as a project's test fixture turns it on."""
    with blockbuster.blockbuster_ctx():
        yield


@pytest.fixture
def blob(tmp_path):
    # Several sendfile(2) calls' worth (socket buffers are smaller).
    data = payload(2 * 1024 * 1024 + 17)
    path = tmp_path / "blob"
    path.write_bytes(data)
    return str(path), data


@pytest.fixture
def sock_path(tmp_path):
    path = str(tmp_path / "s")
    assert len(path) < 100, path  # AF_UNIX's limit, with room to spare
    return path


def _leave_a_stale_socket(path):
    # What a server that died without cleaning up leaves behind.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()


def test_sendfile_over_a_tcp_transport(loop, blob):
    path, data = blob

    async def main():
        peer = RecordingProtocol(loop)
        server = await loop.create_server(lambda: peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        with busted():
            with open(path, "rb") as f:
                sent = await wait_for(loop.sendfile(tr, f), 60)
            got = await wait_for(peer.received(len(data)), 60)
        tr.close()
        server.close()
        await wait_for(server.wait_closed())
        return sent, got

    sent, got = loop.run_until_complete(main())
    assert sent == len(data)
    assert got == data


def test_sock_sendfile(loop, blob):
    path, data = blob
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def receive(n):
        got = bytearray()
        while len(got) < n:
            chunk = await loop.sock_recv(b, 65536)
            if not chunk:
                break
            got += chunk
        return bytes(got)

    async def main():
        with busted():
            reader = loop.create_task(receive(len(data)))
            with open(path, "rb") as f:
                sent = await wait_for(loop.sock_sendfile(a, f), 60)
            return sent, await wait_for(reader, 60)

    try:
        sent, got = loop.run_until_complete(main())
    finally:
        a.close()
        b.close()
    assert sent == len(data)
    assert got == data


async def _serve_one_echo(loop, path):
    """create_unix_server at ``path``; one client's b"ping" echoes back."""
    server = await loop.create_unix_server(lambda: _Echo(), path)
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(b"ping")
    got = await wait_for(reader.readexactly(4))
    writer.close()
    await wait_for(writer.wait_closed())
    server.close()
    await wait_for(server.wait_closed())
    return got


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


def test_create_unix_server(loop, sock_path):
    # os.stat on the path (the stale-socket check; on 3.13+ also the inode
    # kept for the cleanup) and os.unlink at close: asyncio's are allowed.
    async def main():
        with busted():
            return await _serve_one_echo(loop, sock_path)

    assert loop.run_until_complete(main()) == b"ping"


def _without_socket_warnings():
    # asyncio leaves the socket it made when blockbuster stops it midway.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_create_unix_server_over_a_stale_socket(loop, loop_name, sock_path):
    # blockbuster allows asyncio's os.stat there but not its os.remove of
    # the stale file, so stock asyncio is flagged; zloop's own call is not.
    _leave_a_stale_socket(sock_path)

    async def main():
        with busted():
            return await _serve_one_echo(loop, sock_path)

    if loop_name == "asyncio":
        with pytest.raises(blockbuster.BlockingError, match="os.remove"):
            loop.run_until_complete(main())
        _without_socket_warnings()
        return
    assert loop.run_until_complete(main()) == b"ping"


def test_unix_datagram_endpoint_over_a_stale_socket(loop, loop_name, sock_path):
    # The same stale-socket check in create_datagram_endpoint, which
    # blockbuster does not allow asyncio at all (os.stat is flagged).
    _leave_a_stale_socket(sock_path)

    async def main():
        with busted():
            tr, _ = await loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, local_addr=sock_path, family=socket.AF_UNIX
            )
            bound = tr.get_extra_info("sockname")
            tr.close()
            return bound

    if loop_name == "asyncio":
        with pytest.raises(blockbuster.BlockingError, match="os.stat"):
            loop.run_until_complete(main())
        _without_socket_warnings()
        return
    assert loop.run_until_complete(main()) == sock_path
    os.unlink(sock_path)
