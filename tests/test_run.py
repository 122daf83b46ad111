"""run_forever, run_until_complete, stop, close, and the running-loop state."""

import asyncio
import threading

import pytest

from _support import PY


async def _answer():
    await asyncio.sleep(0)
    return 42


def test_state_before_during_and_after_run(loop):
    seen = []

    def probe():
        seen.append((loop.is_running(), loop.is_closed()))
        loop.stop()

    assert (loop.is_running(), loop.is_closed()) == (False, False)
    loop.call_soon(probe)
    loop.run_forever()
    assert seen == [(True, False)]
    assert loop.is_running() is False
    loop.close()
    assert (loop.is_running(), loop.is_closed()) == (False, True)


def test_run_until_complete_returns_the_result(loop):
    assert loop.run_until_complete(_answer()) == 42


def test_run_until_complete_raises_the_exception(loop):
    async def boom():
        await asyncio.sleep(0)
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        loop.run_until_complete(boom())


def test_run_until_complete_accepts_a_future(loop):
    fut = loop.create_future()
    loop.call_soon(fut.set_result, "done")
    assert loop.run_until_complete(fut) == "done"


def test_run_until_complete_accepts_an_awaitable(loop):
    class Awaitable:
        def __await__(self):
            return _answer().__await__()

    assert loop.run_until_complete(Awaitable()) == 42


def test_run_until_complete_cancelled_future_raises_cancelled(loop):
    fut = loop.create_future()
    loop.call_soon(fut.cancel)
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(fut)


def test_stop_before_the_future_completes(loop):
    fut = loop.create_future()
    loop.call_soon(loop.stop)
    with pytest.raises(RuntimeError) as info:
        loop.run_until_complete(fut)
    assert str(info.value) == "Event loop stopped before Future completed."
    assert not loop.is_running()


def test_loop_can_run_again_after_stop(loop):
    calls = []
    for i in range(3):
        loop.call_soon(calls.append, i)
        loop.call_soon(loop.stop)
        loop.run_forever()
    assert calls == [0, 1, 2]
    assert loop.run_until_complete(_answer()) == 42


@pytest.mark.parametrize("how", ["run_forever", "run_until_complete"])
def test_nested_run_raises(loop, how):
    async def main():
        if how == "run_forever":
            loop.run_forever()
        else:
            coro = _answer()
            try:
                loop.run_until_complete(coro)
            finally:
                coro.close()

    with pytest.raises(RuntimeError) as info:
        loop.run_until_complete(main())
    assert str(info.value) == "This event loop is already running"
    assert loop.run_until_complete(_answer()) == 42


def test_running_another_loop_inside_a_loop_raises(loop, loop_factory):
    other = loop_factory()
    try:

        async def main():
            coro = _answer()
            try:
                other.run_until_complete(coro)
            finally:
                coro.close()

        with pytest.raises(RuntimeError) as info:
            loop.run_until_complete(main())
        assert str(info.value) == (
            "Cannot run the event loop while another loop is running"
        )
    finally:
        other.close()


def test_loops_in_two_threads_run_independently(loop, loop_factory):
    results = {}

    def in_thread():
        other = loop_factory()
        try:
            results["thread"] = other.run_until_complete(_answer())
        finally:
            other.close()

    async def main():
        thread = threading.Thread(target=in_thread)
        thread.start()
        await loop.run_in_executor(None, thread.join)
        return await _answer()

    results["main"] = loop.run_until_complete(main())
    assert results == {"thread": 42, "main": 42}


def test_close_a_running_loop_raises(loop):
    async def main():
        loop.close()

    with pytest.raises(RuntimeError) as info:
        loop.run_until_complete(main())
    assert str(info.value) == "Cannot close a running event loop"
    assert not loop.is_closed()


def test_close_twice_is_fine(loop):
    loop.close()
    loop.close()
    assert loop.is_closed()


def test_close_drops_pending_callbacks(loop):
    calls = []
    loop.call_soon(calls.append, "soon")
    loop.call_later(0, calls.append, "later")
    loop.close()
    assert calls == []


@pytest.mark.parametrize("how", ["run_forever", "run_until_complete"])
def test_run_after_close_raises(loop, how):
    loop.close()
    coro = _answer()
    with pytest.raises(RuntimeError) as info:
        if how == "run_forever":
            loop.run_forever()
        else:
            loop.run_until_complete(coro)
    coro.close()
    assert str(info.value) == "Event loop is closed"


def test_get_running_loop_inside_callback_and_task(loop):
    seen = []

    def callback():
        seen.append(asyncio.get_running_loop() is loop)
        seen.append(asyncio.current_task() is None)

    async def task():
        seen.append(asyncio.get_running_loop() is loop)
        seen.append(asyncio.current_task() is current)
        seen.append(asyncio.current_task(loop) is current)
        seen.append(asyncio.get_event_loop() is loop)

    loop.call_soon(callback)
    current = loop.create_task(task())
    loop.run_until_complete(current)
    assert seen == [True, True, True, True, True, True]


def test_no_running_loop_outside_run(loop):
    loop.run_until_complete(_answer())
    with pytest.raises(RuntimeError, match="no running event loop"):
        asyncio.get_running_loop()
    assert asyncio._get_running_loop() is None


def test_running_loop_is_reset_after_an_exception(loop):
    async def boom():
        raise ValueError

    with pytest.raises(ValueError):
        loop.run_until_complete(boom())
    assert asyncio._get_running_loop() is None
    assert not loop.is_running()


def test_all_tasks_lists_pending_tasks_of_this_loop(loop):
    async def main():
        blocker = loop.create_future()

        async def wait_blocker():
            await blocker

        pending = loop.create_task(wait_blocker(), name="pending")
        await asyncio.sleep(0)
        tasks = asyncio.all_tasks()
        blocker.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        return {task.get_name() for task in tasks}, asyncio.current_task().get_name()

    names, me = loop.run_until_complete(main())
    assert names == {"pending", me}


def _expected_loop_type(loop_factory):
    probe = loop_factory()
    probe.close()
    return type(probe)


@pytest.mark.skipif(PY < (3, 12), reason="asyncio.run(loop_factory=) is new in 3.12")
def test_asyncio_run_with_loop_factory(loop_factory):
    expected = _expected_loop_type(loop_factory)
    seen = {}

    async def main():
        running = asyncio.get_running_loop()
        seen["type"] = type(running)
        seen["loop"] = running
        return await _answer()

    assert asyncio.run(main(), loop_factory=loop_factory) == 42
    assert seen["type"] is expected
    assert seen["loop"].is_closed()


def test_runner_with_loop_factory(loop_factory):
    expected = _expected_loop_type(loop_factory)

    async def which_loop():
        return asyncio.get_running_loop()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        first = runner.run(which_loop())
        second = runner.run(which_loop())
        assert first is second is runner.get_loop()
        assert type(first) is expected
        assert runner.run(_answer()) == 42
    assert first.is_closed()


def test_runner_debug_flag(loop_factory):
    async def debug_flag():
        return asyncio.get_running_loop().get_debug()

    with asyncio.Runner(loop_factory=loop_factory, debug=True) as runner:
        assert runner.run(debug_flag()) is True


def test_runner_cancels_leftover_tasks_on_close(loop_factory):
    cancelled = []

    async def sleeper():
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        asyncio.get_running_loop().create_task(sleeper())
        await asyncio.sleep(0)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    assert cancelled == [True]
