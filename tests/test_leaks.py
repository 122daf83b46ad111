"""References, descriptors and memory are given back.

Weak references to callback arguments show when a loop drops its handles;
_support's open_fds and rss_bytes show descriptors and memory.  The RSS
check is a memory bound, not a timing.
"""

import asyncio
import gc
import signal
import socket
import weakref

import pytest

from _support import RSS_UNKNOWN, open_fds, rss_bytes, run_passes


class Token:
    """A weak-referenceable callback argument."""


def _noop(*args):
    pass


def _collected(ref):
    gc.collect()
    return ref() is None


def test_arguments_of_callbacks_that_ran_are_released(loop):
    soon, later = Token(), Token()
    refs = [weakref.ref(soon), weakref.ref(later)]
    loop.call_soon(_noop, soon)
    loop.call_later(0, _noop, later)
    del soon, later
    run_passes(loop, 3)
    assert all(_collected(ref) for ref in refs)


def test_close_releases_pending_callbacks(loop):
    tokens = [Token() for _ in range(4)]
    refs = [weakref.ref(t) for t in tokens]
    loop.call_soon(_noop, tokens[0])
    loop.call_soon_threadsafe(_noop, tokens[1])
    loop.call_later(100, _noop, tokens[2])
    loop.call_at(loop.time() + 1000, _noop, tokens[3])
    del tokens
    loop.close()
    assert all(_collected(ref) for ref in refs)


def test_close_releases_a_cycle_through_a_pending_handle(loop_factory):
    """An object that keeps the handle of a timer whose callback refers back
    to it (an SSLProtocol and its handshake timeout): the loop closes with
    the timer pending, and nothing else holds either. zloop's handles are
    not tracked by the collector, so the cycle must be broken by the close
    (before the fix, the object and anything it held stayed for ever)."""

    class Owner:
        def __init__(self, schedule):
            self.handle = schedule(lambda: self)

    loop = loop_factory()
    refs = [weakref.ref(Owner(lambda cb: loop.call_later(100, cb))),
            weakref.ref(Owner(loop.call_soon))]
    loop.close()
    assert all(_collected(ref) for ref in refs)


def test_cancel_releases_arguments_at_once(loop):
    # asyncio's Handle.cancel() drops the callback and its arguments even
    # though the cancelled timer still sits in the loop's queue.
    soon, later = Token(), Token()
    refs = [weakref.ref(soon), weakref.ref(later)]
    handles = [loop.call_soon(_noop, soon), loop.call_later(100, _noop, later)]
    del soon, later
    for handle in handles:
        handle.cancel()
    assert all(_collected(ref) for ref in refs)
    assert not loop.is_closed()


def test_callback_itself_is_released(loop):
    class Callable:
        def __call__(self):
            pass

    callback = Callable()
    ref = weakref.ref(callback)
    loop.call_soon(callback)
    del callback
    run_passes(loop, 2)
    assert _collected(ref)


def test_readers_and_writers_release_their_arguments(loop):
    a, b = socket.socketpair()
    try:
        removed, closed = Token(), Token()
        refs = [weakref.ref(removed), weakref.ref(closed)]
        loop.add_reader(a.fileno(), _noop, removed)
        loop.remove_reader(a.fileno())
        loop.add_writer(b.fileno(), _noop, closed)
        del removed, closed
        assert _collected(refs[0])
        loop.close()
        assert _collected(refs[1])
    finally:
        a.close()
        b.close()


def test_replaced_reader_releases_the_old_arguments(loop):
    a, b = socket.socketpair()
    try:
        old = Token()
        ref = weakref.ref(old)
        loop.add_reader(a.fileno(), _noop, old)
        loop.add_reader(a.fileno(), _noop)
        del old
        assert _collected(ref)
    finally:
        loop.remove_reader(a.fileno())
        a.close()
        b.close()


def test_signal_handlers_release_their_arguments(loop):
    removed, closed = Token(), Token()
    refs = [weakref.ref(removed), weakref.ref(closed)]
    loop.add_signal_handler(signal.SIGUSR1, _noop, removed)
    loop.remove_signal_handler(signal.SIGUSR1)
    loop.add_signal_handler(signal.SIGUSR2, _noop, closed)
    del removed, closed
    assert _collected(refs[0])
    loop.close()
    assert _collected(refs[1])


def test_finished_tasks_and_their_results_are_released(loop):
    async def produce():
        await asyncio.sleep(0)
        return Token()

    task = loop.create_task(produce())
    result_ref = weakref.ref(loop.run_until_complete(task))
    task_ref = weakref.ref(task)
    del task
    assert _collected(task_ref)
    assert _collected(result_ref)


def test_a_closed_loop_is_collectable(loop_factory):
    lp = loop_factory()
    lp.run_until_complete(asyncio.sleep(0))
    lp.call_soon(_noop)
    lp.close()
    ref = weakref.ref(lp)
    del lp
    assert _collected(ref)


def test_creating_and_closing_loops_leaks_no_descriptors(loop_factory):
    def one_loop():
        lp = loop_factory()
        try:
            lp.add_signal_handler(signal.SIGUSR1, _noop)
            lp.run_until_complete(asyncio.sleep(0))
            lp.run_until_complete(lp.run_in_executor(None, _noop))
        finally:
            lp.close()

    one_loop()  # first use may open lasting descriptors (e.g. /dev/urandom)
    gc.collect()
    before = open_fds()
    for _ in range(20):
        one_loop()
    gc.collect()
    assert open_fds() - before == set()


def _churn(loop, rounds, batch):
    """call_soon and call_later, half of the timers cancelled, run to empty."""
    for _ in range(rounds):
        for i in range(batch):
            loop.call_soon(_noop, i)
            loop.call_later(0, _noop, i)
            loop.call_later(100, _noop, i).cancel()
            loop.call_soon(_noop, i).cancel()
        run_passes(loop, 2)


def test_a_million_callbacks_leave_rss_flat(loop):
    # Each round schedules 4 x 125_000 = 500_000 handles; a warm-up round
    # lets allocators reach their steady state, then a second round must not
    # grow the process.  Leaking even 20 bytes a handle would show as 10 MB.
    if rss_bytes() is None:
        pytest.skip(RSS_UNKNOWN)
    _churn(loop, rounds=50, batch=2_500)
    gc.collect()
    warm = rss_bytes()
    _churn(loop, rounds=50, batch=2_500)
    gc.collect()
    grown = rss_bytes() - warm
    assert grown < 10 * 1024 * 1024, f"RSS grew {grown / 1e6:.1f} MB"


def test_many_socketpair_readers_leave_no_descriptors(loop):
    before = open_fds()
    for _ in range(200):
        a, b = socket.socketpair()
        loop.add_reader(a.fileno(), _noop)
        loop.add_writer(b.fileno(), _noop)
        loop.remove_reader(a.fileno())
        loop.remove_writer(b.fileno())
        a.close()
        b.close()
    run_passes(loop, 2)
    assert open_fds() - before == set()


def test_closed_fd_reused_for_a_new_registration(loop):
    # A descriptor number closed after remove_reader() and handed out again
    # must register as new (stale kernel state would make this fail or hang).
    for _ in range(3):
        a, b = socket.socketpair()
        got = []
        loop.add_reader(a.fileno(), lambda: (got.append(a.recv(10)), loop.stop()))
        b.send(b"x")
        loop.run_forever()
        assert got == [b"x"]
        loop.remove_reader(a.fileno())
        a.close()
        b.close()
