"""The loop.sock_* coroutines on raw non-blocking sockets (issue 3)."""

import asyncio
import errno
import gc
import socket

import pytest

from _net import payload, unused_tcp_port, wait_for
from _support import open_fds, yield_passes

pytestmark = pytest.mark.network

HOST = "127.0.0.1"


def _nonblocking(sock):
    sock.setblocking(False)
    return sock


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield _nonblocking(a), _nonblocking(b)
    a.close()
    b.close()


@pytest.fixture
def listener():
    sock = _nonblocking(socket.create_server((HOST, 0)))
    yield sock
    sock.close()


def test_sock_sendall_and_recv(loop, pair):
    a, b = pair

    async def main():
        await loop.sock_sendall(a, b"ping")
        return await wait_for(loop.sock_recv(b, 100))

    assert loop.run_until_complete(main()) == b"ping"


def test_sock_recv_into(loop, pair):
    a, b = pair
    buf = bytearray(10)

    async def main():
        await loop.sock_sendall(a, b"12345")
        return await wait_for(loop.sock_recv_into(b, buf))

    assert loop.run_until_complete(main()) == 5
    assert bytes(buf[:5]) == b"12345"


def test_sock_recv_waits_for_data(loop, pair):
    a, b = pair

    async def main():
        pending = loop.create_task(loop.sock_recv(b, 100))
        await yield_passes(5)
        assert not pending.done()
        a.send(b"late")
        return await wait_for(pending)

    assert loop.run_until_complete(main()) == b"late"


def test_sock_recv_returns_empty_at_eof(loop, pair):
    a, b = pair

    async def main():
        a.shutdown(socket.SHUT_WR)
        return await wait_for(loop.sock_recv(b, 100))

    assert loop.run_until_complete(main()) == b""


def test_sock_recv_of_nothing_returns_at_once(loop, pair):
    # socket.recv(0) returns b"" without asking the kernel (which would
    # say EAGAIN on an empty socket): sock_recv(sock, 0) does not wait for
    # data either, and leaves what comes later for the next receive.
    a, b = pair

    async def main():
        empty = await wait_for(loop.sock_recv(b, 0), 1)
        a.send(b"later")
        return empty, await wait_for(loop.sock_recv(b, 100))

    assert loop.run_until_complete(main()) == (b"", b"later")


def test_sock_recv_sizes_after_waits_of_other_sizes(loop, pair):
    # Receives of different sizes that first find nothing, one after
    # another: each returns at most its size, exactly what arrived, and
    # results already returned keep their content.
    a, b = pair

    async def one(n, message):
        pending = loop.create_task(loop.sock_recv(b, n))
        await yield_passes(2)  # the first try finds nothing; it waits
        a.send(message)
        return await wait_for(pending)

    cases = [(1_000_000, b"x" * 1000), (10, b"0123456789abc"),
             (2_000_000, b"y" * 70_000), (1, b"z"), (65536, b"w" * 5)]

    async def main():
        got = []
        for n, message in cases:
            chunk = await one(n, message)
            received = bytearray()
            while True:
                assert 0 < len(chunk) <= n
                received += chunk
                if len(received) >= len(message):
                    break
                chunk = await wait_for(loop.sock_recv(b, n))
            assert len(received) == len(message)
            got.append(bytes(received))
        return got

    assert loop.run_until_complete(main()) == [message for _, message in cases]


def test_large_sock_sendall_with_a_concurrent_reader(loop, pair):
    a, b = pair
    data = payload(4 * 1024 * 1024)

    async def reader():
        chunks = []
        total = 0
        while total < len(data):
            chunk = await loop.sock_recv(b, 65536)
            assert chunk, "unexpected EOF"
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)

    async def main():
        read = loop.create_task(reader())
        await wait_for(loop.sock_sendall(a, data))
        return await wait_for(read)

    assert loop.run_until_complete(main()) == data


def test_cancelled_sock_recv_leaves_the_socket_usable(loop, pair):
    a, b = pair

    async def main():
        pending = loop.create_task(loop.sock_recv(b, 100))
        await yield_passes(2)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        a.send(b"after cancel")
        return await wait_for(loop.sock_recv(b, 100))

    assert loop.run_until_complete(main()) == b"after cancel"


def test_sock_connect_and_sock_accept(loop, listener):
    async def main():
        client = _nonblocking(socket.socket())
        try:
            accepting = loop.create_task(loop.sock_accept(listener))
            await wait_for(loop.sock_connect(client, listener.getsockname()))
            conn, addr = await wait_for(accepting)
            with conn:
                info = {
                    "addr": addr,
                    "conn nonblocking": conn.getblocking() is False,
                    "peer": conn.getpeername(),
                }
                await loop.sock_sendall(conn, b"from server")
                info["got"] = await wait_for(loop.sock_recv(client, 100))
            return info, client.getsockname()
        finally:
            client.close()

    info, client_addr = loop.run_until_complete(main())
    assert info == {
        "addr": client_addr,
        "conn nonblocking": True,
        "peer": client_addr,
        "got": b"from server",
    }


def test_sock_connect_resolves_localhost(loop, listener):
    port = listener.getsockname()[1]

    async def main():
        with _nonblocking(socket.socket()) as client:
            await wait_for(loop.sock_connect(client, ("localhost", port)))
            return client.getpeername()

    assert loop.run_until_complete(main()) == (HOST, port)


def test_sock_connect_refused(loop):
    port = unused_tcp_port()

    async def main():
        with _nonblocking(socket.socket()) as client:
            with pytest.raises(ConnectionRefusedError) as info:
                await wait_for(loop.sock_connect(client, (HOST, port)))
            return info.value.errno

    assert loop.run_until_complete(main()) == errno.ECONNREFUSED


@pytest.mark.parametrize("method", ["sock_recv", "sock_recv_into"])
def test_cancelled_recv_does_not_remove_the_next_recvs_watcher(loop, pair, method):
    # uvloop's test_sock_cancel_add_reader_race: a cancelled sock_recv's
    # clean-up runs a pass later, after a new sock_recv on the same socket has
    # put its own watcher in place; that watcher must survive, or the new
    # call never wakes.
    a, b = pair

    def recv():
        if method == "sock_recv":
            return getattr(loop, method)(a, 1)
        buf = bytearray(1)

        async def into():
            n = await loop.sock_recv_into(a, buf)
            return bytes(buf[:n])

        return into()

    async def send_later():
        await yield_passes(3)
        b.send(b"1")

    async def main():
        first = asyncio.ensure_future(recv())
        await yield_passes(2)
        first.cancel()
        sender = asyncio.ensure_future(send_later())
        # Awaited in this step, so the new watcher is in place before the
        # cancelled call's clean-up runs.
        async with asyncio.timeout(5):
            data = await recv()
        await sender
        return data

    assert loop.run_until_complete(main()) == b"1"


def test_sock_sendto_retries_through_the_sockets_current_method(loop):
    # test_asyncio's test_sendto_blocking: the first sendto() would block,
    # and the retry must call the socket's sendto as it is by then (asyncio
    # looks it up at each attempt), not the one bound at the first.
    from unittest import mock

    async def main():
        with _nonblocking(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as rx, \
                _nonblocking(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as tx:
            rx.bind((HOST, 0))
            fake = mock.Mock(tx)
            fake.gettimeout = tx.gettimeout
            fake.fileno = tx.fileno
            fake.sendto.configure_mock(side_effect=BlockingIOError)
            loop.call_soon(setattr, fake, "sendto", tx.sendto)
            await wait_for(loop.sock_sendto(fake, b"x" * 64, rx.getsockname()))
            data, _ = await wait_for(loop.sock_recvfrom(rx, 100))
            return data

    assert loop.run_until_complete(main()) == b"x" * 64


def test_sock_connect_error_is_not_kept_alive_by_its_future(loop):
    # anyio's test_happy_eyeballs_refcycles: once sock_connect has raised,
    # nothing but the caller refers to the exception (no frame -> future ->
    # exception cycle left for the garbage collector).
    import gc

    port = unused_tcp_port()
    caught = []

    async def main():
        with _nonblocking(socket.socket()) as client:
            try:
                # Not through wait_for: its frames would hide the cycle.
                await loop.sock_connect(client, (HOST, port))
            except ConnectionRefusedError as e:
                caught.append(e)

    loop.run_until_complete(main())
    exc = caught.pop()
    assert [r for r in gc.get_referrers(exc) if isinstance(r, asyncio.Future)] == []


@pytest.mark.parametrize(
    "method", ["sock_recv", "sock_recv_into", "sock_sendall", "sock_connect", "sock_accept"]
)
def test_blocking_sockets_are_refused_in_debug_mode(loop, method):
    # asyncio checks this only in debug mode (outside it, a blocking socket
    # just blocks the loop).
    loop.set_debug(True)
    sock = socket.socket()
    try:
        assert sock.getblocking()
        args = {
            "sock_recv": (sock, 1),
            "sock_recv_into": (sock, bytearray(1)),
            "sock_sendall": (sock, b"x"),
            "sock_connect": (sock, (HOST, 1)),
            "sock_accept": (sock,),
        }[method]

        async def main():
            with pytest.raises(ValueError) as info:
                await getattr(loop, method)(*args)
            return str(info.value)

        assert loop.run_until_complete(main()) == "the socket must be non-blocking"
    finally:
        sock.close()


def test_sock_sendall_empty_data(loop, pair):
    a, b = pair

    async def main():
        assert await loop.sock_sendall(a, b"") is None
        await loop.sock_sendall(a, b"x")
        return await wait_for(loop.sock_recv(b, 10))

    assert loop.run_until_complete(main()) == b"x"


def test_sock_sendall_to_a_reset_peer_raises(loop):
    a, b = socket.socketpair()
    _nonblocking(a)
    b.close()

    async def main():
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(100):
                await wait_for(loop.sock_sendall(a, b"x" * 65536))

    try:
        loop.run_until_complete(main())
    finally:
        a.close()


def test_udp_sock_sendto_and_recvfrom(loop):
    async def main():
        with _nonblocking(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as rx, _nonblocking(
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        ) as tx:
            rx.bind((HOST, 0))
            tx.bind((HOST, 0))
            sent = await loop.sock_sendto(tx, b"datagram", rx.getsockname())
            data, addr = await wait_for(loop.sock_recvfrom(rx, 100))
            buf = bytearray(100)
            await loop.sock_sendto(tx, b"into", rx.getsockname())
            nbytes, addr2 = await wait_for(loop.sock_recvfrom_into(rx, buf))
            return sent, data, addr == tx.getsockname(), bytes(buf[:nbytes]), addr2 == addr

    assert loop.run_until_complete(main()) == (8, b"datagram", True, b"into", True)


def test_sock_sendfile(loop, pair, tmp_path):
    a, b = pair
    data = payload(200_000)
    path = tmp_path / "blob"
    path.write_bytes(data)

    async def reader(size):
        chunks = []
        while sum(map(len, chunks)) < size:
            chunks.append(await loop.sock_recv(b, 65536))
        return b"".join(chunks)

    async def main():
        read = loop.create_task(reader(150_000))
        with open(path, "rb") as f:
            sent = await wait_for(loop.sock_sendfile(a, f, offset=50_000, count=150_000))
            position = f.tell()
        return sent, position, await wait_for(read)

    sent, position, got = loop.run_until_complete(main())
    assert (sent, position) == (150_000, 200_000)
    assert got == data[50_000:200_000]


def test_sock_sendfile_whole_file(loop, pair, tmp_path):
    a, b = pair
    data = payload(70_000)
    path = tmp_path / "blob"
    path.write_bytes(data)

    async def main():
        async def reader():
            chunks = []
            while sum(map(len, chunks)) < len(data):
                chunks.append(await loop.sock_recv(b, 65536))
            return b"".join(chunks)

        read = loop.create_task(reader())
        with open(path, "rb") as f:
            sent = await wait_for(loop.sock_sendfile(a, f))
        return sent, await wait_for(read)

    assert loop.run_until_complete(main()) == (len(data), data)


def test_sock_operations_leave_no_descriptors(loop, listener):
    async def main():
        for _ in range(10):
            client = _nonblocking(socket.socket())
            accepting = loop.create_task(loop.sock_accept(listener))
            await wait_for(loop.sock_connect(client, listener.getsockname()))
            conn, _ = await wait_for(accepting)
            await loop.sock_sendall(client, b"x")
            assert await wait_for(loop.sock_recv(conn, 1)) == b"x"
            conn.close()
            client.close()

    loop.run_until_complete(main())
    before = open_fds()
    loop.run_until_complete(main())
    assert open_fds() - before == set()


# -- waits that follow each other on one fd (zloop keeps a finished wait's
# -- kernel entry, disarmed, for the next one: these pin what must not change)


def test_a_recv_on_a_reused_fd_number_sees_the_new_socket(loop):
    """A wait finished on a socket, the socket closed and its fd number
    taken by a new one: the new socket's wait must see its own data."""

    async def one_exchange():
        a, b = (_nonblocking(s) for s in socket.socketpair())
        try:
            fd = b.fileno()
            loop.call_later(0.01, a.send, b"x")
            assert await wait_for(loop.sock_recv(b, 10)) == b"x"
            return fd
        finally:
            a.close()
            b.close()

    async def main():
        return [await one_exchange() for _ in range(5)]

    fds = loop.run_until_complete(main())
    assert len(set(fds)) == 1  # the same number each time: the case under test


def test_a_transport_takes_over_a_socket_after_sock_waits(loop):
    """sock_connect (a wait for writability) then a transport on that
    socket, and a transport after a finished sock_recv wait."""
    received = []

    class Collect(asyncio.Protocol):
        def data_received(self, data):
            received.append(data)

    async def main():
        a, b = (_nonblocking(s) for s in socket.socketpair())
        loop.call_later(0.01, a.send, b"first")
        assert await wait_for(loop.sock_recv(b, 10)) == b"first"
        transport, _ = await loop.connect_accepted_socket(Collect, b)
        a.send(b"second")
        for _ in range(100):
            if received:
                break
            await asyncio.sleep(0.01)
        transport.close()
        a.close()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert b"".join(received) == b"second"


def test_add_reader_right_after_a_finished_recv(loop, pair):
    a, b = pair

    async def main():
        loop.call_later(0.01, a.send, b"1")
        assert await wait_for(loop.sock_recv(b, 10)) == b"1"
        got = loop.create_future()
        loop.add_reader(b.fileno(), lambda: got.done() or got.set_result(b.recv(10)))
        try:
            a.send(b"2")
            return await wait_for(got)
        finally:
            assert loop.remove_reader(b.fileno())

    assert loop.run_until_complete(main()) == b"2"
    assert not loop.remove_reader(b.fileno())


def test_concurrent_recv_and_sendall_waits_on_one_socket(loop, pair):
    """A socket with both a reader and a writer waiting: one side's event
    must not lose the other side's wait."""
    a, b = pair
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    data = payload(4 * 1024 * 1024)

    async def drain_later():
        await asyncio.sleep(0.05)
        a.send(b"hello")  # wakes the reader while the writer still waits
        await asyncio.sleep(0.05)
        got = bytearray()
        while len(got) < len(data):
            chunk = await loop.sock_recv(a, 1 << 20)
            assert chunk
            got += chunk
        return bytes(got)

    async def main():
        recv = loop.create_task(loop.sock_recv(b, 10))
        send = loop.create_task(loop.sock_sendall(b, data))
        got = await wait_for(drain_later())
        assert await wait_for(recv) == b"hello"
        await wait_for(send)
        return got

    assert loop.run_until_complete(main()) == data


def test_a_cancelled_wait_stops_watching_at_once(loop, pair):
    a, b = pair

    async def main():
        task = loop.create_task(loop.sock_recv(b, 10))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Nothing watches b any more: a reader added now is the only one.
        assert not loop.remove_reader(b.fileno())
        a.send(b"after")
        return await wait_for(loop.sock_recv(b, 10))

    assert loop.run_until_complete(main()) == b"after"


# sock_recv and sock_sendall return coroutines (zloop's are native ones):
# nothing happens until they are awaited, and they take asyncio's ways of
# driving a coroutine (tasks, wait_for, send/throw/close, keywords).


def test_sock_recv_and_sendall_do_nothing_until_awaited(loop, pair):
    a, b = pair
    recv = loop.sock_recv(b, 10)
    send = loop.sock_sendall(a, b"unsent")
    assert asyncio.iscoroutine(recv) and asyncio.iscoroutine(send)
    a.send(b"queued")
    recv.close()
    send.close()
    assert b.recv(100) == b"queued"  # neither read nor sent anything
    with pytest.raises(BlockingIOError):
        b.recv(100)


def test_sock_coroutines_take_keyword_arguments(loop, pair):
    a, b = pair

    async def main():
        await loop.sock_sendall(sock=a, data=b"kw")
        return await wait_for(loop.sock_recv(sock=b, n=10))

    assert loop.run_until_complete(main()) == b"kw"
    with pytest.raises(TypeError):
        loop.sock_recv(b)
    with pytest.raises(TypeError):
        loop.sock_sendall(a, b"x", data=b"y")


def test_a_sock_coroutine_cannot_be_awaited_twice(loop, pair):
    a, b = pair

    async def main():
        coro = loop.sock_sendall(a, b"once")
        await coro
        with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
            await coro
        return await wait_for(loop.sock_recv(b, 10))

    assert loop.run_until_complete(main()) == b"once"


def test_sock_recv_runs_as_a_task_and_under_wait_for(loop, pair):
    a, b = pair

    async def main():
        task = loop.create_task(loop.sock_recv(b, 10))
        await yield_passes(2)
        assert not task.done()
        a.send(b"task")
        assert await wait_for(task) == b"task"
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(loop.sock_recv(b, 10), 0.01)
        a.send(b"after timeout")
        return await wait_for(loop.sock_recv(b, 100))

    assert loop.run_until_complete(main()) == b"after timeout"


def test_throw_into_a_waiting_sock_recv_raises_it_and_leaves_the_socket_usable(loop, pair):
    a, b = pair

    async def main():
        coro = loop.sock_recv(b, 10)
        fut = coro.send(None)  # would block: it yields the future it waits on
        assert asyncio.isfuture(fut) and not fut.done()
        with pytest.raises(ValueError, match="thrown"):
            coro.throw(ValueError("thrown"))
        with pytest.raises(RuntimeError):
            coro.send(None)
        a.send(b"next")
        return await wait_for(loop.sock_recv(b, 10))

    assert loop.run_until_complete(main()) == b"next"


def test_a_collected_waiting_sock_recv_leaves_the_socket_usable(loop, pair):
    a, b = pair

    async def main():
        coro = loop.sock_recv(b, 10)
        coro.send(None)
        del coro
        gc.collect()
        await yield_passes(1)
        a.send(b"later")
        return await wait_for(loop.sock_recv(b, 10))

    assert loop.run_until_complete(main()) == b"later"


@pytest.mark.parametrize("method", ["sock_recv", "sock_sendall"])
def test_sock_coroutines_on_a_closed_socket_raise_ebadf(loop, method):
    sock = socket.socket()
    sock.setblocking(False)
    sock.close()
    arg = 10 if method == "sock_recv" else b"x"

    async def main():
        with pytest.raises(OSError) as info:
            await getattr(loop, method)(sock, arg)
        return info.value.errno

    assert loop.run_until_complete(main()) == errno.EBADF


def test_sock_sendall_refuses_a_str(loop, pair):
    a, _ = pair

    async def main():
        with pytest.raises(TypeError):
            await loop.sock_sendall(a, "text")

    loop.run_until_complete(main())


def test_driving_sock_coroutines_by_hand(loop, pair):
    a, b = pair

    async def main():
        with pytest.raises(StopIteration) as sent:
            loop.sock_sendall(a, b"by hand").send(None)
        assert sent.value.value is None
        await yield_passes(1)
        recv = loop.sock_recv(b, 100)
        with pytest.raises(StopIteration) as received:
            recv.send(None)
        assert received.value.value == b"by hand"
        with pytest.raises(RuntimeError):
            next(recv.__await__())

    loop.run_until_complete(main())


def test_a_sock_coroutine_refuses_a_value_before_it_starts(loop, pair):
    a, _ = pair
    coro = loop.sock_sendall(a, b"x")
    with pytest.raises(TypeError, match="just-started coroutine"):
        coro.send(1)
    coro.close()
