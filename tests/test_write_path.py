"""The stream transport's write path (issue 3): writelines(), the buffer, and
zloop's write coalescing (a callback's small writes sent together).

Every case writes to a peer that reads nothing until the writes are done
(a Unix socketpair, whose buffers do not grow), so the transport has to
buffer, then drains the peer and checks what arrived byte for byte.
"""

import asyncio
import gc
import os
import socket
import struct
import sys

import pytest

from _net import RecordingProtocol, payload, wait_for
from _platform import reset_send_errno
from _support import PY

pytestmark = pytest.mark.network

MB = 1024 * 1024


async def _pair(loop):
    """(transport, protocol, peer): the peer a raw non-blocking socket."""
    mine, peer = socket.socketpair()
    peer.setblocking(False)
    tr, proto = await loop.create_connection(lambda: RecordingProtocol(loop), sock=mine)
    await wait_for(proto.made)
    return tr, proto, peer


async def _fill(tr):
    """Write until the transport buffers: the socket is full from then on."""
    block = b"\0" * (64 * 1024)
    written = 0
    while tr.get_write_buffer_size() == 0:
        tr.write(block)
        written += len(block)
    return written


async def _read(loop, peer, size=None):
    """Read ``size`` bytes from the peer, or everything up to its EOF."""
    data = bytearray()
    while size is None or len(data) < size:
        chunk = await wait_for(loop.sock_recv(peer, 4 * MB))
        if not chunk:
            break
        data += chunk
    return bytes(data)


async def _finish(tr, proto, peer):
    tr.close()
    assert await wait_for(proto.lost) is None
    peer.close()


def test_writelines_mixed_types(loop):
    items = [
        b"ab",
        bytearray(b"cd"),
        memoryview(b"ef"),
        b"",
        bytearray(),
        memoryview(b"jk")[:0],
        memoryview(bytearray(b"ghi"))[1:],
    ]
    # Empty items sit between others: trailing ones stay in asyncio 3.12
    # and 3.13's buffer for good (its sendmsg bookkeeping stops at the last
    # byte sent), so their close() and write_eof() would never finish.

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.writelines(items)
        first = await _read(loop, peer, 6)
        tr.writelines(())
        tr.writelines(iter([b"x", b"y"]))
        second = await _read(loop, peer, 2)
        await _finish(tr, proto, peer)
        return first, second

    assert loop.run_until_complete(main()) == (b"abcdefhi", b"xy")


def test_writelines_rejects_before_sending(loop, loop_name):
    # Every item is checked before anything is written: a TypeError leaves
    # nothing sent, with or without buffered data ahead of it.
    if loop_name == "asyncio" and PY >= (3, 15):
        # 3.15's writelines() (gh-155888) buffers the items ahead of the bad
        # one without registering its writer: the next write() is stuck
        # behind them. zloop keeps the call all-or-nothing.
        pytest.skip("asyncio 3.15's writelines() strands the items before a bad one")

    async def main():
        tr, proto, peer = await _pair(loop)
        with pytest.raises(TypeError):
            tr.writelines([b"lost", "not bytes"])
        with pytest.raises(TypeError):
            tr.writelines(5)
        tr.write(b"kept")
        assert await _read(loop, peer, 4) == b"kept"
        filled = await _fill(tr)
        with pytest.raises(TypeError):
            tr.writelines([b"lost", 1])
        tr.writelines([b"tail"])
        tr.write_eof()
        with pytest.raises(RuntimeError):
            tr.writelines([b"after eof"])
        data = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return data, filled

    data, filled = loop.run_until_complete(main())
    assert data == b"\0" * filled + b"tail"


def test_writelines_on_a_lost_connection_is_counted_as_write(loop, caplog):
    # asyncio 3.14 drops writelines() on a lost connection before it looks at
    # the items and counts the call as write() does, so the drops are logged
    # after a few, even calls whose items are all empty or not bytes.
    if PY < (3, 14):
        pytest.skip("3.13's writelines() does not count calls on a lost connection")

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.close()  # the first count (nothing buffered)
        for _ in range(4):
            tr.writelines([b""])
        tr.writelines(["not bytes"])  # the sixth: logged, not raised
        assert await wait_for(proto.lost) is None
        peer.close()

    loop.run_until_complete(main())
    logged = [r for r in caplog.records if r.getMessage() == "socket.send() raised exception."]
    assert len(logged) == 1


def _items(count):
    """``count`` chunks of uneven sizes and types, and what they join to."""
    data = payload(count * 3400)
    items, pos, sizes = [], 0, (1, 7, 300, 2900, 20000, 0, 64)
    kinds = (bytes, bytearray, memoryview)
    for i in range(count):
        size = sizes[i % len(sizes)] or (i == count - 1)
        chunk = data[pos : pos + size]
        pos += size
        items.append(kinds[i % 3](chunk))
    assert items[-1], "a trailing empty item (see test_writelines_mixed_types)"
    return items, b"".join(items)


def test_writelines_2000_items_to_a_slow_reader(loop):
    items, expected = _items(2000)

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.writelines(items)
        buffered = tr.get_write_buffer_size()
        tr.write_eof()
        data = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return buffered, data

    buffered, data = loop.run_until_complete(main())
    assert 0 < buffered < len(expected)
    assert len(data) == len(expected) and data == expected


def test_writelines_behind_buffered_data(loop):
    items, expected = _items(300)

    async def main():
        tr, proto, peer = await _pair(loop)
        filled = await _fill(tr)
        tr.writelines(items)
        tr.write(b"end")
        tr.write_eof()
        data = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return filled, data

    filled, data = loop.run_until_complete(main())
    assert data == b"\0" * filled + expected + b"end"


def test_many_mid_sized_copies_while_buffered(loop):
    # Copied pieces that straddle the buffer's blocks while its list of
    # pieces keeps growing: each must land whole and in order.
    data = payload(3000 * 10007)
    pieces = [bytearray(data[i : i + 10007]) for i in range(0, len(data), 10007)]

    async def main():
        tr, proto, peer = await _pair(loop)
        filled = await _fill(tr)
        for i, piece in enumerate(pieces):
            if i % 2:
                tr.write(piece)
            else:
                tr.writelines([piece[:5000], piece[5000:]])
        tr.write_eof()
        received = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return received[filled:]

    assert loop.run_until_complete(main()) == data


@pytest.mark.parametrize("how", ["write", "writelines"])
def test_bytearray_mutated_after_buffered_write(loop, loop_name, how):
    original = payload(256 * 1024)

    async def main():
        tr, proto, peer = await _pair(loop)
        filled = await _fill(tr)
        data = bytearray(original)
        small = bytearray(b"small")
        if how == "write":
            tr.write(data)
            tr.write(small)
        else:
            tr.writelines([data, small])
        data[:] = b"X" * len(data)
        small[:] = b"SMALL"
        tr.write_eof()
        received = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return received[filled:]

    received = loop.run_until_complete(main())
    if loop_name == "asyncio" and PY >= (3, 12):
        # asyncio 3.12 and 3.13 keep a buffered bytearray by reference (their
        # buffer is a deque of the objects written), so a later mutation
        # reaches the stream. zloop snapshots it, as 3.11's copying buffer
        # does: what write() was given is what is sent.
        assert received == b"X" * len(original) + b"SMALL"
    else:
        assert received == original + b"small"


def test_huge_bytes_written_while_buffered(loop):
    huge = payload(32 * MB)

    async def main():
        tr, proto, peer = await _pair(loop)
        filled = await _fill(tr)
        tr.write(b"head")
        tr.write(huge)
        tr.write(memoryview(huge)[MB : 3 * MB])
        tr.write(b"tail")
        size = tr.get_write_buffer_size()
        tr.write_eof()
        data = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return filled, size, data

    filled, size, data = loop.run_until_complete(main())
    expected = b"head" + huge + huge[MB : 3 * MB] + b"tail"
    assert size >= len(expected)
    assert len(data) == filled + len(expected)
    assert data[filled:] == expected


def test_abort_releases_held_references(loop, loop_name):
    # Buffered bytes are held by reference (zloop: a long bytes, or a
    # memoryview of one; asyncio 3.12+: every write); abort() drops them.
    big = payload(4 * MB)
    base = bytes(payload(2 * MB))
    view = memoryview(base)[100:]

    async def main():
        tr, proto, peer = await _pair(loop)
        before = sys.getrefcount(big), sys.getrefcount(base)
        await _fill(tr)
        tr.write(big)
        tr.writelines([big, view, b"small"])
        held = sys.getrefcount(big) - before[0], sys.getrefcount(base) - before[1]
        tr.abort()
        assert tr.get_write_buffer_size() == 0
        await wait_for(proto.lost)
        peer.close()
        del tr, proto
        gc.collect()
        return before, held, (sys.getrefcount(big), sys.getrefcount(base))

    before, held, after = loop.run_until_complete(main())
    view.release()
    assert after == before
    if loop_name == "zloop":
        assert held == (2, 1)


def test_close_flushes_mixed_buffers(loop):
    big = payload(3 * MB)
    mutable = bytearray(payload(MB + 5))

    async def main():
        tr, proto, peer = await _pair(loop)
        filled = await _fill(tr)
        tr.write(b"a")
        tr.write(big)
        tr.write(mutable)
        tr.writelines([b"b", memoryview(big)[5:70000], bytearray(b"c"), big[:20000]])
        tr.write(memoryview(mutable)[:10])
        tr.close()
        assert tr.is_closing()
        data = await _read(loop, peer)
        assert await wait_for(proto.lost) is None
        peer.close()
        return filled, data

    filled, data = loop.run_until_complete(main())
    expected = (
        b"a" + big + mutable + b"b" + big[5:70000] + b"c" + big[:20000] + mutable[:10]
    )
    assert data == b"\0" * filled + expected


def test_get_write_buffer_size_is_exact(loop):
    async def main():
        tr, proto, peer = await _pair(loop)
        filled = await _fill(tr)
        sizes = [tr.get_write_buffer_size()]
        for data in (b"x", payload(40000), bytearray(100), memoryview(payload(MB))[1:]):
            tr.write(data)
            sizes.append(tr.get_write_buffer_size())
        tr.writelines([b"12", memoryview(b""), bytearray(30000)])
        sizes.append(tr.get_write_buffer_size())
        total = filled + (sizes[-1] - sizes[0])
        received = await _read(loop, peer, total)
        await asyncio.sleep(0)
        while tr.get_write_buffer_size():
            await asyncio.sleep(0.01)
        await _finish(tr, proto, peer)
        return sizes, len(received), total

    sizes, received, total = loop.run_until_complete(main())
    steps = [b - a for a, b in zip(sizes, sizes[1:])]
    assert steps == [1, 40000, 100, MB - 1, 30002]
    assert received == total


def test_write_eof_after_vectored_buffered_data(loop):
    items, expected = _items(500)

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.writelines(items)
        assert tr.get_write_buffer_size() > 0
        tr.write_eof()
        with pytest.raises(RuntimeError):
            tr.write(b"x")
        data = await _read(loop, peer)
        # Half-closed only: the peer can still answer.
        peer.send(b"reply")
        reply = await wait_for(proto.received(5))
        await _finish(tr, proto, peer)
        return data, reply

    data, reply = loop.run_until_complete(main())
    assert data == expected and reply == b"reply"


def test_writelines_flow_control(loop, loop_name):
    items, expected = _items(100)

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.writelines(items)
        paused_by_writelines = proto.paused.done()
        tr.write(b"!")
        assert await wait_for(proto.paused) > 64 * 1024
        data = await _read(loop, peer, len(expected) + 1)
        assert await wait_for(proto.resumed) <= 16 * 1024
        await _finish(tr, proto, peer)
        return paused_by_writelines, data

    paused_by_writelines, data = loop.run_until_complete(main())
    assert data == expected + b"!"
    # asyncio 3.12 and 3.13's writelines() never calls pause_writing (only
    # the next write() does); 3.11's joined write(), 3.14's writelines()
    # and zloop do.
    assert paused_by_writelines == (loop_name == "zloop" or not (3, 12) <= PY < (3, 14))


# Write coalescing (zloop): a callback's small writes are held and sent
# together when it returns, or earlier when the transport is asked about
# its write side. Each case checks that what a program can see is what
# asyncio shows, which sends in write() itself.


def _recv_now(peer, size=65536):
    """What the peer can read right now, without waiting (b"" if nothing)."""
    try:
        return peer.recv(size)
    except BlockingIOError:
        return b""


def test_writes_of_one_callback_arrive_in_order(loop):
    # More writes than zloop holds, of every type, some held, some not.
    parts = [b"a", b"bc", bytearray(b"de"), b"f", memoryview(b"gh"), b"i", b"jk", b"l",
             b"m" * 20000, b"n"]

    async def main():
        tr, proto, peer = await _pair(loop)
        for part in parts:
            tr.write(part)
        data = await _read(loop, peer, sum(len(p) for p in parts))
        await _finish(tr, proto, peer)
        return data

    assert loop.run_until_complete(main()) == b"".join(parts)


def test_held_writes_go_out_when_the_write_side_is_asked(loop):
    # Within one callback: each question about the write side answers as
    # asyncio does, and the bytes are on the wire by then.
    asks = {
        "get_write_buffer_size": lambda tr: tr.get_write_buffer_size(),
        "is_closing": lambda tr: tr.is_closing(),
        "set_write_buffer_limits": lambda tr: tr.set_write_buffer_limits(),
        "writelines": lambda tr: tr.writelines([b"!"]),
        "write_eof": lambda tr: tr.write_eof(),
    }

    async def main():
        tr, proto, peer = await _pair(loop)
        seen = {}
        for name, ask in asks.items():
            tr.write(name.encode())
            answer = ask(tr)
            seen[name] = (answer, _recv_now(peer))
        await _finish(tr, proto, peer)
        return seen

    seen = loop.run_until_complete(main())
    assert seen == {
        "get_write_buffer_size": (0, b"get_write_buffer_size"),
        "is_closing": (False, b"is_closing"),
        "set_write_buffer_limits": (None, b"set_write_buffer_limits"),
        "writelines": (None, b"writelines!"),
        "write_eof": (None, b"write_eof"),
    }


def test_write_then_drain_reaches_a_blocking_peer(loop):
    # StreamWriter.drain() does not yield when nothing is buffered; the
    # bytes must be sent by then (a test blocking on its peer right after
    # drain() would hang otherwise).
    async def main():
        mine, peer = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=mine)
        writer.write(b"ping")
        await writer.drain()
        peer.settimeout(5)
        got = peer.recv(16)
        writer.close()
        await wait_for(writer.wait_closed())
        peer.close()
        return got

    assert loop.run_until_complete(main()) == b"ping"


def test_abort_after_write_sends_what_was_written(loop):
    async def main():
        tr, proto, peer = await _pair(loop)
        tr.write(b"last words")
        tr.abort()
        assert await wait_for(proto.lost) is None
        data = await _read(loop, peer)
        peer.close()
        return data

    assert loop.run_until_complete(main()) == b"last words"


def test_close_after_write_sends_what_was_written(loop):
    async def main():
        tr, proto, peer = await _pair(loop)
        tr.write(b"one ")
        tr.write(b"two")
        tr.close()
        tr.write(b" dropped")  # after close(): counted as lost, never sent
        data = await _read(loop, peer)
        assert await wait_for(proto.lost) is None
        peer.close()
        return data

    assert loop.run_until_complete(main()) == b"one two"


def test_the_raw_socket_comes_after_earlier_writes(loop):
    async def main():
        tr, proto, peer = await _pair(loop)
        tr.write(b"first ")
        sock = tr.get_extra_info("socket")
        os.write(sock.fileno(), b"second")
        data = await _read(loop, peer, 12)
        await _finish(tr, proto, peer)
        return data

    assert loop.run_until_complete(main()) == b"first second"


@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_a_callback_that_raises_after_writing_still_sends(loop, exc_type):
    errors = []
    loop.set_exception_handler(lambda loop, ctx: errors.append(ctx.get("exception")))
    ends = {}

    def write_and_raise(tr):
        tr.write(b"sent anyway")
        raise exc_type("boom")

    async def main():
        ends["tr"], ends["proto"], ends["peer"] = await _pair(loop)
        loop.call_soon(write_and_raise, ends["tr"])
        await asyncio.sleep(0.05)

    if exc_type is KeyboardInterrupt:
        # The loop stops inside the callback; its write goes out anyway.
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(main())
    else:
        loop.run_until_complete(main())
        assert [type(e) for e in errors] == [RuntimeError]
    peer = ends["peer"]
    peer.settimeout(5)
    assert peer.recv(64) == b"sent anyway"
    ends["tr"].abort()
    loop.run_until_complete(asyncio.sleep(0.01))
    peer.close()


def test_writes_outside_a_running_loop_go_out_at_once(loop):
    async def main():
        return await _pair(loop)

    tr, proto, peer = loop.run_until_complete(main())
    tr.write(b"not running")
    got = _recv_now(peer)
    loop.run_until_complete(_finish(tr, proto, peer))
    assert got == b"not running"


def test_pause_writing_comes_from_the_write_that_crosses_the_mark(loop):
    # Small writes in one callback until the protocol is paused: the pause
    # must come from inside a write() call, as on asyncio, or this loops
    # forever (the socket is a socketpair nobody reads).
    async def main():
        tr, proto, peer = await _pair(loop)
        calls = 0
        while not proto.paused.done():
            tr.write(b"x" * 1000)
            calls += 1
            assert calls < 100_000
        size = tr.get_write_buffer_size()
        high = tr.get_write_buffer_limits()[1]
        tr.abort()
        await wait_for(proto.lost)
        peer.close()
        return size, high

    size, high = loop.run_until_complete(main())
    assert high < size <= high + 1000


def test_small_writes_are_held_until_the_callback_returns(loop, loop_name):
    # The one difference a program can see (docs/compat.md): within the
    # callback that wrote them, zloop has not sent a few small writes yet.
    async def main():
        tr, proto, peer = await _pair(loop)
        tr.write(b"head ")
        tr.write(b"body")
        during = _recv_now(peer)
        await asyncio.sleep(0)
        after = during + _recv_now(peer)
        big = payload(20000)  # over what zloop holds: sent in write()
        tr.write(big)
        sent_at_once = _recv_now(peer)
        await _finish(tr, proto, peer)
        return during, after, sent_at_once == big

    during, after, sent_at_once = loop.run_until_complete(main())
    assert after == b"head body"
    assert during == (b"" if loop_name == "zloop" else b"head body")
    assert sent_at_once


def test_a_write_from_resume_writing_while_closing_is_delivered(loop):
    # close() waits for the buffer to drain; resume_writing() runs from
    # that drain, and what it writes joins the buffer (asyncio's write()
    # does not check for closing), so it goes out before the connection
    # ends. (zloop once held it, then dropped it with the connection;
    # test_asyncio's test_ssl test_remote_shutdown_receives_trailing_data
    # hung on that.)
    class Tail(RecordingProtocol):
        def resume_writing(self):
            super().resume_writing()
            self.transport.write(b"tail")

    async def main():
        mine, peer = socket.socketpair()
        peer.setblocking(False)
        tr, proto = await loop.create_connection(lambda: Tail(loop), sock=mine)
        await wait_for(proto.made)
        filled = 0
        while not proto.paused.done():
            tr.write(b"\1" * 65536)
            filled += 65536
        tr.close()
        data = await _read(loop, peer)
        assert await wait_for(proto.lost) is None
        peer.close()
        return filled, data

    filled, data = loop.run_until_complete(main())
    assert data == b"\1" * filled + b"tail"


@pytest.mark.parametrize("items", [[b"data", b""], [b""], [b"", b"data", b"", b""]])
def test_writelines_with_empty_chunks_then_write_eof(loop, loop_name, items):
    # Empty chunks write nothing and hold nothing back: the EOF that
    # follows reaches the peer.
    if loop_name == "asyncio" and (3, 12) <= PY < (3, 14):
        # 3.12's vectored writelines() queues the chunks and takes sent bytes
        # off the front; a trailing empty chunk is never taken off, so its
        # writer stays registered, sends nothing on every pass, and the
        # shutdown write_eof() leaves for it never happens (gh-155888: 3.14
        # skips empty chunks).
        pytest.skip("asyncio 3.12+ keeps a trailing empty writelines() chunk queued forever")

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.writelines(items)
        assert tr.get_write_buffer_size() == 0
        tr.write_eof()
        data = await _read(loop, peer)
        await _finish(tr, proto, peer)
        return data

    assert loop.run_until_complete(main()) == b"".join(items)


def test_writelines_on_a_closed_transport_is_dropped_as_write_is(loop, loop_name):
    # After close() (nothing buffered), what writelines() is given is
    # dropped, as write() drops it: no exception, nothing reaches the peer.
    if loop_name == "asyncio" and (3, 12) <= PY < (3, 14):
        # 3.12's close() clears the method its vectored writelines() calls
        # (3.14 drops the call on a closed transport before reaching it).
        pytest.skip("asyncio 3.12+ raises TypeError from writelines() after close()")

    async def main():
        tr, proto, peer = await _pair(loop)
        tr.write(b"before")
        await asyncio.sleep(0.01)
        tr.close()
        tr.writelines([b"after", b" close"])
        data = await _read(loop, peer)
        assert await wait_for(proto.lost) is None
        peer.close()
        return data

    assert loop.run_until_complete(main()) == b"before"


async def _served_and_reset(loop):
    """A served connection whose peer reset it while the transport did not
    read: (server, transport, protocol). The next send fails."""
    server_side = loop.create_future()

    def factory():
        proto = RecordingProtocol(loop)
        server_side.set_result(proto)
        return proto

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    peer = socket.create_connection(("127.0.0.1", port))
    proto = await wait_for(server_side)
    await wait_for(proto.made)
    proto.transport.pause_reading()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()
    await asyncio.sleep(0.05)
    return server, proto.transport, proto


@pytest.mark.parametrize("then", ["close", "write_eof", "abort", "nothing"])
def test_a_write_to_a_reset_peer_ends_the_connection_once(loop, then):
    # write() fails on asyncio (zloop: the held write's send, made by the
    # method that follows or when the callback returns): connection_lost
    # comes once, with the reset, whatever is called next.
    async def main():
        server, tr, proto = await _served_and_reset(loop)

        def write_then():
            tr.write(b"to nobody")
            if then != "nothing":
                getattr(tr, then)()

        loop.call_soon(write_then)
        exc = await wait_for(proto.lost)
        await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()
        return exc, proto.events.count("lost")

    exc, lost = loop.run_until_complete(main())
    assert lost == 1
    # What the send met, also on io_uring, whose cancelled receive took the
    # reset from the socket before the send: the reset on Linux, EPIPE on
    # macOS and FreeBSD (reset_send_errno).
    assert isinstance(exc, OSError) and exc.errno == reset_send_errno(), exc


# Held writes: a loop that stops right after writing, a held send that
# finds the socket full, and many connections written in one pass must
# each end as a send() inside write() ends on asyncio.


def test_held_writes_reach_a_blocking_peer_once_the_loop_stops(loop):
    # run_until_complete() returns with the callback's writes on the wire:
    # the caller's blocking recv() must not wait on a loop that is stopped.
    async def main():
        tr, proto, peer = await _pair(loop)
        tr.write(b"held ")
        tr.write(b"then stopped")
        return tr, proto, peer

    tr, proto, peer = loop.run_until_complete(main())
    peer.setblocking(True)
    peer.settimeout(5)
    got = b""
    while len(got) < 17:
        got += peer.recv(64)
    peer.setblocking(False)
    loop.run_until_complete(_finish(tr, proto, peer))
    assert got == b"held then stopped"


def test_small_writes_from_many_callbacks_to_a_slow_reader(loop):
    # Each callback writes one held chunk until the socket is full: the
    # send that finds it full (short, or none at all) leaves its rest
    # buffered, ahead of every later write. Byte for byte, in order.
    data = payload(3 * MB + 123)
    chunks = [data[i:i + 7000] for i in range(0, len(data), 7000)]

    async def main():
        tr, proto, peer = await _pair(loop)
        done = loop.create_future()

        def write_next(i):
            if i == len(chunks):
                done.set_result(None)
                return
            tr.write(chunks[i])
            loop.call_soon(write_next, i + 1)

        loop.call_soon(write_next, 0)
        got = await _read(loop, peer, len(data))
        await wait_for(done)
        await _finish(tr, proto, peer)
        return got

    assert loop.run_until_complete(main()) == data


def test_writes_on_many_connections_in_one_pass(loop):
    # Each connection's held write, from callbacks of the same pass, gets
    # its own bytes to its own peer.
    count = 150

    async def main():
        pairs = [await _pair(loop) for _ in range(count)]
        for i, (tr, _, _) in enumerate(pairs):
            loop.call_soon(tr.write, b"%d:" % i + payload(100 + i))
        got = []
        for i, (tr, proto, peer) in enumerate(pairs):
            got.append(await _read(loop, peer, len(b"%d:" % i) + 100 + i))
        for tr, proto, peer in pairs:
            await _finish(tr, proto, peer)
        return got

    got = loop.run_until_complete(main())
    assert got == [b"%d:" % i + payload(100 + i) for i in range(count)]

