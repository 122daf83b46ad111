"""Wrong arguments and closed loops: same exception type and message as asyncio."""

import asyncio

import pytest

from _support import run_passes


def _noop(*args):
    pass


async def _coro():
    pass


def test_call_later_non_number_delay(loop):
    with pytest.raises(TypeError) as info:
        loop.call_later("x", _noop)
    assert str(info.value) == "unsupported operand type(s) for +: 'float' and 'str'"


def test_call_later_none_delay(loop):
    with pytest.raises(TypeError) as info:
        loop.call_later(None, _noop)
    assert str(info.value) == "delay must not be None"


def test_call_at_none_when(loop):
    with pytest.raises(TypeError) as info:
        loop.call_at(None, _noop)
    assert str(info.value) == "when cannot be None"


@pytest.mark.parametrize("method", ["call_soon", "call_soon_threadsafe"])
def test_missing_callback(loop, method):
    with pytest.raises(TypeError):
        getattr(loop, method)()


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "call_soon_threadsafe"])
def test_unknown_keyword_argument(loop, method):
    args = {"call_later": (1,), "call_at": (1.0,)}.get(method, ())
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        getattr(loop, method)(*args, _noop, foo=1)


def test_non_callable_outside_debug_fails_when_run(loop):
    # Outside debug mode asyncio does not check the callback when it is
    # scheduled: calling it fails later, and that goes to the exception
    # handler like any failing callback.
    loop.set_debug(False)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    handle = loop.call_soon(1)
    run_passes(loop, 2)
    assert len(contexts) == 1
    assert contexts[0]["handle"] is handle
    assert type(contexts[0]["exception"]) is TypeError
    assert str(contexts[0]["exception"]) == "'int' object is not callable"


@pytest.mark.parametrize("delay", [float("inf"), 1e300, 10**30])
def test_huge_delays_are_accepted(loop, delay):
    calls = []
    handle = loop.call_later(delay, calls.append, "never")
    assert handle.when() >= delay
    loop.call_soon(calls.append, "soon")
    run_passes(loop, 3)
    assert calls == ["soon"]
    handle.cancel()
    run_passes(loop, 1)


def test_run_until_complete_rejects_non_awaitables(loop):
    with pytest.raises(TypeError) as info:
        loop.run_until_complete(1)
    assert str(info.value) == "An asyncio.Future, a coroutine or an awaitable is required"
    assert not loop.is_running()


def test_run_until_complete_rejects_a_future_of_another_loop(loop, loop_factory):
    other = loop_factory()
    try:
        with pytest.raises(ValueError) as info:
            loop.run_until_complete(other.create_future())
        assert str(info.value) == (
            "The future belongs to a different loop than the one specified as "
            "the loop argument"
        )
    finally:
        other.close()


def test_awaiting_a_future_of_another_loop_fails(loop, loop_factory):
    other = loop_factory()
    try:
        foreign = other.create_future()

        async def main():
            await foreign

        with pytest.raises(RuntimeError, match="attached to a different loop"):
            loop.run_until_complete(main())
    finally:
        other.close()


@pytest.mark.parametrize(
    "method",
    ["call_soon", "call_soon_threadsafe", "call_later", "call_at", "create_task",
     "run_forever", "run_until_complete"],
)
def test_closed_loop_raises_runtime_error(loop, method):
    loop.close()
    coro = _coro()
    calls = {
        "call_soon": lambda: loop.call_soon(_noop),
        "call_soon_threadsafe": lambda: loop.call_soon_threadsafe(_noop),
        "call_later": lambda: loop.call_later(1, _noop),
        "call_at": lambda: loop.call_at(1.0, _noop),
        "create_task": lambda: loop.create_task(coro),
        "run_forever": loop.run_forever,
        "run_until_complete": lambda: loop.run_until_complete(coro),
    }
    try:
        with pytest.raises(RuntimeError) as info:
            calls[method]()
        assert str(info.value) == "Event loop is closed"
    finally:
        coro.close()


def test_closed_loop_still_answers_harmless_calls(loop):
    loop.close()
    loop.stop()
    assert isinstance(loop.time(), float)
    assert loop.is_closed() and not loop.is_running()
    assert loop.get_debug() in (True, False)
    # asyncio's create_future() does not check for a closed loop.
    assert not loop.create_future().done()


def test_future_callbacks_on_a_closed_loop_raise(loop):
    fut = loop.create_future()
    fut.add_done_callback(_noop)
    loop.close()
    with pytest.raises(RuntimeError) as info:
        fut.set_result(None)
    assert str(info.value) == "Event loop is closed"
