"""Debug mode: set_debug/get_debug, slow callbacks, source tracebacks, checks."""

import asyncio
import logging
import os
import re
import sys
import threading

import pytest

from _support import run_passes


def _noop(*args):
    pass


def test_debug_off_by_default_and_roundtrip(loop):
    env_debug = bool(os.environ.get("PYTHONASYNCIODEBUG")) or sys.flags.dev_mode
    assert loop.get_debug() is env_debug
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_slow_callback_duration_default(loop):
    assert loop.slow_callback_duration == 0.1


def test_slow_callback_is_logged_in_debug_mode(loop, caplog):
    # A threshold of 0 makes every callback "slow": no clock games needed.
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 0
    loop.call_soon(_noop, "slow")
    run_passes(loop, 1)
    messages = [
        r.getMessage() for r in caplog.records if "_noop" in r.getMessage()
    ]
    assert len(messages) == 1
    assert re.fullmatch(
        r"Executing <Handle _noop\(.*\) at .*> took \d+\.\d{3} seconds", messages[0]
    ), messages[0]
    record = next(r for r in caplog.records if "_noop" in r.getMessage())
    assert record.name == "asyncio"
    assert record.levelno == logging.WARNING


def test_slow_task_step_is_logged_in_debug_mode(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(True)
    loop.slow_callback_duration = 0

    async def stepper():
        return 1

    loop.run_until_complete(stepper())
    assert any(
        r.name == "asyncio" and r.getMessage().startswith("Executing <Task ")
        for r in caplog.records
    )


def test_no_slow_callback_warning_outside_debug_mode(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")
    loop.set_debug(False)
    loop.slow_callback_duration = 0
    loop.call_soon(_noop)
    run_passes(loop, 1)
    assert not [r for r in caplog.records if r.getMessage().startswith("Executing")]


def test_source_traceback_in_debug_mode(loop):
    loop.set_debug(True)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def boom():
        raise ValueError

    handle, line = loop.call_soon(boom), sys._getframe().f_lineno
    run_passes(loop, 2)
    assert len(contexts) == 1
    tb = contexts[0]["source_traceback"]
    assert contexts[0]["handle"] is handle
    assert (tb[-1].filename, tb[-1].lineno) == (__file__, line)
    assert tb[-1].name == "test_source_traceback_in_debug_mode"


def test_timer_source_traceback_names_the_call_later_line(loop):
    loop.set_debug(True)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def boom():
        loop.stop()
        raise ValueError

    line = sys._getframe().f_lineno + 1
    loop.call_later(0.001, boom)
    loop.run_forever()
    tb = contexts[0]["source_traceback"]
    assert (tb[-1].filename, tb[-1].lineno) == (__file__, line)


def test_no_source_traceback_outside_debug_mode(loop):
    loop.set_debug(False)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    loop.call_soon(lambda: 1 / 0)
    run_passes(loop, 2)
    assert "source_traceback" not in contexts[0]


def test_coroutine_origin_tracking_while_running_in_debug(loop):
    before = sys.get_coroutine_origin_tracking_depth()
    loop.set_debug(True)

    async def depth():
        return sys.get_coroutine_origin_tracking_depth()

    # asyncio.constants.DEBUG_STACK_DEPTH
    assert loop.run_until_complete(depth()) == 10
    assert sys.get_coroutine_origin_tracking_depth() == before


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at"])
def test_non_threadsafe_call_from_another_thread_raises_in_debug(loop, method):
    loop.set_debug(True)
    outcome = loop.create_future()

    def worker():
        try:
            if method == "call_soon":
                loop.call_soon(_noop)
            elif method == "call_later":
                loop.call_later(1, _noop)
            else:
                loop.call_at(loop.time() + 1, _noop)
        except BaseException as exc:
            loop.call_soon_threadsafe(outcome.set_result, exc)
        else:
            loop.call_soon_threadsafe(outcome.set_result, None)

    async def main():
        thread = threading.Thread(target=worker)
        thread.start()
        try:
            return await outcome
        finally:
            thread.join()

    exc = loop.run_until_complete(main())
    assert type(exc) is RuntimeError
    assert str(exc) == (
        "Non-thread-safe operation invoked on an event loop other than the current one"
    )


def test_call_soon_from_another_thread_while_not_running_is_allowed_in_debug(loop):
    # asyncio only knows "the loop's thread" while the loop runs.
    loop.set_debug(True)
    errors = []

    def worker():
        try:
            loop.call_soon(_noop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors == []


async def _coroutine_function():
    pass


@pytest.mark.parametrize(
    "method, name",
    [
        ("call_soon", "call_soon"),
        # asyncio's call_later checks through call_at, and says so.
        ("call_later", "call_at"),
        ("call_at", "call_at"),
        ("call_soon_threadsafe", "call_soon_threadsafe"),
    ],
)
@pytest.mark.parametrize("bad", ["not callable", "coroutine function", "coroutine"])
def test_bad_callbacks_raise_type_error_in_debug(loop, method, name, bad):
    loop.set_debug(True)
    coro = None
    if bad == "not callable":
        callback, message = 1, f"a callable object was expected by {name}(), got 1"
    elif bad == "coroutine function":
        callback, message = _coroutine_function, f"coroutines cannot be used with {name}()"
    else:
        coro = callback = _coroutine_function()
        message = f"coroutines cannot be used with {name}()"
    args = {
        "call_soon": (),
        "call_soon_threadsafe": (),
        "call_later": (1,),
        "call_at": (loop.time() + 1,),
    }[method]
    try:
        with pytest.raises(TypeError) as info:
            getattr(loop, method)(*args, callback)
        assert str(info.value) == message
    finally:
        if coro is not None:
            coro.close()


def test_run_in_executor_rejects_coroutine_functions_in_debug(loop):
    loop.set_debug(True)
    with pytest.raises(TypeError) as info:
        loop.run_in_executor(None, _coroutine_function)
    assert str(info.value) == "coroutines cannot be used with run_in_executor()"


def test_set_debug_while_running_takes_effect(loop):
    async def main():
        loop.set_debug(True)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return loop.get_debug(), sys.get_coroutine_origin_tracking_depth()

    assert loop.run_until_complete(main()) == (True, 10)
