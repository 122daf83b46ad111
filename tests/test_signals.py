"""add_signal_handler / remove_signal_handler."""

import asyncio
import contextlib
import os
import signal
import socket
import threading

import pytest

from _platform import signal_blocked, signal_caught
from _support import yield_passes

USR1 = signal.SIGUSR1
USR2 = signal.SIGUSR2


def _send(sig):
    """os.kill(self, sig), refusing if that would kill the test run."""
    if not signal_caught(sig) and not signal_blocked(sig):
        pytest.fail(f"{sig!r} is neither caught nor blocked: the loop did not install it")
    os.kill(os.getpid(), sig)


@pytest.fixture(autouse=True)
def restore_signal_dispositions():
    saved = {sig: signal.getsignal(sig) for sig in (USR1, USR2, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        if handler is not None:
            signal.signal(sig, handler)


def test_handler_runs_in_the_loop_with_its_args(loop):
    seen = []

    def handler(*args):
        seen.append((args, threading.get_ident(), asyncio.get_running_loop()))
        loop.stop()

    assert loop.add_signal_handler(USR1, handler, "a", 2) is None
    loop.call_soon(_send, USR1)
    loop.run_forever()
    assert seen == [(("a", 2), threading.get_ident(), loop)]


def test_signal_from_another_thread_wakes_an_idle_loop(loop):
    got = []

    def handler():
        got.append(USR1)
        loop.stop()

    loop.add_signal_handler(USR1, handler)
    sender = threading.Thread(target=_send, args=(USR1,))
    loop.call_soon(sender.start)
    loop.run_forever()  # nothing but the signal can end this
    sender.join()
    assert got == [USR1]


def test_signals_sent_one_at_a_time_are_all_handled(loop):
    sent = 50
    received = []
    waiter = None

    def handler():
        received.append(1)
        if not waiter.done():
            waiter.set_result(None)

    loop.add_signal_handler(USR1, handler)

    async def main():
        nonlocal waiter
        for _ in range(sent):
            waiter = loop.create_future()
            _send(USR1)
            await waiter
        await yield_passes(3)

    loop.run_until_complete(main())
    assert len(received) == sent


def test_burst_of_signals_is_handled_at_least_once_and_never_more_than_sent(loop):
    # A POSIX standard signal that arrives while the same signal is pending is
    # merged with it, so asyncio promises no count beyond "at least one";
    # it runs the handler once per signal the process actually took (on
    # Linux, kill() to oneself from the main thread usually delivers each).
    # It never invents signals.  SIGUSR2, sent last, fences the burst.
    sent = 50
    usr1 = []
    fence = loop.create_future()
    loop.add_signal_handler(USR1, usr1.append, 1)
    loop.add_signal_handler(USR2, lambda: fence.done() or fence.set_result(None))

    async def main():
        for _ in range(sent):
            _send(USR1)
        _send(USR2)
        await fence
        await yield_passes(3)

    loop.run_until_complete(main())
    assert 1 <= len(usr1) <= sent


def test_two_signals_two_handlers(loop):
    got = []

    def handler(name):
        got.append(name)
        if len(got) == 2:
            loop.stop()

    loop.add_signal_handler(USR1, handler, "usr1")
    loop.add_signal_handler(USR2, handler, "usr2")
    loop.call_soon(_send, USR1)
    loop.call_soon(_send, USR2)
    loop.run_forever()
    assert sorted(got) == ["usr1", "usr2"]


def test_replacing_a_handler(loop):
    got = []
    loop.add_signal_handler(USR1, got.append, "old")
    loop.add_signal_handler(USR1, lambda: (got.append("new"), loop.stop()))
    loop.call_soon(_send, USR1)
    loop.run_forever()
    assert got == ["new"]


def test_handler_exception_goes_to_the_exception_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def handler():
        loop.call_soon(loop.stop)
        raise ArithmeticError("in signal handler")

    loop.add_signal_handler(USR1, handler)
    loop.call_soon(_send, USR1)
    loop.run_forever()
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], ArithmeticError)
    assert contexts[0]["message"].startswith("Exception in callback ")


def test_remove_returns_whether_a_handler_was_removed(loop):
    assert loop.remove_signal_handler(USR1) is False
    loop.add_signal_handler(USR1, lambda: None)
    assert signal_caught(USR1) or signal_blocked(USR1)
    assert loop.remove_signal_handler(USR1) is True
    assert loop.remove_signal_handler(USR1) is False


def test_remove_restores_the_default_disposition(loop):
    loop.add_signal_handler(USR1, lambda: None)
    loop.remove_signal_handler(USR1)
    assert signal.getsignal(USR1) == signal.SIG_DFL
    assert not signal_caught(USR1)
    assert not signal_blocked(USR1)


def test_remove_sigint_restores_default_int_handler(loop):
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_close_removes_handlers(loop):
    loop.add_signal_handler(USR1, lambda: None)
    loop.add_signal_handler(USR2, lambda: None)
    loop.close()
    for sig in (USR1, USR2):
        assert signal.getsignal(sig) == signal.SIG_DFL
        assert not signal_caught(sig)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_uncatchable_signals_raise_runtime_error(loop, sig):
    with pytest.raises(RuntimeError) as info:
        loop.add_signal_handler(sig, lambda: None)
    assert str(info.value) == f"sig {int(sig)} cannot be caught"
    assert loop.remove_signal_handler(sig) is False


@pytest.mark.parametrize("sig", [0, -1, 65, 1000])
@pytest.mark.parametrize("method", ["add_signal_handler", "remove_signal_handler"])
def test_invalid_signal_numbers_raise_value_error(loop, method, sig):
    args = (sig, lambda: None) if method == "add_signal_handler" else (sig,)
    with pytest.raises(ValueError) as info:
        getattr(loop, method)(*args)
    assert str(info.value) == f"invalid signal number {sig}"


@pytest.mark.parametrize("method", ["add_signal_handler", "remove_signal_handler"])
def test_non_int_signal_raises_type_error(loop, method):
    args = ("x", lambda: None) if method == "add_signal_handler" else ("x",)
    with pytest.raises(TypeError) as info:
        getattr(loop, method)(*args)
    assert str(info.value) == "sig must be an int, not 'x'"


def test_coroutine_function_handler_raises_type_error(loop):
    async def handler():
        pass

    with pytest.raises(TypeError) as info:
        loop.add_signal_handler(USR1, handler)
    assert str(info.value) == "coroutines cannot be used with add_signal_handler()"


def test_add_from_a_non_main_thread_raises_runtime_error(loop):
    outcome = []

    def worker():
        try:
            loop.add_signal_handler(USR1, lambda: None)
        except BaseException as exc:
            outcome.append(exc)
        outcome.append(loop.remove_signal_handler(USR2))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    exc, removed = outcome
    assert type(exc) is RuntimeError
    assert str(exc) == "set_wakeup_fd only works in main thread of the main interpreter"
    assert removed is False
    assert signal.getsignal(USR1) == signal.SIG_DFL


def test_add_on_a_closed_loop_raises(loop):
    loop.close()
    with pytest.raises(RuntimeError) as info:
        loop.add_signal_handler(USR1, lambda: None)
    assert str(info.value) == "Event loop is closed"


class _Deadline(BaseException):
    """What a signal-based deadline raises (pytest-timeout's Failed is a
    BaseException too)."""


@pytest.mark.parametrize("tries", [20])
def test_a_python_signal_handlers_exception_leaves_the_loop_every_time(loop, tries):
    # A plain signal.signal() handler (not add_signal_handler) that raises,
    # its signal made pending while the loop waits, together with a reader
    # made ready: asyncio's selector returns into Python code, which runs
    # the handler before any callback, so the exception leaves
    # run_until_complete. Inside a callback it would go to the exception
    # handler instead and the loop would run on.
    a, b = socket.socketpair()
    a.setblocking(False)
    main_thread = threading.get_ident()

    def deadline(signum, frame):
        raise _Deadline

    signal.signal(USR1, deadline)
    loop.add_reader(a.fileno(), lambda: a.recv(100))
    escaped = 0
    try:
        for _ in range(tries):

            def poke():
                b.send(b"x")
                signal.pthread_kill(main_thread, USR1)

            async def wait():
                threading.Timer(0.01, poke).start()
                await asyncio.sleep(0.5)

            task = loop.create_task(wait())
            try:
                loop.run_until_complete(task)
            except _Deadline:
                escaped += 1
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
    finally:
        loop.remove_reader(a.fileno())
        a.close()
        b.close()
    assert escaped == tries
