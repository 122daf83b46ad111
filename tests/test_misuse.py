"""Misuse that costs the user an exception, never another connection's
bytes, a hang, a spin or unbounded memory (issue 22).

Each test runs on both loops; the fd-closing ones matter most under
ZLOOP_BACKEND=io_uring, whose polls hold their file, and are meaningful on
either backend: they assert what asyncio's selector loop does.
"""

import asyncio
import errno
import os
import socket

import pytest

from _support import no_leaks, rss_bytes, run_passes, yield_passes  # noqa: F401


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _pair_at(fd):
    """A new socket pair whose first socket has descriptor number `fd`."""
    c0, d = _pair()
    if c0.fileno() == fd:
        return c0, d
    os.dup2(c0.fileno(), fd)
    c0.close()
    return socket.socket(fileno=fd), d


def test_sock_recv_on_a_socket_closed_while_waiting(loop):
    # The close is the peer's to see at once, and the old wait must never
    # receive the data of a socket that reuses the number.
    a, b = _pair()
    fd = a.fileno()
    outcome = {}

    async def main():
        t = asyncio.ensure_future(loop.sock_recv(a, 100))
        await yield_passes(2)
        a.close()
        try:
            b.send(b"for-a")
            outcome["peer"] = "sent"
        except BrokenPipeError:
            outcome["peer"] = "BrokenPipeError"
        c, d = _pair_at(fd)
        try:
            d.send(b"for-c")
            await yield_passes(3)
            outcome["old wait"] = t.result() if t.done() else "pending"
            outcome["new socket"] = c.recv(100)
        finally:
            t.cancel()
            await yield_passes(1)
            c.close()
            d.close()

    try:
        loop.run_until_complete(main())
    finally:
        b.close()
    assert outcome == {"peer": "BrokenPipeError", "old wait": "pending", "new socket": b"for-c"}


def test_add_reader_on_a_socket_closed_without_remove_reader(loop):
    a, b = _pair()
    fd = a.fileno()
    calls = []
    loop.add_reader(fd, calls.append, "old")
    try:
        run_passes(loop, 2)
        a.close()
        assert b.recv(10) == b""  # the peer sees end of file at once
        c, d = _pair_at(fd)
        try:
            d.send(b"for-c")
            run_passes(loop, 3)
            # epoll forgot the closed file's registration: nothing reported.
            assert calls == []
            assert c.recv(10) == b"for-c"
        finally:
            loop.remove_reader(fd)
            c.close()
            d.close()
    finally:
        b.close()


@pytest.mark.parametrize("fd", [200_000_000, 10**9, 2**31 - 1])
def test_add_reader_on_a_huge_closed_fd_fails_at_once_without_memory(loop, fd):
    before = rss_bytes()
    for method in (loop.add_reader, loop.add_writer):
        with pytest.raises(OSError) as info:
            method(fd, lambda: None)
        assert info.value.errno == errno.EBADF
    assert rss_bytes() - before < 64 << 20
    assert loop.remove_reader(fd) is False
    assert loop.remove_writer(fd) is False


def test_add_reader_on_dev_null_is_refused(loop):
    # /dev/null cannot be polled: epoll refuses it (EPERM); an io_uring
    # poll would call it ready for ever (a spinning callback).
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        for method in (loop.add_reader, loop.add_writer):
            with pytest.raises(PermissionError):
                method(fd, lambda: None)
        assert loop.remove_reader(fd) is False
    finally:
        os.close(fd)
