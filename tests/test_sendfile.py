"""loop.sock_sendfile() and loop.sendfile() (issue 3): the os.sendfile path,
its fallback, argument checks, cancellation and the transport's write guard.

Every case runs on stock asyncio and on zloop. On Linux both take the native
(os.sendfile) path for a regular file, and fall back to reads and sends for
anything else, so the outcomes here are asyncio's own.
"""

import asyncio
import errno
import io
import socket
import sys
from unittest import mock

import pytest

from _net import RecordingProtocol, payload, wait_for
from _support import yield_passes

pytestmark = pytest.mark.network

# asyncio 3.14 sets the file position however a transfer ends (even when
# nothing was sent) and its fallbacks seek to the offset even when it is 0;
# 3.13 and older move it only once a byte went out.
ALWAYS_SETS_POSITION = sys.version_info >= (3, 14)

HOST = "127.0.0.1"
# Small socket buffers make a few MiB enough to fill the path to a peer that
# does not read, so a transfer is reliably caught in progress.
SMALL_BUF = 16 * 1024


@pytest.fixture
def blob(tmp_path):
    """A regular file with recognisable content: (path, data)."""
    data = payload(2 * 1024 * 1024 + 13)
    path = tmp_path / "blob"
    path.write_bytes(data)
    return path, data


@pytest.fixture
def tcp_pair():
    """A connected pair of non-blocking TCP sockets (sender, receiver)."""
    with socket.create_server((HOST, 0)) as listener:
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
    for s in (a, b):
        s.setblocking(False)
    yield a, b
    a.close()
    b.close()


def _shrink(sender, receiver):
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUF)
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUF)


async def _recv_exactly(loop, sock, size):
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = await loop.sock_recv_into(sock, view[got:])
        assert n, f"EOF after {got} of {size} bytes"
        got += n
    return bytes(buf)


async def _recv_to_eof(loop, sock):
    chunks = []
    while True:
        chunk = await loop.sock_recv(sock, 256 * 1024)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


async def _until_blocked(task):
    """Let the loop run until ``task`` has sent what fits and waits."""
    await yield_passes(20)
    assert not task.done(), "the transfer was expected to block"


# -- sock_sendfile -----------------------------------------------------------


def test_sock_sendfile_large_file_arrives_byte_exact(loop, tcp_pair, tmp_path):
    a, b = tcp_pair
    data = payload(24 * 1024 * 1024 + 5)
    path = tmp_path / "large"
    path.write_bytes(data)

    async def main():
        read = loop.create_task(_recv_exactly(loop, b, len(data)))
        with open(path, "rb") as f:
            sent = await wait_for(loop.sock_sendfile(a, f), 60)
            position = f.tell()
        return sent, position, await wait_for(read, 60)

    sent, position, got = loop.run_until_complete(main())
    assert (sent, position) == (len(data), len(data))
    assert got == data


@pytest.mark.parametrize(
    "offset, count, expect",
    [
        (0, 1, (0, 1)),
        (1000, 5000, (1000, 6000)),
        (1_000_000, None, (1_000_000, None)),
        (100, 10**9, (100, None)),  # a count past the end stops at EOF
    ],
)
def test_sock_sendfile_offset_and_count(loop, tcp_pair, blob, offset, count, expect):
    a, b = tcp_pair
    path, data = blob
    start, end = expect
    want = data[start:end]

    async def main():
        read = loop.create_task(_recv_exactly(loop, b, len(want)))
        with open(path, "rb") as f:
            sent = await wait_for(loop.sock_sendfile(a, f, offset, count))
            position = f.tell()
        return sent, position, await wait_for(read)

    sent, position, got = loop.run_until_complete(main())
    assert sent == len(want)
    assert position == start + len(want)
    assert got == want


def test_sock_sendfile_offset_past_the_end_sends_nothing(loop, tcp_pair, blob):
    a, b = tcp_pair
    path, data = blob

    async def main():
        with open(path, "rb") as f:
            f.seek(7)
            sent = await wait_for(loop.sock_sendfile(a, f, len(data) + 10))
            return sent, f.tell()

    # Nothing was sent: 3.13 leaves the position where it was, 3.14 puts it
    # at the offset (past the end).
    expected = len(data) + 10 if ALWAYS_SETS_POSITION else 7
    assert loop.run_until_complete(main()) == (0, expected)


def test_sock_sendfile_empty_file(loop, tcp_pair, tmp_path):
    a, _ = tcp_pair
    path = tmp_path / "empty"
    path.write_bytes(b"")

    async def main():
        with open(path, "rb") as f:
            return await wait_for(loop.sock_sendfile(a, f)), f.tell()

    assert loop.run_until_complete(main()) == (0, 0)


def test_sock_sendfile_mixes_with_sock_sendall(loop, tcp_pair, blob):
    a, b = tcp_pair
    path, data = blob
    expected = b"head" + data[10:300_010] + b"tail"

    async def main():
        read = loop.create_task(_recv_exactly(loop, b, len(expected)))
        await loop.sock_sendall(a, b"head")
        with open(path, "rb") as f:
            await wait_for(loop.sock_sendfile(a, f, 10, 300_000))
        await loop.sock_sendall(a, b"tail")
        return await wait_for(read)

    assert loop.run_until_complete(main()) == expected


def test_sock_sendfile_over_a_unix_socketpair(loop, blob):
    path, data = blob
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def main():
        read = loop.create_task(_recv_exactly(loop, b, len(data)))
        with open(path, "rb") as f:
            sent = await wait_for(loop.sock_sendfile(a, f))
        return sent, await wait_for(read)

    try:
        assert loop.run_until_complete(main()) == (len(data), data)
    finally:
        a.close()
        b.close()


def _bad_calls(sock, binary, text):
    return [
        (ValueError, "binary mode", lambda: (sock, text, 0, None)),
        (TypeError, "count must be a positive integer", lambda: (sock, binary, 0, "1")),
        (ValueError, "count must be a positive integer", lambda: (sock, binary, 0, 0)),
        (ValueError, "count must be a positive integer", lambda: (sock, binary, 0, -5)),
        (TypeError, "offset must be a non-negative integer", lambda: (sock, binary, 1.5, None)),
        (ValueError, "offset must be a non-negative integer", lambda: (sock, binary, -1, None)),
    ]


def test_sock_sendfile_rejects_bad_arguments(loop, tcp_pair, blob):
    a, _ = tcp_pair
    path, _ = blob

    async def main():
        seen = []
        with open(path, "rb") as binary, open(path, "r", encoding="latin-1") as text:
            for exc_type, message, args in _bad_calls(a, binary, text):
                with pytest.raises(exc_type, match=message):
                    await loop.sock_sendfile(*args())
                seen.append(binary.tell())
        return seen

    # Nothing was read or sent by a refused call.
    assert loop.run_until_complete(main()) == [0] * 6


def test_sock_sendfile_rejects_a_datagram_socket(loop, blob):
    path, _ = blob
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)

    async def main():
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match="only SOCK_STREAM"):
                await loop.sock_sendfile(sock, f)

    try:
        loop.run_until_complete(main())
    finally:
        sock.close()


def test_sock_sendfile_wants_a_non_blocking_socket_in_debug_mode(loop, blob):
    path, _ = blob
    a, b = socket.socketpair()  # blocking
    loop.set_debug(True)

    async def main():
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match="must be non-blocking"):
                await loop.sock_sendfile(a, f)

    try:
        loop.run_until_complete(main())
    finally:
        a.close()
        b.close()


def test_sock_sendfile_from_bytesio_without_fallback(loop, tcp_pair):
    a, _ = tcp_pair
    f = io.BytesIO(b"data")

    async def main():
        with pytest.raises(asyncio.SendfileNotAvailableError, match="not a regular file"):
            await loop.sock_sendfile(a, f, fallback=False)
        return f.tell()

    assert loop.run_until_complete(main()) == 0


def test_sock_sendfile_from_bytesio_falls_back(loop, tcp_pair):
    a, b = tcp_pair
    data = payload(100_000)
    f = io.BytesIO(data)

    async def main():
        read = loop.create_task(_recv_exactly(loop, b, 50_000))
        sent = await wait_for(loop.sock_sendfile(a, f, 20_000, 50_000))
        return sent, f.tell(), await wait_for(read)

    sent, position, got = loop.run_until_complete(main())
    assert (sent, position) == (50_000, 70_000)
    assert got == data[20_000:70_000]


def _file_positioned_at_300():
    """A 1000-byte file object whose position is 300, and what a fallback
    sendfile from offset 0 sends of it on this Python."""
    data = payload(1000)
    f = io.BytesIO(data)
    f.seek(300)
    return f, (data if ALWAYS_SETS_POSITION else data[300:])


def test_sock_sendfile_fallback_at_offset_zero(loop, tcp_pair):
    # The fallback reads from the offset on 3.14 even when it is 0; 3.13
    # seeks only for a non-zero offset, so it reads from where the file is
    # (and then puts the position at offset + sent all the same).
    a, b = tcp_pair
    f, expected = _file_positioned_at_300()
    position = len(expected)

    async def main():
        read = loop.create_task(_recv_exactly(loop, b, len(expected)))
        sent = await wait_for(loop.sock_sendfile(a, f))
        return sent, f.tell(), await wait_for(read)

    assert loop.run_until_complete(main()) == (len(expected), position, expected)


def test_sendfile_fallback_at_offset_zero(loop):
    f, expected = _file_positioned_at_300()
    position = len(expected)

    async def main():
        server, tr, client, peer = await _transport_pair(loop)
        sent = await wait_for(loop.sendfile(tr, f))
        got = await wait_for(peer.received(len(expected)))
        await _teardown(server, tr, client)
        return sent, f.tell(), got

    assert loop.run_until_complete(main()) == (len(expected), position, expected)


@pytest.mark.parametrize("fallback", [False, True])
def test_sock_sendfile_when_os_sendfile_refuses_the_file(
    loop, loop_name, tcp_pair, blob, fallback
):
    # EINVAL from the first sendfile(2) call is what a file it cannot read
    # from (a pipe, some special files) gives: not available, so fall back.
    # asyncio calls os.sendfile; zloop its native twin (sock/files.zig).
    a, b = tcp_pair
    path, data = blob
    refused = OSError(errno.EINVAL, "Invalid argument")
    call = "zloop._sendfile._sendfile_call" if loop_name == "zloop" else "os.sendfile"

    async def main():
        with open(path, "rb") as f, mock.patch(call, side_effect=refused):
            if not fallback:
                with pytest.raises(asyncio.SendfileNotAvailableError):
                    await loop.sock_sendfile(a, f, 5, 1000, fallback=False)
                return f.tell(), b""
            read = loop.create_task(_recv_exactly(loop, b, 1000))
            await wait_for(loop.sock_sendfile(a, f, 5, 1000))
            return f.tell(), await wait_for(read)

    position, got = loop.run_until_complete(main())
    if fallback:
        assert (position, got) == (1005, data[5:1005])
    else:
        # The failed call sent nothing: 3.14 still sets the position (to
        # the offset), 3.13 leaves it alone.
        assert position == (5 if ALWAYS_SETS_POSITION else 0)


def test_sock_sendfile_on_a_closed_socket(loop, blob):
    path, _ = blob
    a, b = socket.socketpair()
    a.setblocking(False)
    a.close()

    async def main():
        with open(path, "rb") as f:
            # os.sendfile fails (EBADF), so the fallback runs, reads a
            # chunk and fails to send it.
            with pytest.raises(OSError) as info:
                await loop.sock_sendfile(a, f)
            return info.value.errno

    try:
        assert loop.run_until_complete(main()) == errno.EBADF
    finally:
        b.close()


def test_sock_sendfile_cancelled_leaves_the_socket_usable(loop, tcp_pair, tmp_path):
    a, b = tcp_pair
    _shrink(a, b)
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main():
        with open(path, "rb") as f:
            task = loop.create_task(loop.sock_sendfile(a, f))
            await _until_blocked(task)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await yield_passes(2)
            position = f.tell()
        # The writer went with the cancelled transfer...
        watcher_left = loop.remove_writer(a.fileno())
        # ...so the socket takes ordinary sends, after what sendfile sent.
        read = loop.create_task(_recv_to_eof(loop, b))
        await wait_for(loop.sock_sendall(a, b"TAIL"))
        a.shutdown(socket.SHUT_WR)
        got = await wait_for(read)
        return watcher_left, position, got

    watcher_left, position, got = loop.run_until_complete(main())
    assert watcher_left is False
    # As asyncio: a cancelled os.sendfile transfer leaves the position alone.
    assert position == 0
    assert got.endswith(b"TAIL")
    sent = len(got) - 4
    assert 0 < sent < len(data)
    assert got[:sent] == data[:sent]


def test_sock_sendfile_peer_reset_mid_transfer(loop, tcp_pair, tmp_path):
    a, b = tcp_pair
    _shrink(a, b)
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main():
        with open(path, "rb") as f:
            task = loop.create_task(loop.sock_sendfile(a, f))
            await _until_blocked(task)
            # Unread data makes close() send a reset.
            b.close()
            with pytest.raises(ConnectionError):
                await wait_for(task)
            position = f.tell()
        return position

    position = loop.run_until_complete(main())
    # Part went out before the reset: the position says how much.
    assert 0 < position < len(data)


# -- loop.sendfile over a transport ------------------------------------------------


async def _transport_pair(loop, *, small_buffers=False):
    """(server, client transport, client protocol, server-side protocol)."""
    served = []

    def factory():
        proto = RecordingProtocol(loop)
        served.append(proto)
        return proto

    server = await loop.create_server(factory, HOST, 0)
    addr = server.sockets[0].getsockname()[:2]
    tr, client = await loop.create_connection(lambda: RecordingProtocol(loop), *addr)
    while not served:
        await asyncio.sleep(0)
    peer = served[0]
    await wait_for(peer.made)
    if small_buffers:
        tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUF)
        peer.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUF
        )
    return server, tr, client, peer


async def _teardown(server, tr, client):
    tr.close()
    await wait_for(client.lost)
    server.close()
    await wait_for(server.wait_closed())


def test_sendfile_large_file_with_data_before_and_after(loop, tmp_path):
    data = payload(24 * 1024 * 1024 + 3)
    path = tmp_path / "large"
    path.write_bytes(data)
    head = payload(1024 * 1024)

    async def main():
        server, tr, client, peer = await _transport_pair(loop, small_buffers=True)
        # Most of `head` waits in the transport's buffer: sendfile must
        # flush it first.
        tr.write(head)
        with open(path, "rb") as f:
            sent = await wait_for(loop.sendfile(tr, f), 60)
            position = f.tell()
        tr.write(b"after")
        total = len(head) + len(data) + 5
        got = await wait_for(peer.received(total), 60)
        await _teardown(server, tr, client)
        return sent, position, got

    sent, position, got = loop.run_until_complete(main())
    assert (sent, position) == (len(data), len(data))
    assert got == head + data + b"after"


@pytest.mark.parametrize("offset, count", [(0, 1), (12_345, 100_000), (2_000_000, None)])
def test_sendfile_offset_and_count(loop, blob, offset, count):
    path, data = blob
    want = data[offset : None if count is None else offset + count]

    async def main():
        server, tr, client, peer = await _transport_pair(loop)
        with open(path, "rb") as f:
            sent = await wait_for(loop.sendfile(tr, f, offset, count))
            position = f.tell()
        got = await wait_for(peer.received(len(want)))
        await _teardown(server, tr, client)
        return sent, position, got

    sent, position, got = loop.run_until_complete(main())
    assert (sent, position) == (len(want), offset + len(want))
    assert got == want


def test_sendfile_write_raises_while_in_progress(loop, tmp_path):
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main():
        server, tr, client, peer = await _transport_pair(loop, small_buffers=True)
        peer.transport.pause_reading()
        with open(path, "rb") as f:
            task = loop.create_task(loop.sendfile(tr, f))
            await _until_blocked(task)
            with pytest.raises(RuntimeError, match="sendfile is in progress"):
                tr.write(b"during")
            with pytest.raises(RuntimeError, match="sendfile is in progress"):
                tr.writelines([b"during"])
            peer.transport.resume_reading()
            sent = await wait_for(task)
        tr.write(b"after")
        got = await wait_for(peer.received(len(data) + 5))
        await _teardown(server, tr, client)
        return sent, got

    sent, got = loop.run_until_complete(main())
    assert sent == len(data)
    assert got == data + b"after"


def test_sendfile_pauses_reading_meanwhile(loop, tmp_path):
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main():
        server, tr, client, peer = await _transport_pair(loop, small_buffers=True)
        peer.transport.pause_reading()
        with open(path, "rb") as f:
            task = loop.create_task(loop.sendfile(tr, f))
            await _until_blocked(task)
            reading_during = tr.is_reading()
            peer.transport.write(b"ping")
            await yield_passes(10)
            received_during = bytes(client.data)
            peer.transport.resume_reading()
            await wait_for(task)
        reading_after = tr.is_reading()
        got = await wait_for(client.received(4))
        await _teardown(server, tr, client)
        return reading_during, received_during, reading_after, got

    assert loop.run_until_complete(main()) == (False, b"", True, b"ping")


def test_sendfile_on_a_closing_transport(loop, blob):
    path, _ = blob

    async def main():
        server, tr, client, peer = await _transport_pair(loop)
        tr.close()
        with open(path, "rb") as f:
            with pytest.raises(RuntimeError, match="Transport is closing"):
                await loop.sendfile(tr, f)
            position = f.tell()
        await wait_for(client.lost)
        await wait_for(peer.lost)
        server.close()
        await wait_for(server.wait_closed())
        return position, bytes(peer.data)

    assert loop.run_until_complete(main()) == (0, b"")


def test_sendfile_bytesio_without_fallback(loop):
    f = io.BytesIO(b"data")

    async def main():
        server, tr, client, peer = await _transport_pair(loop)
        with pytest.raises(asyncio.SendfileNotAvailableError, match="not a regular file"):
            await loop.sendfile(tr, f, fallback=False)
        # The transport is as it was: writable, reading.
        tr.write(b"still")
        got = await wait_for(peer.received(5))
        reading = tr.is_reading()
        await _teardown(server, tr, client)
        return got, reading, f.tell()

    assert loop.run_until_complete(main()) == (b"still", True, 0)


def test_sendfile_bytesio_falls_back(loop):
    data = payload(300_000)
    f = io.BytesIO(data)

    async def main():
        server, tr, client, peer = await _transport_pair(loop)
        sent = await wait_for(loop.sendfile(tr, f, 1000, 200_000))
        got = await wait_for(peer.received(200_000))
        await _teardown(server, tr, client)
        return sent, f.tell(), got

    assert loop.run_until_complete(main()) == (200_000, 201_000, data[1000:201_000])


def test_sendfile_rejects_bad_arguments(loop, blob):
    path, _ = blob

    async def main():
        server, tr, client, peer = await _transport_pair(loop)
        with open(path, "rb") as binary, open(path, "r", encoding="latin-1") as text:
            for exc_type, message, args in _bad_calls(tr, binary, text):
                with pytest.raises(exc_type, match=message):
                    await loop.sendfile(*args())
        tr.write(b"ok")
        got = await wait_for(peer.received(2))
        await _teardown(server, tr, client)
        return got

    assert loop.run_until_complete(main()) == b"ok"


def test_sendfile_cancelled_leaves_the_transport_usable(loop, tmp_path):
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main():
        server, tr, client, peer = await _transport_pair(loop, small_buffers=True)
        peer.transport.pause_reading()
        with open(path, "rb") as f:
            task = loop.create_task(loop.sendfile(tr, f))
            await _until_blocked(task)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            position = f.tell()
        # Writes work again and reading resumed.
        tr.write(b"TAIL")
        tr.write_eof()
        peer.transport.write(b"pong")
        peer.transport.resume_reading()
        await wait_for(peer.eof)
        got = bytes(peer.data)
        reply = await wait_for(client.received(4))
        await _teardown(server, tr, client)
        return position, got, reply

    position, got, reply = loop.run_until_complete(main())
    assert position == 0
    assert reply == b"pong"
    assert got.endswith(b"TAIL")
    sent = len(got) - 4
    assert 0 < sent < len(data)
    assert got[:sent] == data[:sent]


def test_sendfile_peer_closes_mid_transfer(loop, tmp_path):
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main():
        server, tr, client, peer = await _transport_pair(loop, small_buffers=True)
        peer.transport.pause_reading()
        with open(path, "rb") as f:
            task = loop.create_task(loop.sendfile(tr, f))
            await _until_blocked(task)
            # Unread data makes the peer's close send a reset.
            peer.transport.abort()
            with pytest.raises(ConnectionError):
                await wait_for(task)
            position = f.tell()
        await wait_for(client.lost)
        server.close()
        await wait_for(server.wait_closed())
        return position, tr.is_closing()

    position, closing = loop.run_until_complete(main())
    assert 0 < position < len(data)
    assert closing


@pytest.mark.zloop_only
def test_sendfile_fails_when_the_transport_closes_meanwhile(zloop_module, tmp_path):
    """zloop only: a transport closed while loop.sendfile() runs fails it with
    ConnectionError. asyncio's selector loop cannot say this: its
    _call_connection_lost sets an exception on the already-finished empty
    waiter (InvalidStateError, reported to the exception handler) and its
    os.sendfile writer stays registered on the closed fd, so the sendfile
    never finishes."""
    data = payload(8 * 1024 * 1024)
    path = tmp_path / "big"
    path.write_bytes(data)
    loop = zloop_module.new_event_loop()

    async def main():
        server, tr, client, peer = await _transport_pair(loop, small_buffers=True)
        peer.transport.pause_reading()
        with open(path, "rb") as f:
            task = loop.create_task(loop.sendfile(tr, f))
            await _until_blocked(task)
            tr.close()
            with pytest.raises(ConnectionError, match="closed by peer"):
                await wait_for(task)
        lost = await wait_for(client.lost)
        peer.transport.abort()
        server.close()
        await wait_for(server.wait_closed())
        return lost, tr.is_closing()

    try:
        assert loop.run_until_complete(main()) == (None, True)
    finally:
        loop.close()


class _FlowEvents(asyncio.Protocol):
    """Records pause_writing, resume_writing and connection_lost in order."""

    def __init__(self, loop):
        self.events = []
        self.lost = loop.create_future()

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")

    def connection_lost(self, exc):
        self.events.append("lost")
        self.lost.set_result(exc)


async def _unread_connection(loop):
    """A connection whose server reads nothing: (server, client transport,
    client protocol, server protocol)."""
    served = []
    server = await loop.create_server(lambda: served.append(RecordingProtocol(loop)) or served[-1],
                                      HOST, 0)
    client = _FlowEvents(loop)
    tr, _ = await loop.create_connection(lambda: client, *server.sockets[0].getsockname()[:2])
    while not served:
        await asyncio.sleep(0)
    peer = served[0]
    await wait_for(peer.made)
    peer.transport.pause_reading()
    return server, tr, client, peer


async def _paused_client(loop):
    """As _unread_connection, the client protocol paused by what it wrote."""
    server, tr, client, peer = await _unread_connection(loop)
    while "pause" not in client.events:
        tr.write(bytes(1 << 20))
        await asyncio.sleep(0)
    return server, tr, client, peer


def test_sendfile_fallback_says_nothing_after_connection_lost(loop, loop_name):
    """loop.sendfile()'s fallback (a BytesIO: no file descriptor) starts on
    a transport whose protocol is paused and waits; the peer aborts. The
    protocol's connection_lost() is its last callback. asyncio's fallback
    calls resume_writing() after it, because the protocol was paused when
    the transfer began."""
    if loop_name == "asyncio":
        pytest.skip("asyncio's sendfile fallback calls resume_writing() after connection_lost()")

    async def main():
        server, tr, client, peer = await _paused_client(loop)
        sending = asyncio.ensure_future(loop.sendfile(tr, io.BytesIO(payload(1000))))
        await asyncio.sleep(0.01)
        peer.transport.abort()
        with pytest.raises(ConnectionError):
            await wait_for(sending)
        await wait_for(client.lost)
        server.close()
        await wait_for(server.wait_closed())
        return client.events

    assert loop.run_until_complete(main()) == ["pause", "lost"]


def test_sendfile_fallback_leaves_the_protocol_in_the_transports_writing_state(loop, loop_name):
    """The fallback's last chunk takes the transport over its limit (its
    peer reads nothing): the protocol it hands the transport back to is
    paused too, so the transport's later resume_writing() follows a
    pause_writing(). asyncio's fallback hands back an unpaused protocol,
    which then gets resume_writing() alone."""
    if loop_name == "asyncio":
        pytest.skip("asyncio's sendfile fallback hands back an unpaused protocol over a paused transport")

    async def main():
        server, tr, client, peer = await _unread_connection(loop)
        # Fill the sockets and keep some in the transport, under its limit.
        tr.set_write_buffer_limits(high=64 << 20)
        prefill = 16 << 20
        tr.write(bytes(prefill))
        await asyncio.sleep(0.05)
        held = tr.get_write_buffer_size()
        assert held > 0, "the sockets took everything"
        tr.set_write_buffer_limits(high=held + 1000)
        sent = await wait_for(loop.sendfile(tr, io.BytesIO(payload(16384))))
        handed_back = list(client.events)
        peer.transport.resume_reading()
        await wait_for(peer.received(prefill + sent), 30)
        tr.close()
        await wait_for(client.lost)
        server.close()
        await wait_for(server.wait_closed())
        return handed_back, client.events

    assert loop.run_until_complete(main()) == (["pause"], ["pause", "resume", "lost"])
