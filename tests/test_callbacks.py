"""call_soon, call_later, call_at, call_soon_threadsafe, time(), and handles."""

import asyncio
import contextvars
import re
import socket
import sys
import threading
import time

import pytest

from _support import PY, run_passes, stock_handle_repr

VAR = contextvars.ContextVar("VAR", default="unset")


def test_call_soon_passes_positional_args(loop):
    calls = []
    loop.call_soon(calls.append, ("a", 1))
    loop.call_soon(lambda *args: calls.append(args), 1, "two", None)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [("a", 1), (1, "two", None)]


def test_call_soon_is_fifo(loop):
    calls = []
    for i in range(100):
        loop.call_soon(calls.append, i)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == list(range(100))


def test_callbacks_scheduled_during_a_pass_wait_for_the_next(loop):
    # As asyncio.base_events._run_once: only the callbacks ready when the pass
    # starts run in it; stop() ends run_forever after that pass.
    calls = []

    def first():
        calls.append("first")
        loop.call_soon(calls.append, "scheduled-by-first")

    loop.call_soon(first)
    loop.call_soon(calls.append, "second")
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == ["first", "second"]

    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == ["first", "second", "scheduled-by-first"]


def test_stop_lets_the_rest_of_the_pass_run(loop):
    calls = []
    loop.call_soon(calls.append, 1)
    loop.call_soon(loop.stop)
    loop.call_soon(calls.append, 2)
    loop.call_soon(calls.append, 3)
    loop.run_forever()
    assert calls == [1, 2, 3]


def test_stop_before_run_forever_runs_one_pass(loop):
    calls = []
    loop.stop()
    loop.call_soon(calls.append, "ready")
    loop.run_forever()
    assert calls == ["ready"]
    assert not loop.is_running()


def test_call_later_orders_by_deadline(loop):
    calls = []
    loop.call_later(0.03, calls.append, "c")
    loop.call_later(0.01, calls.append, "a")
    loop.call_later(0.02, calls.append, "b")
    loop.call_later(0.04, loop.stop)
    loop.run_forever()
    assert calls == ["a", "b", "c"]


def test_call_later_zero_and_negative_run_soon(loop):
    calls = []
    loop.call_later(0, calls.append, "zero")
    loop.call_later(-5, calls.append, "negative")
    run_passes(loop, 3)
    assert sorted(calls) == ["negative", "zero"]


def test_call_later_when_is_now_plus_delay(loop):
    before = loop.time()
    handle = loop.call_later(10, lambda: None)
    after = loop.time()
    assert before + 10 <= handle.when() <= after + 10
    handle.cancel()


def test_timer_does_not_fire_before_its_deadline(loop):
    fired = []
    handle = loop.call_later(0.05, lambda: fired.append(loop.time()))
    loop.call_later(0.06, loop.stop)
    loop.run_forever()
    assert len(fired) == 1
    # asyncio may run a timer up to one clock resolution early; allow 1 ms.
    assert fired[0] >= handle.when() - 0.001


def test_call_at_keeps_the_given_when(loop):
    calls = []
    when = loop.time() + 0.01
    handle = loop.call_at(when, calls.append, "at")
    assert handle.when() == when
    loop.call_at(when + 0.01, loop.stop)
    loop.run_forever()
    assert calls == ["at"]


def test_call_at_in_the_past_runs(loop):
    calls = []
    loop.call_at(loop.time() - 100, calls.append, "past")
    run_passes(loop, 3)
    assert calls == ["past"]


def test_time_is_monotonic_clock(loop):
    # Stock asyncio's loop.time() *is* time.monotonic(); code mixes the two
    # (deadlines computed outside the loop), so the clocks must agree.
    # 1 ms of slack allows a clock cached once per loop pass.
    before = time.monotonic()
    now = loop.time()
    after = time.monotonic()
    assert before - 0.001 <= now <= after + 0.001
    assert isinstance(now, float)


def test_time_does_not_go_backwards(loop):
    samples = []

    def sample(left):
        samples.append(loop.time())
        if left:
            loop.call_soon(sample, left - 1)
        else:
            loop.stop()

    loop.call_soon(sample, 200)
    loop.run_forever()
    assert samples == sorted(samples)


def test_call_soon_threadsafe_wakes_an_idle_loop(loop):
    # Nothing else is scheduled: only the thread's call can end run_forever.
    seen = {}

    def from_loop():
        seen["thread"] = threading.get_ident()
        loop.stop()

    def worker():
        loop.call_soon_threadsafe(from_loop)

    thread = threading.Thread(target=worker)
    loop.call_soon(thread.start)
    loop.run_forever()
    thread.join()
    assert seen["thread"] == threading.get_ident()


def test_call_soon_threadsafe_from_many_threads_keeps_each_threads_order(loop):
    per_thread = 2000
    nthreads = 4
    received = []
    done = loop.create_future()
    total = per_thread * nthreads

    def record(item):
        received.append(item)
        if len(received) == total:
            done.set_result(None)

    def worker(tid):
        for i in range(per_thread):
            loop.call_soon_threadsafe(record, (tid, i))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]

    async def main():
        for thread in threads:
            thread.start()
        await done

    loop.run_until_complete(main())
    for thread in threads:
        thread.join()
    assert len(received) == total
    for tid in range(nthreads):
        assert [i for t, i in received if t == tid] == list(range(per_thread))


def test_call_soon_threadsafe_before_run(loop):
    calls = []
    loop.call_soon_threadsafe(calls.append, 1)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1]


@pytest.mark.skipif(PY < (3, 14), reason="3.14's call_soon_threadsafe handles have a lock")
@pytest.mark.parametrize("method", ["cancel", "cancelled"])
def test_threadsafe_handle_waits_for_its_running_callback_from_another_thread(loop, method):
    # asyncio 3.14's _ThreadSafeHandle: cancel() and cancelled() from another
    # thread wait until a callback that has started returns, so that "not
    # cancelled" means "ran to the end". The callback waits a bounded time
    # for the other thread's call to return: it must not, while the callback
    # still runs.
    started = threading.Event()
    call_returned = threading.Event()
    seen = []

    def callback():
        started.set()
        seen.append(call_returned.wait(0.2))

    def worker(handle):
        started.wait()
        seen.append(getattr(handle, method)())
        call_returned.set()
        loop.call_soon_threadsafe(loop.stop)

    handle = loop.call_soon_threadsafe(callback)
    thread = threading.Thread(target=worker, args=(handle,))
    thread.start()
    loop.run_forever()
    thread.join()
    assert seen == [False, None if method == "cancel" else False]


def test_threadsafe_handle_cancelled_from_its_own_callback(loop):
    # The callback's thread holds the lock: cancelling itself must not wait.
    seen = []

    def callback():
        handle.cancel()
        seen.append(handle.cancelled())
        loop.stop()

    handle = loop.call_soon_threadsafe(callback)
    loop.run_forever()
    assert seen == [True]
    assert handle.cancelled()


def test_threadsafe_handle_cancelled_from_another_thread_before_it_runs(loop):
    calls = []
    done = threading.Event()

    def worker():
        handle = loop.call_soon_threadsafe(calls.append, "ran")
        handle.cancel()
        calls.append(handle.cancelled())
        done.set()
        loop.call_soon_threadsafe(loop.stop)

    # The loop is busy until the worker has cancelled its handle.
    loop.call_soon(done.wait)
    thread = threading.Thread(target=worker)
    thread.start()
    loop.run_forever()
    thread.join()
    assert calls == [True]


# -- handles ---------------------------------------------------------------


def test_cancelled_handle_does_not_run(loop):
    calls = []
    handle = loop.call_soon(calls.append, "cancelled")
    loop.call_soon(calls.append, "kept")
    assert handle.cancelled() is False
    handle.cancel()
    handle.cancel()  # a second cancel is a no-op
    assert handle.cancelled() is True
    run_passes(loop, 2)
    assert calls == ["kept"]


def test_handle_cancel_from_an_earlier_callback_of_the_same_pass(loop):
    calls = []
    victim = None

    def killer():
        victim.cancel()

    loop.call_soon(killer)
    victim = loop.call_soon(calls.append, "victim")
    run_passes(loop, 2)
    assert calls == []


def test_cancel_after_run_marks_cancelled(loop):
    # asyncio's Handle.cancel() sets cancelled() even once the callback ran.
    handle = loop.call_soon(lambda: None)
    run_passes(loop, 1)
    assert handle.cancelled() is False
    handle.cancel()
    assert handle.cancelled() is True


def test_cancelled_timer_does_not_run_and_keeps_when(loop):
    calls = []
    handle = loop.call_later(0.01, calls.append, "timer")
    when = handle.when()
    handle.cancel()
    assert handle.cancelled() is True
    assert handle.when() == when
    loop.call_later(0.03, loop.stop)
    loop.run_forever()
    assert calls == []


def test_timer_cancel_from_a_callback_due_in_the_same_pass(loop):
    calls = []
    when = loop.time() + 0.02
    victim = None

    def killer():
        victim.cancel()

    loop.call_at(when, killer)
    victim = loop.call_at(when + 1e-9, calls.append, "victim")
    loop.call_at(when + 0.02, loop.stop)
    loop.run_forever()
    assert calls == []


def test_many_timers_mostly_cancelled(loop):
    # Exercises cancelled-timer cleanup (asyncio compacts its heap once more
    # than half of many timers are cancelled).
    calls = []
    handles = [loop.call_later(0.001 * (i % 10), calls.append, i) for i in range(1000)]
    for i, handle in enumerate(handles):
        if i % 7:
            handle.cancel()
    loop.call_later(0.02, loop.stop)
    loop.run_forever()
    assert sorted(calls) == [i for i in range(1000) if i % 7 == 0]


def test_timer_handles_compare_by_when(loop):
    early = loop.call_at(loop.time() + 10, lambda: None)
    late = loop.call_at(loop.time() + 20, lambda: None)
    assert early < late and late > early and early <= late and late >= early
    early.cancel()
    late.cancel()


def test_handles_have_asyncio_handle_api(loop, loop_name):
    # Documented difference: zloop's handles are native types that offer
    # asyncio.Handle's and asyncio.TimerHandle's public API but are not their
    # subclasses (uvloop's are not either). asyncio.Handle keeps its state in
    # Python __slots__, which a native layout cannot extend without paying
    # for a GC-tracked object per call_soon. Code that merely annotates with
    # asyncio.TimerHandle (uvicorn does) is unaffected.
    soon = loop.call_soon(lambda: None)
    later = loop.call_later(10, lambda: None)
    api = ["cancel", "cancelled"]
    if hasattr(asyncio.Handle, "get_context"):  # 3.12+
        api.append("get_context")
    for name in api:
        assert callable(getattr(soon, name))
        assert callable(getattr(later, name))
    assert isinstance(later.when(), float)
    expected_subclass = loop_name == "asyncio"
    assert isinstance(soon, asyncio.Handle) is expected_subclass
    assert isinstance(later, asyncio.TimerHandle) is expected_subclass
    soon.cancel()
    later.cancel()


def _callback_for_repr(*args):
    pass


def test_handle_repr_matches_asyncio(loop):
    handle = loop.call_soon(_callback_for_repr, 1, "x")
    assert repr(handle) == stock_handle_repr(_callback_for_repr, (1, "x"))
    assert re.fullmatch(r"<Handle _callback_for_repr\(.*\) at .*:\d+>", repr(handle))
    handle.cancel()
    assert repr(handle) == "<Handle cancelled>"
    assert repr(handle) == stock_handle_repr(
        _callback_for_repr, (1, "x"), cancelled=True
    )


def test_timer_handle_repr_matches_asyncio(loop):
    handle = loop.call_later(10, _callback_for_repr, 2)
    when = handle.when()
    assert repr(handle) == stock_handle_repr(_callback_for_repr, (2,), when=when)
    assert re.fullmatch(
        r"<TimerHandle when=[0-9.e+]+ _callback_for_repr\(.*\) at .*:\d+>",
        repr(handle),
    )
    handle.cancel()
    assert repr(handle) == f"<TimerHandle cancelled when={when}>"
    assert repr(handle) == stock_handle_repr(
        _callback_for_repr, (2,), when=when, cancelled=True
    )


def test_handle_repr_in_debug_names_where_it_was_made(loop):
    loop.set_debug(True)
    handle, line = loop.call_soon(_callback_for_repr), sys._getframe().f_lineno
    assert repr(handle).endswith(f" created at {__file__}:{line}>")
    assert repr(handle).startswith("<Handle _callback_for_repr() at ")
    handle.cancel()
    # In debug mode a cancelled handle keeps the repr it had, for logging.
    assert repr(handle).startswith("<Handle cancelled _callback_for_repr() at ")


# -- contexts --------------------------------------------------------------


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "threadsafe"])
def test_callback_runs_in_given_context_and_changes_stay_there(loop, method):
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "in-ctx")
    seen = []

    def callback():
        seen.append(VAR.get())
        VAR.set("changed-inside")
        loop.stop()

    if method == "call_soon":
        loop.call_soon(callback, context=ctx)
    elif method == "call_later":
        loop.call_later(0.001, callback, context=ctx)
    elif method == "call_at":
        loop.call_at(loop.time(), callback, context=ctx)
    else:
        loop.call_soon_threadsafe(callback, context=ctx)
    loop.run_forever()
    assert seen == ["in-ctx"]
    assert ctx[VAR] == "changed-inside"
    assert VAR.get() == "unset"


def test_callback_runs_in_a_copy_of_the_schedulers_context(loop):
    seen = []

    def callback():
        seen.append(VAR.get())
        VAR.set("changed-inside")

    def schedule():
        VAR.set("at-schedule")
        loop.call_soon(callback)
        VAR.set("after-schedule")
        loop.call_soon(lambda: seen.append(VAR.get()))

    contextvars.copy_context().run(schedule)
    run_passes(loop, 2)
    assert seen == ["at-schedule", "after-schedule"]
    assert VAR.get() == "unset"


def test_call_soon_threadsafe_runs_in_a_copy_of_the_posting_threads_context(loop):
    # asyncio copies the context of the thread that posts, as call_soon
    # does (rloop 0.5 runs such callbacks in an empty context instead).
    seen = []

    def callback():
        seen.append(VAR.get())
        VAR.set("changed-inside")
        loop.stop()

    def post():
        VAR.set("in-thread")
        loop.call_soon_threadsafe(callback)
        VAR.set("after-post")

    thread = threading.Thread(target=contextvars.copy_context().run, args=(post,))
    thread.start()
    loop.run_forever()
    thread.join()
    assert seen == ["in-thread"]
    assert VAR.get() == "unset"


def test_callbacks_sharing_a_context_see_each_others_changes(loop):
    ctx = contextvars.Context()
    seen = []
    loop.call_soon(VAR.set, "first", context=ctx)
    loop.call_soon(lambda: seen.append(VAR.get()), context=ctx)
    run_passes(loop, 2)
    assert seen == ["first"]


@pytest.mark.skipif(PY < (3, 12), reason="Handle.get_context() is new in 3.12")
def test_handle_get_context(loop):
    ctx = contextvars.copy_context()
    assert loop.call_soon(lambda: None, context=ctx).get_context() is ctx
    assert loop.call_later(1, lambda: None, context=ctx).get_context() is ctx
    implicit = loop.call_soon(lambda: None).get_context()
    assert isinstance(implicit, contextvars.Context)
    assert implicit is not ctx


# -- order within one pass ----------------------------------------------------


def test_due_timers_run_after_callbacks_already_ready(loop):
    # asyncio.base_events._run_once appends due timers to the ready queue
    # after what is already there, even a timer scheduled first.
    calls = []
    loop.call_later(0, calls.append, "timer")
    loop.call_soon(calls.append, "soon")
    run_passes(loop, 3)
    assert calls == ["soon", "timer"]


def test_pass_order_is_ready_then_io_then_timers(loop):
    a, b = socket.socketpair()
    try:
        calls = []

        def on_readable():
            calls.append("io")
            a.recv(10)
            loop.remove_reader(a.fileno())

        b.send(b"x")
        loop.add_reader(a.fileno(), on_readable)
        loop.call_later(0, calls.append, "timer")
        loop.call_soon(calls.append, "soon")
        run_passes(loop, 3)
        assert calls == ["soon", "io", "timer"]
    finally:
        a.close()
        b.close()
