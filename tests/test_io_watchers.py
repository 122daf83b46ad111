"""add_reader / remove_reader / add_writer / remove_writer on raw descriptors."""

import errno
import os
import socket
import tempfile

import pytest

from _platform import watch_refusal
from _support import run_passes


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def pipe():
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_reader_fires_with_args_when_data_arrives(loop, pair):
    a, b = pair
    got = []

    def on_readable(sock, tag):
        got.append((tag, sock.recv(100)))
        loop.stop()

    assert loop.add_reader(a.fileno(), on_readable, a, "tag") is None
    loop.call_soon(b.send, b"ping")
    loop.run_forever()
    assert got == [("tag", b"ping")]
    assert loop.remove_reader(a.fileno()) is True
    assert loop.remove_reader(a.fileno()) is False


def test_reader_is_level_triggered(loop, pair):
    # asyncio's selector is level-triggered: data left unread keeps the
    # descriptor readable, so the callback fires on every pass.
    a, b = pair
    calls = []

    def on_readable():
        calls.append(1)
        if len(calls) == 3:
            loop.remove_reader(a)
            loop.stop()

    b.send(b"unread")
    loop.add_reader(a, on_readable)
    loop.run_forever()
    assert len(calls) == 3
    assert a.recv(100) == b"unread"


def test_reader_not_called_without_data(loop, pair):
    a, _ = pair
    calls = []
    loop.add_reader(a.fileno(), calls.append, "spurious")
    run_passes(loop, 5)
    assert calls == []
    assert loop.remove_reader(a.fileno()) is True


def test_replacing_a_reader_keeps_only_the_new_one(loop, pair):
    a, b = pair
    calls = []

    def new_reader():
        calls.append("new")
        a.recv(100)
        loop.stop()

    loop.add_reader(a.fileno(), calls.append, "old")
    loop.add_reader(a.fileno(), new_reader)
    b.send(b"x")
    loop.run_forever()
    assert calls == ["new"]


def test_writer_fires_on_a_writable_socket(loop, pair):
    a, _ = pair
    got = []

    def on_writable(tag):
        got.append(tag)
        assert loop.remove_writer(a.fileno()) is True
        loop.stop()

    assert loop.add_writer(a.fileno(), on_writable, "w") is None
    loop.run_forever()
    assert got == ["w"]
    assert loop.remove_writer(a.fileno()) is False


def test_reader_and_writer_on_one_fd_are_independent(loop, pair):
    a, b = pair
    events = []

    def on_writable():
        events.append("w")
        loop.remove_writer(a.fileno())
        b.send(b"now readable")

    def on_readable():
        events.append("r")
        a.recv(100)
        loop.stop()

    loop.add_reader(a.fileno(), on_readable)
    loop.add_writer(a.fileno(), on_writable)
    loop.run_forever()
    assert events == ["w", "r"]
    assert loop.remove_writer(a.fileno()) is False
    assert loop.remove_reader(a.fileno()) is True


def test_removing_the_writer_keeps_the_reader(loop, pair):
    a, b = pair
    calls = []

    def on_readable():
        calls.append(a.recv(100))
        loop.stop()

    loop.add_writer(a.fileno(), calls.append, "writer must not run")
    loop.add_reader(a.fileno(), on_readable)
    assert loop.remove_writer(a.fileno()) is True
    b.send(b"data")
    loop.run_forever()
    assert calls == [b"data"]


def test_writer_waits_for_space_in_a_full_pipe(loop, pipe):
    r, w = pipe
    total = 0
    while True:
        try:
            total += os.write(w, b"x" * 65536)
        except BlockingIOError:
            break
    calls = []
    loop.add_writer(w, calls.append, "writable")
    run_passes(loop, 5)
    assert calls == []

    drained = 0
    while drained < total:
        drained += len(os.read(r, 1 << 20))

    def check(left):
        if calls or not left:
            loop.stop()
        else:
            loop.call_soon(check, left - 1)

    # The writer becomes ready once the pipe has room again; poll the loop
    # (not the clock) until it does.
    loop.call_soon(check, 10_000)
    loop.run_forever()
    assert calls and calls[0] == "writable"
    assert loop.remove_writer(w) is True


def test_pipe_reader_sees_eof(loop, pipe):
    r, w = pipe
    got = []

    def on_readable():
        data = os.read(r, 100)
        got.append(data)
        if not data:
            loop.remove_reader(r)
            loop.stop()

    loop.add_reader(r, on_readable)
    os.write(w, b"last words")
    os.close(w)
    loop.run_forever()
    assert got == [b"last words", b""]


def test_objects_with_fileno_are_accepted(loop, pair):
    a, b = pair
    got = []

    def on_readable():
        got.append(a.recv(100))
        loop.stop()

    loop.add_reader(a, on_readable)  # the socket object, not its number
    b.send(b"obj")
    loop.run_forever()
    assert got == [b"obj"]
    # Registered by object, removable by number (both name the same fd).
    assert loop.remove_reader(a.fileno()) is True
    assert loop.remove_reader(a) is False


def test_custom_object_with_fileno(loop, pair):
    a, b = pair

    class Wrapper:
        def fileno(self):
            return a.fileno()

    got = []
    loop.add_reader(Wrapper(), lambda: (got.append(a.recv(10)), loop.stop()))
    b.send(b"w")
    loop.run_forever()
    assert got == [b"w"]
    assert loop.remove_reader(Wrapper()) is True


@pytest.mark.parametrize(
    "bad, message",
    [
        ("x", "Invalid file object: 'x'"),
        (None, "Invalid file object: None"),
        (1.5, "Invalid file object: 1.5"),
        (-1, "Invalid file descriptor: -1"),
    ],
)
@pytest.mark.parametrize("method", ["add_reader", "add_writer", "remove_reader", "remove_writer"])
def test_invalid_file_objects_raise_value_error(loop, method, bad, message):
    with pytest.raises(ValueError) as info:
        if method.startswith("add"):
            getattr(loop, method)(bad, lambda: None)
        else:
            getattr(loop, method)(bad)
    assert str(info.value) == message


def test_add_reader_on_a_closed_descriptor_raises_ebadf(loop):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError) as info:
        loop.add_reader(r, lambda: None)
    assert info.value.errno == errno.EBADF
    assert loop.remove_reader(r) is False


@pytest.mark.parametrize("direction", ["reader", "writer"])
def test_a_regular_file_is_watched_as_the_poller_says(loop, direction):
    # epoll refuses regular files (EPERM), and so does zloop's io_uring
    # backend; kqueue watches the file's vnode: readable while the offset
    # is short of the end, writable always (macOS and FreeBSD, and zloop's
    # emulated kqueue under their personalities). Each loop's poller is
    # asked what it does (_platform.watch_refusal).
    write = direction == "writer"
    add, remove = getattr(loop, f"add_{direction}"), getattr(loop, f"remove_{direction}")
    with tempfile.TemporaryFile() as f:
        f.write(b"data")
        f.flush()
        f.seek(1)
        fd = f.fileno()
        refusal = watch_refusal(loop, fd, write)
        if refusal is not None:
            with pytest.raises(OSError) as info:
                add(fd, lambda: None)
            assert info.value.errno == refusal
            assert remove(fd) is False
            return
        got = []

        def ready():
            got.append(os.pwrite(fd, b"!", 4) if write else os.read(fd, 100))
            remove(fd)
            loop.stop()

        add(fd, ready)
        loop.run_forever()
        assert got == ([1] if write else [b"ata"])
        assert remove(fd) is False


def test_add_writer_on_a_pipe_whose_reader_is_gone(loop):
    # epoll and macOS's kqueue watch it and call the writer at once (its
    # write fails with EPIPE); FreeBSD's kqueue refuses the watch (EPIPE),
    # and so does zloop's emulated kqueue under its FreeBSD personality.
    r, w = os.pipe()
    os.close(r)
    try:
        refusal = watch_refusal(loop, w, write=True)
        if refusal is not None:
            with pytest.raises(OSError) as info:
                loop.add_writer(w, lambda: None)
            assert info.value.errno == refusal == errno.EPIPE
            assert loop.remove_writer(w) is False
            return
        failed = []

        def ready():
            with pytest.raises(BrokenPipeError) as info:
                os.write(w, b"x")
            failed.append(info.value.errno)
            loop.remove_writer(w)
            loop.stop()

        loop.add_writer(w, ready)
        loop.run_forever()
        assert failed == [errno.EPIPE]
    finally:
        os.close(w)


def test_remove_unregistered_fd_returns_false(loop, pair):
    a, _ = pair
    assert loop.remove_reader(a.fileno()) is False
    assert loop.remove_writer(a.fileno()) is False


@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
def test_add_on_a_closed_loop_raises(loop, pair, method):
    a, _ = pair
    loop.close()
    with pytest.raises(RuntimeError) as info:
        getattr(loop, method)(a.fileno(), lambda: None)
    assert str(info.value) == "Event loop is closed"


@pytest.mark.parametrize("method", ["remove_reader", "remove_writer"])
def test_remove_on_a_closed_loop_returns_false(loop, pair, method):
    a, _ = pair
    getattr(loop, method.replace("remove", "add"))(a.fileno(), lambda: None)
    loop.close()
    assert getattr(loop, method)(a.fileno()) is False


def test_many_descriptors_at_once(loop):
    pairs = [socket.socketpair() for _ in range(50)]
    try:
        seen = set()

        def on_readable(i, sock):
            sock.recv(10)
            seen.add(i)
            loop.remove_reader(sock.fileno())
            if len(seen) == len(pairs):
                loop.stop()

        for i, (a, b) in enumerate(pairs):
            a.setblocking(False)
            loop.add_reader(a.fileno(), on_readable, i, a)
        for _, b in reversed(pairs):
            b.send(b"!")
        loop.run_forever()
        assert seen == set(range(len(pairs)))
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_reader_callback_exception_goes_to_handler_and_loop_continues(loop, pair):
    a, b = pair
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def bad_reader():
        a.recv(10)
        loop.remove_reader(a.fileno())
        loop.call_soon(loop.stop)
        raise ZeroDivisionError("reader")

    loop.add_reader(a.fileno(), bad_reader)
    b.send(b"x")
    loop.run_forever()
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], ZeroDivisionError)
    assert contexts[0]["message"].startswith("Exception in callback ")


def test_reader_removed_earlier_in_the_same_pass_does_not_run(loop):
    # Both descriptors are ready in one poll.  As asyncio: removing a reader
    # cancels its handle, so a callback already collected for this pass is
    # skipped, never called after its removal.
    (a1, b1), (a2, b2) = socket.socketpair(), socket.socketpair()
    try:
        ran = []

        def reader(name, mine, other):
            ran.append(name)
            mine.recv(10)
            loop.remove_reader(other.fileno())

        loop.add_reader(a1.fileno(), reader, "first", a1, a2)
        loop.add_reader(a2.fileno(), reader, "second", a2, a1)
        b1.send(b"x")
        b2.send(b"x")
        run_passes(loop, 3)
        assert len(ran) == 1
    finally:
        for s in (a1, b1, a2, b2):
            s.close()


def test_reader_replaced_earlier_in_the_same_pass_runs_only_the_new_one(loop):
    (a1, b1), (a2, b2) = socket.socketpair(), socket.socketpair()
    try:
        ran = []

        def reader(name, other_fd):
            ran.append(name)
            loop.remove_reader(a1.fileno())
            loop.remove_reader(a2.fileno())
            loop.add_reader(other_fd, lambda: (ran.append("replacement"), loop.remove_reader(other_fd)))

        loop.add_reader(a1.fileno(), reader, "first", a2.fileno())
        loop.add_reader(a2.fileno(), reader, "second", a1.fileno())
        b1.send(b"x")
        b2.send(b"x")
        run_passes(loop, 4)
        assert len(ran) == 2
        assert ran[1] == "replacement"
    finally:
        for s in (a1, b1, a2, b2):
            s.close()


def test_writer_removed_by_a_reader_in_the_same_pass_does_not_run(loop, pair):
    a, b = pair
    ran = []

    def on_readable():
        ran.append("reader")
        a.recv(10)
        loop.remove_writer(b.fileno())

    loop.add_reader(a.fileno(), on_readable)
    b.send(b"x")
    loop.add_writer(b.fileno(), ran.append, "writer")
    run_passes(loop, 3)
    # Which of the two asyncio collects first depends on the poll order, so
    # the writer may run once before removal, but never after.
    assert ran[0] in ("reader", "writer")
    assert ran.count("reader") == 1
    assert ran.count("writer") <= 1
    if ran[0] == "reader":
        assert ran == ["reader"]


@pytest.mark.parametrize("method", ["reader", "writer"])
def test_remove_by_a_closed_socket_object(loop, method):
    # anyio closes a socket, then calls remove_reader(sock): the socket's
    # fileno() is -1 by then. asyncio's selector finds the watcher by the
    # object itself; a closed socket not watched (any more) and an int -1
    # are refused with ValueError.
    add = getattr(loop, f"add_{method}")
    remove = getattr(loop, f"remove_{method}")
    a, b = socket.socketpair()
    add(a, lambda: None)
    a.close()
    assert remove(a) is True
    b.close()
    for closed in (a, b, -1):
        with pytest.raises(ValueError, match="Invalid file descriptor"):
            remove(closed)



def test_io_is_seen_within_two_passes_of_a_wake_up_that_keeps_the_loop_busy(loop, pair):
    # The loop blocks, data on `a` wakes it, and a's reader both makes `b2`
    # readable and starts a callback chain that keeps the ready queue full
    # (no pass may block again). b2's reader must still run: asyncio polls
    # on the very next pass; zloop skips the poll of the pass right after a
    # blocking wait that woke on events, so it may take one pass more, but
    # never more than that.
    a, b = pair
    a2, b2 = socket.socketpair()
    a2.setblocking(False)
    b2.setblocking(False)
    steps = []
    seen_at = []

    def chain():
        steps.append(1)
        if len(steps) < 50:
            loop.call_soon(chain)
        else:
            loop.stop()

    def on_a():
        a.recv(100)
        loop.remove_reader(a.fileno())
        a2.send(b"x")
        loop.call_soon(chain)

    def on_b2():
        b2.recv(100)
        seen_at.append(len(steps))
        loop.remove_reader(b2.fileno())

    try:
        loop.add_reader(a.fileno(), on_a)
        loop.add_reader(b2.fileno(), on_b2)
        loop.call_later(0.05, b.send, b"go")  # arrives while the loop blocks
        loop.run_forever()
    finally:
        loop.remove_reader(b2.fileno())
        a2.close()
        b2.close()
    assert len(seen_at) == 1
    assert seen_at[0] <= 2, seen_at


def test_reader_that_drained_its_socket_is_not_called_again(loop, pair):
    # A reader that read everything is not called again for that data, even
    # when, before reading, it removed another descriptor's reader. On
    # io_uring that removal enters the kernel at once, and must not take
    # along the drained socket's re-armed poll: armed while the data was
    # still unread, that poll would report the socket readable once more,
    # and the reader's recv() would raise BlockingIOError (asyncio's
    # selector reports readiness as it is when it polls).
    a, b = pair
    others = [socket.socketpair() for _ in range(20)]
    got = []
    spurious = []

    def on_readable():
        if len(got) < len(others):
            loop.remove_reader(others[len(got)][0])
        try:
            got.append(a.recv(4096))
        except BlockingIOError:
            spurious.append(len(got))
            return
        if len(got) == len(others):
            loop.stop()
        else:
            # Later, so that the passes in between poll with nothing sent.
            loop.call_later(0.001, next_round)

    def next_round():
        loop.add_reader(others[len(got)][0], lambda: None)
        b.send(b"x")

    loop.add_reader(a, on_readable)
    loop.call_soon(next_round)
    try:
        loop.run_forever()
    finally:
        loop.remove_reader(a)
        for x, y in others:
            x.close()
            y.close()
    assert got == [b"x"] * len(others)
    assert spurious == []
