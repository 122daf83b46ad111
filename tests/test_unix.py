"""Unix-domain stream servers and connections (issue 3)."""

import asyncio
import errno
import itertools
import os
import socket

import pytest

from _net import EchoProtocol, RecordingProtocol, payload, wait_for
from _platform import abstract_unix_names, unix_path_max
from _support import PY, open_fds

pytestmark = pytest.mark.network


@pytest.fixture
def sock_path(tmp_path):
    # AF_UNIX paths are limited (sun_path); conftest keeps tmp_path short
    # enough, but check so that a long one fails clearly.
    path = str(tmp_path / "s")
    assert len(path) <= unix_path_max(), path
    return path


async def _serve(loop, path, protocol_cls=EchoProtocol, **kwargs):
    protocols = []

    def factory():
        proto = protocol_cls(loop)
        protocols.append(proto)
        return proto

    server = await loop.create_unix_server(factory, path, **kwargs)
    return server, protocols


async def _close_server(server):
    server.close()
    await wait_for(server.wait_closed())


def test_unix_echo(loop, sock_path):
    data = payload(1024 * 1024)

    async def main():
        server, served = await _serve(loop, sock_path)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock_path)
        tr.write(data)
        got = await wait_for(client.received(len(data)))
        tr.write_eof()
        await wait_for(client.lost)
        await wait_for(served[0].lost)
        await _close_server(server)
        lifecycle = [e for e in client.events if e not in ("pause", "resume")]
        return got, [name for name, _ in itertools.groupby(lifecycle)]

    got, events = loop.run_until_complete(main())
    assert got == data
    # (pause/resume_writing may come and go while 1 MB is in flight.)
    assert events == ["made", "data", "eof", "lost"]


def test_unix_extra_info(loop, sock_path):
    async def main():
        server, served = await _serve(loop, sock_path)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock_path)
        try:
            sock = tr.get_extra_info("socket")
            return {
                "family": sock.family,
                "type": sock.type,
                "peername": tr.get_extra_info("peername"),
                "sockname": tr.get_extra_info("sockname"),
                "server sockname": server.sockets[0].getsockname(),
                "is transport": isinstance(tr, asyncio.Transport),
                "can_write_eof": tr.can_write_eof(),
            }
        finally:
            tr.close()
            await wait_for(client.lost)
            await _close_server(server)

    assert loop.run_until_complete(main()) == {
        "family": socket.AF_UNIX,
        "type": socket.SOCK_STREAM,
        "peername": sock_path,
        "sockname": "",
        "server sockname": sock_path,
        "is transport": True,
        "can_write_eof": True,
    }


def test_socket_file_after_close(loop, sock_path):
    # 3.13 added cleanup_socket=True (the default): close() unlinks the path.
    async def main():
        server, _ = await _serve(loop, sock_path)
        assert os.path.exists(sock_path)
        await _close_server(server)
        return os.path.exists(sock_path)

    assert loop.run_until_complete(main()) is (PY < (3, 13))


@pytest.mark.parametrize("bound_by", ["path", "sock"])
def test_socket_file_replaced_before_close_is_left_alone(loop, sock_path, bound_by):
    # test_asyncio's test_unix_server_cleanup_replaced (3.13): the cleanup
    # removes only the file the server bound; once it was unlinked and
    # another socket bound at the same path, close() must not remove that
    # one (asyncio compares the inode recorded when the server started).
    async def main():
        if bound_by == "path":
            server, _ = await _serve(loop, sock_path)
        else:
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(sock_path)
            server = await loop.create_unix_server(asyncio.Protocol, sock=sock)
        os.unlink(sock_path)
        with socket.socket(socket.AF_UNIX) as other:
            other.bind(sock_path)
            await _close_server(server)
            return os.path.exists(sock_path)

    assert loop.run_until_complete(main()) is True


def test_stale_socket_file_is_replaced(loop, sock_path):
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(sock_path)
    stale.close()

    async def main():
        server, served = await _serve(loop, sock_path)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock_path)
        tr.write(b"fresh")
        got = await wait_for(client.received(5))
        tr.close()
        await wait_for(client.lost)
        await _close_server(server)
        return got

    assert loop.run_until_complete(main()) == b"fresh"


def test_path_taken_by_a_regular_file(loop, sock_path):
    open(sock_path, "w").close()

    async def main():
        with pytest.raises(OSError) as info:
            await loop.create_unix_server(asyncio.Protocol, sock_path)
        return info.value

    exc = loop.run_until_complete(main())
    assert exc.errno == errno.EADDRINUSE
    assert str(exc) == f"[Errno 98] Address {sock_path!r} is already in use"
    assert os.path.isfile(sock_path)


def test_connect_to_a_missing_path(loop, sock_path):
    async def main():
        with pytest.raises(FileNotFoundError) as info:
            await loop.create_unix_connection(asyncio.Protocol, sock_path)
        return info.value.errno

    assert loop.run_until_complete(main()) == errno.ENOENT


def test_connect_to_a_socket_nobody_listens_on(loop, sock_path):
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(sock_path)
    stale.close()

    async def main():
        with pytest.raises(ConnectionRefusedError) as info:
            await loop.create_unix_connection(asyncio.Protocol, sock_path)
        return info.value.errno

    assert loop.run_until_complete(main()) == errno.ECONNREFUSED


@pytest.mark.skipif(not abstract_unix_names(), reason="no abstract AF_UNIX names (Linux's) here")
def test_abstract_namespace(loop):
    name = f"\0zloop-tests-{os.getpid()}-{id(loop)}"

    async def main():
        server, served = await _serve(loop, name)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), name)
        tr.write(b"abstract")
        got = await wait_for(client.received(8))
        tr.close()
        await wait_for(client.lost)
        sockname = server.sockets[0].getsockname()
        await _close_server(server)
        return got, sockname

    got, sockname = loop.run_until_complete(main())
    assert got == b"abstract"
    assert sockname == name.encode()


def test_unix_server_from_a_prebound_socket(loop, sock_path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(sock_path)

    async def main():
        server = await loop.create_unix_server(lambda: EchoProtocol(loop), sock=sock)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock_path)
        tr.write(b"pre")
        got = await wait_for(client.received(3))
        tr.close()
        await wait_for(client.lost)
        await _close_server(server)
        return got

    assert loop.run_until_complete(main()) == b"pre"


def test_unix_connection_from_a_connected_socket(loop, sock_path):
    async def main():
        server, served = await _serve(loop, sock_path)
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(sock_path)
        raw.setblocking(False)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock=raw)
        tr.write(b"via sock")
        got = await wait_for(client.received(8))
        tr.close()
        await wait_for(client.lost)
        await _close_server(server)
        return got

    assert loop.run_until_complete(main()) == b"via sock"


def test_path_and_sock_together_is_an_error(loop, sock_path):
    async def main():
        with socket.socket(socket.AF_UNIX) as s:
            with pytest.raises(ValueError) as info:
                await loop.create_unix_server(asyncio.Protocol, sock_path, sock=s)
            return str(info.value)

    assert loop.run_until_complete(main()) == "path and sock can not be specified at the same time"


def test_unix_half_close(loop, sock_path):
    class ReplyOnEof(RecordingProtocol):
        def eof_received(self):
            super().eof_received()
            self.transport.write(b"got:" + bytes(self.data))
            self.transport.close()
            return True

    async def main():
        server, _ = await _serve(loop, sock_path, ReplyOnEof)
        tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock_path)
        tr.write(b"xyz")
        tr.write_eof()
        await wait_for(client.lost)
        await _close_server(server)
        return bytes(client.data)

    assert loop.run_until_complete(main()) == b"got:xyz"


def test_streams_over_unix(loop, sock_path):
    async def handle(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_unix_server(handle, sock_path)
        reader, writer = await asyncio.open_unix_connection(sock_path)
        writer.write(b"hello unix\n")
        line = await wait_for(reader.readline())
        writer.close()
        await writer.wait_closed()
        await _close_server(server)
        return line

    assert loop.run_until_complete(main()) == b"HELLO UNIX\n"


def test_unix_connections_leave_no_descriptors(loop, sock_path):
    async def main():
        server, served = await _serve(loop, sock_path)
        for _ in range(10):
            tr, client = await loop.create_unix_connection(lambda: RecordingProtocol(loop), sock_path)
            tr.write(b"x")
            await wait_for(client.received(1))
            tr.close()
            await wait_for(client.lost)
        for proto in served:
            await wait_for(proto.lost)
        await _close_server(server)
        if os.path.exists(sock_path):
            os.unlink(sock_path)

    loop.run_until_complete(main())
    before = open_fds()
    loop.run_until_complete(main())
    assert open_fds() - before == set()
