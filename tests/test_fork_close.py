"""A fork child that closes the loop it inherited.

Worker hooks and multiprocessing children close the loop they inherit (or
drop it, and its ``__del__`` closes it). On stock asyncio that close only
closes the child's descriptor of the selector: the parent goes on serving.
zloop's close() in a process that did not make the loop changes nothing the
kernel holds for the parent either: no epoll_ctl on the shared epoll
instance, nothing entered, submitted or registered in the shared io_uring
ring, no ring moved; a kqueue is not inherited at all, so its number (free
in the child, perhaps another file by then) is not closed. The parent's
subprocesses are not the child's to kill.

Each case runs on stock asyncio and on every backend of the zloop build (and
io_uring's shared ring too), forking from the loop's thread and from
another, and asserts the same outcome: bytes pending at the fork reach the
parent, a ping-pong in flight goes on, the listener accepts, an add_reader
watch fires, and the child, after its close, makes and runs a loop of its
own.
"""

import asyncio
import os
import socket
import sys
import threading
import warnings

import pytest

from _support import PY, ForkedChild, loop_modes, mode_factory, no_leaks  # noqa: F401  (no_leaks: autouse)

pytestmark = pytest.mark.network

ROUNDS = 20


@pytest.fixture(params=loop_modes())
def make_loop(request, monkeypatch):
    """A factory of loops of one kind: stock asyncio's, or zloop's on one
    backend (io_uring's single-issuer ring, or its shared ring)."""
    return mode_factory(request.param, monkeypatch)


def _forked(body, *, from_thread):
    """Forks, from this thread or from a new one; the child runs ``body()``
    (a JSON-able report) and exits. Returns (its exit code, its report)."""
    if not from_thread:
        return ForkedChild(body).report()
    children = []
    thread = threading.Thread(target=lambda: children.append(ForkedChild(body)))
    thread.start()
    thread.join()
    return children[0].report()


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


def _child_closes(loop, make_loop, how):
    """What the child does: files of its own first (on kqueue they may take
    the inherited queue's free number), then closes the inherited loop
    (``close()``, or ``__del__`` as a collection would), checks that its own
    files survived, then makes and runs a loop of its own."""

    def body():
        own = [os.pipe() for _ in range(8)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            if how == "close":
                loop.close()
            else:
                loop.__del__()
        intact = True
        for rd, wr in own:
            try:
                os.write(wr, b"k")
                intact = intact and os.read(rd, 1) == b"k"
            except OSError:
                intact = False
            os.close(rd)
            os.close(wr)
        return {"closed": loop.is_closed(), "own files intact": intact, "new loop": _own_loop(make_loop)}

    return body


def _own_loop(make_loop):
    """A loop the child makes after closing the inherited one: an echo
    server and a client over TCP, and a timer."""
    new = make_loop()
    try:

        async def main():
            server = await asyncio.get_running_loop().create_server(_Echo, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"child")
            got = await reader.readexactly(5)
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()
            return (await asyncio.sleep(0.001, result=got.decode()))

        return new.run_until_complete(asyncio.wait_for(main(), 10))
    finally:
        new.close()


@pytest.mark.parametrize("how", ["close", "del"])
@pytest.mark.parametrize("from_thread", [False, True], ids=["same-thread", "other-thread"])
def test_the_parent_serves_on_after_a_child_closes_the_loop(make_loop, from_thread, how):
    loop = make_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        before = loop.run_until_complete(_before_the_fork(loop, a))
        # The fork, between two runs of the loop: a running loop cannot be
        # closed, in the child as in the parent.
        child = _forked(_child_closes(loop, make_loop, how), from_thread=from_thread)
        outcome = loop.run_until_complete(asyncio.wait_for(_after_the_fork(before, b), 10))
    finally:
        loop.remove_reader(a.fileno())
        a.close()
        b.close()
        loop.close()
    assert child == (0, {"closed": True, "own files intact": True, "new loop": "child"})
    assert outcome == {
        "pending at the fork": b"pending",
        "ping-pong rounds": ROUNDS,
        "new connection": b"accepted",
        "reader": b"watched",
    }


async def _before_the_fork(loop, a):
    """A server with two connections, one of them in a ping-pong under
    way; bytes sent to the server and not read by it yet; an add_reader
    watch."""
    server = await loop.create_server(_Echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    watched = loop.create_future()
    loop.add_reader(a.fileno(), lambda: watched.done() or watched.set_result(a.recv(100)))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    pinger_r, pinger_w = await asyncio.open_connection("127.0.0.1", port)
    state = {"rounds": 0}

    async def ping_pong():
        for _ in range(ROUNDS):
            pinger_w.write(b"ping")
            assert await pinger_r.readexactly(4) == b"ping"
            state["rounds"] += 1
            await asyncio.sleep(0.002)

    pinging = asyncio.ensure_future(ping_pong())
    await asyncio.sleep(0.01)  # the ping-pong is under way
    writer.write(b"pending")
    await writer.drain()
    return server, port, watched, reader, writer, pinger_w, pinging, state


async def _after_the_fork(before, b):
    server, port, watched, reader, writer, pinger_w, pinging, state = before
    try:
        pending = await reader.readexactly(7)
        await pinging
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(b"accepted")
        accepted = await r2.readexactly(8)
        b.send(b"watched")
        seen = await watched
        for w in (writer, pinger_w, w2):
            w.close()
            await w.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    return {
        "pending at the fork": pending,
        "ping-pong rounds": state["rounds"],
        "new connection": accepted,
        "reader": seen,
    }


def test_the_parents_subprocess_outlives_a_child_closing_the_loop(make_loop, request):
    if PY < (3, 12) and "asyncio" in request.node.callspec.id:
        # Its close() in the child unregisters the parent's self-pipe from
        # their shared epoll set, and 3.11's ThreadedChildWatcher reports
        # the exit through that pipe: the parent may never hear of it.
        pytest.skip("stock asyncio 3.11's close() in a fork child deafens the parent's self-pipe")
    loop = make_loop()
    try:

        async def start():
            return await asyncio.create_subprocess_exec(
                sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )

        proc = loop.run_until_complete(start())

        def body():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                loop.close()
            return {"closed": loop.is_closed()}

        child = _forked(body, from_thread=False)
        out, _ = loop.run_until_complete(asyncio.wait_for(proc.communicate(b"still here"), 10))
    finally:
        loop.close()
    assert child == (0, {"closed": True})
    assert (out, proc.returncode) == (b"still here", 0)
