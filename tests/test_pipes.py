"""connect_read_pipe / connect_write_pipe (issue 4), each case on stock
asyncio and on zloop side by side."""

import asyncio
import gc
import os
import pty
import socket
import tempfile

import pytest
from _platform import open_fds, watch_refusal


def _fds():
    return len(open_fds())


class Reader(asyncio.Protocol):
    def __init__(self):
        loop = asyncio.get_running_loop()
        self.chunks = []
        self.events = []
        self.eof = loop.create_future()
        self.lost = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        self.chunks.append(data)

    def eof_received(self):
        self.events.append("eof")
        self.eof.set_result(None)

    def connection_lost(self, exc):
        self.events.append("lost")
        self.lost.set_result(exc)


class Writer(asyncio.BaseProtocol):
    def __init__(self):
        self.events = []
        self.lost = asyncio.get_running_loop().create_future()
        self.resumed = asyncio.Event()

    def connection_made(self, transport):
        self.events.append("made")

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")
        self.resumed.set()

    def connection_lost(self, exc):
        self.events.append("lost")
        self.lost.set_result(exc)


def test_read_pipe_until_eof(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_read_pipe(Reader, open(r, "rb", buffering=0))
        assert t.get_extra_info("pipe").fileno() == r
        assert t.is_reading()
        os.write(w, b"hello ")
        os.write(w, b"world")
        os.close(w)
        assert await p.lost is None
        assert b"".join(p.chunks) == b"hello world"
        assert p.events == ["made", "eof", "lost"]
        assert t.is_closing()

    run(main())


def test_read_pipe_pause_resume(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_read_pipe(Reader, os.fdopen(r, "rb", 0))
        t.pause_reading()
        assert not t.is_reading()
        os.write(w, b"held")
        for _ in range(5):
            await asyncio.sleep(0.002)
        assert p.chunks == []
        t.resume_reading()
        os.close(w)
        await p.lost
        assert p.chunks == [b"held"]

    run(main())


def test_read_pipe_close(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_read_pipe(Reader, os.fdopen(r, "rb", 0))
        t.close()
        t.close()
        assert await p.lost is None
        assert p.events == ["made", "lost"]
        assert t.get_extra_info("pipe").closed
        os.close(w)

    run(main())


def test_regular_files_are_rejected(loop, run):
    async def main():
        with tempfile.TemporaryFile() as f:
            with pytest.raises(ValueError, match="Pipe transport is"):
                await loop.connect_read_pipe(Reader, f)
            with pytest.raises(ValueError, match="Pipe transport is"):
                await loop.connect_write_pipe(Writer, f)

    run(main())


def test_write_pipe_flow_control_and_large_payload(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
        payload = os.urandom(1 << 20)
        t.write(payload)
        assert t.get_write_buffer_size() > 0
        assert p.events == ["made", "pause"]
        rt, rp = await loop.connect_read_pipe(Reader, os.fdopen(r, "rb", 0))
        await p.resumed.wait()
        assert t.get_write_buffer_size() <= t.get_write_buffer_limits()[0]
        t.close()  # flushes, then closes
        assert await p.lost is None
        await rp.lost
        assert b"".join(rp.chunks) == payload

    run(main())


def test_write_pipe_writes_and_write_eof(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
        assert t.can_write_eof()
        # asyncio asserts (AssertionError, gone under -O); zloop raises TypeError.
        with pytest.raises((TypeError, AssertionError)):
            t.write("text")
        t.write(b"a")
        t.write(bytearray(b"b"))
        t.writelines([b"c", memoryview(b"d")])
        t.write(b"")
        t.write_eof()
        assert t.is_closing()
        assert await p.lost is None
        assert os.read(r, 100) == b"abcd"
        assert os.read(r, 100) == b""
        os.close(r)

    run(main())


def test_write_pipe_reader_gone(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
        os.close(r)
        # The reader vanished: noticed without writing.
        assert await p.lost is None
        t.write(b"into the void")  # dropped, as asyncio does

    run(main())


def test_write_pipe_broken_with_pending_data(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
        t.write(b"x" * (1 << 20))
        assert t.get_write_buffer_size() > 0
        os.close(r)
        assert isinstance(await p.lost, BrokenPipeError)

    run(main())


def test_write_pipe_reader_gone_before_the_wait_for_room(loop, loop_name, run, monkeypatch):
    # The pipe takes part of a write, and its reader goes before the
    # transport waits for room: epoll and macOS's kqueue watch the pipe and
    # report it at once; FreeBSD's kqueue refuses the watch (EPIPE:
    # sys_pipe.c pipe_kqfilter), as zloop's emulated kqueue does under its
    # FreeBSD personality. zloop makes that the write's error: write()
    # raises nothing, connection_lost gets BrokenPipeError. Stock asyncio
    # on a kqueue that refuses lets the error out of write() (its
    # _UnixWritePipeTransport.write calls _add_writer unguarded).
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
        real_write = os.write

        def part_then_reader_gone(fd, data):
            if fd != w:
                return real_write(fd, data)
            monkeypatch.setattr(os, "write", real_write)
            n = real_write(fd, bytes(memoryview(data)[:10]))
            os.close(r)
            return n

        monkeypatch.setattr(os, "write", part_then_reader_gone)
        raised = None
        try:
            t.write(b"x" * 100)
        except BrokenPipeError as exc:
            raised = exc
        refusal = watch_refusal(loop, w, write=True)
        if loop_name == "asyncio" and refusal is not None:
            assert raised is not None and raised.errno == refusal
            t.abort()
            return
        assert raised is None
        assert isinstance(await p.lost, BrokenPipeError)

    run(main())


def test_write_pipe_abort(loop, run):
    async def main():
        r, w = os.pipe()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
        t.write(b"x" * (1 << 20))
        t.abort()
        assert await p.lost is None
        assert t.get_write_buffer_size() == 0
        os.close(r)

    run(main())


def test_sockets_and_ttys_are_accepted(loop, run):
    async def main():
        a, b = socket.socketpair()
        t, p = await loop.connect_read_pipe(Reader, a)
        b.sendall(b"via socket")
        b.close()
        await p.lost
        assert b"".join(p.chunks) == b"via socket"

        master, slave = pty.openpty()
        t, p = await loop.connect_write_pipe(Writer, os.fdopen(slave, "wb", 0))
        t.write(b"tty\n")
        t.close()
        await p.lost
        assert b"tty" in os.read(master, 100)
        os.close(master)

    run(main())


def test_fifo(loop, run):
    async def main():
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fifo")
            os.mkfifo(path)
            rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            wfd = os.open(path, os.O_WRONLY)
            rt, rp = await loop.connect_read_pipe(Reader, os.fdopen(rfd, "rb", 0))
            wt, wp = await loop.connect_write_pipe(Writer, os.fdopen(wfd, "wb", 0))
            wt.write(b"through a fifo")
            wt.close()
            await wp.lost
            await rp.lost
            assert b"".join(rp.chunks) == b"through a fifo"

    run(main())


def test_pipes_leave_no_descriptors(loop, run):
    async def main():
        for _ in range(50):
            r, w = os.pipe()
            rt, rp = await loop.connect_read_pipe(Reader, os.fdopen(r, "rb", 0))
            wt, wp = await loop.connect_write_pipe(Writer, os.fdopen(w, "wb", 0))
            wt.write(b"x")
            wt.close()
            await wp.lost
            await rp.lost

    gc.collect()
    before = _fds()
    run(main())
    assert _fds() == before
