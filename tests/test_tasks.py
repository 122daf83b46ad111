"""create_future, create_task, task factories and eager tasks."""

import asyncio
import contextvars
import re

import pytest

from _support import PY

VAR = contextvars.ContextVar("VAR", default="unset")


def test_create_future_is_bound_to_the_loop(loop):
    fut = loop.create_future()
    assert asyncio.isfuture(fut)
    assert isinstance(fut, asyncio.Future)
    assert fut.get_loop() is loop
    assert not fut.done()
    loop.call_soon(fut.set_result, "value")
    assert loop.run_until_complete(fut) == "value"


def test_future_done_callbacks_run_via_the_loop(loop):
    fut = loop.create_future()
    order = []
    fut.add_done_callback(lambda f: order.append(("cb", f.result())))
    fut.set_result(1)
    order.append("after set_result")  # callbacks are scheduled, not called
    loop.run_until_complete(asyncio.sleep(0))
    assert order == ["after set_result", ("cb", 1)]


def test_create_task_runs_the_coroutine(loop):
    async def coro(x):
        await asyncio.sleep(0)
        return x * 2

    task = loop.create_task(coro(21))
    assert isinstance(task, asyncio.Task)
    assert task.get_loop() is loop
    assert loop.run_until_complete(task) == 42


def test_create_task_name(loop):
    async def noop():
        pass

    named = loop.create_task(noop(), name="worker-1")
    unnamed = loop.create_task(noop())
    assert named.get_name() == "worker-1"
    assert re.fullmatch(r"Task-\d+", unnamed.get_name())
    loop.run_until_complete(asyncio.gather(named, unnamed))


def test_create_task_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "task-ctx")

    async def read_and_write():
        seen = VAR.get()
        VAR.set("changed-in-task")
        return seen

    assert loop.run_until_complete(loop.create_task(read_and_write(), context=ctx)) == (
        "task-ctx"
    )
    assert ctx[VAR] == "changed-in-task"
    assert VAR.get() == "unset"


def test_create_task_rejects_non_coroutines(loop):
    with pytest.raises(TypeError) as info:
        loop.create_task(1)
    assert str(info.value) == "a coroutine was expected, got 1"


def test_task_cancel(loop):
    async def forever():
        await loop.create_future()

    async def main():
        task = loop.create_task(forever())
        await asyncio.sleep(0)
        task.cancel("stop it")
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert loop.run_until_complete(main()) is True


@pytest.mark.skipif(PY < (3, 14), reason="create_task(eager_start=) is new in 3.14")
def test_create_task_eager_start(loop):
    started = []

    async def coro():
        started.append(True)

    async def main():
        task = loop.create_task(coro(), eager_start=True)
        assert started == [True]
        assert task.done()

    loop.run_until_complete(main())


def test_task_factory_roundtrip_and_use(loop):
    made = []

    def factory(lp, coro, **kwargs):
        task = asyncio.Task(coro, loop=lp, **kwargs)
        made.append((lp, task, kwargs))
        return task

    assert loop.get_task_factory() is None
    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def child():
        return "child"

    async def main():
        return await asyncio.create_task(child())

    assert loop.run_until_complete(main()) == "child"
    # run_until_complete's own task and asyncio.create_task's both go through it.
    assert len(made) == 2
    assert all(lp is loop for lp, _, _ in made)

    loop.set_task_factory(None)
    assert loop.get_task_factory() is None
    loop.run_until_complete(main())
    assert len(made) == 2


def test_task_factory_gets_context_and_name(loop):
    calls = []

    def factory(lp, coro, **kwargs):
        calls.append(sorted(kwargs))
        return asyncio.Task(coro, loop=lp, **kwargs)

    loop.set_task_factory(factory)
    ctx = contextvars.copy_context()

    async def noop():
        pass

    plain = loop.create_task(noop(), name="plain")
    with_ctx = loop.create_task(noop(), context=ctx)
    loop.run_until_complete(asyncio.gather(plain, with_ctx))
    assert plain.get_name() == "plain"
    if PY < (3, 14):
        # Up to 3.13 the factory is called as factory(loop, coro) or, when
        # context= is given, factory(loop, coro, context=ctx); name= is set
        # on the task afterwards.  3.14 passes every keyword through.
        assert calls == [[], ["context"]]


def test_set_task_factory_rejects_non_callables(loop):
    with pytest.raises(TypeError) as info:
        loop.set_task_factory(1)
    assert str(info.value) == "task factory must be a callable or None"


@pytest.mark.skipif(PY < (3, 12), reason="asyncio.eager_task_factory is new in 3.12")
def test_eager_task_factory_starts_tasks_synchronously(loop):
    loop.set_task_factory(asyncio.eager_task_factory)
    steps = []

    async def child(tag, suspend):
        steps.append(f"{tag} started")
        if suspend:
            await asyncio.sleep(0)
        steps.append(f"{tag} finished")
        return tag

    async def main():
        finished_eagerly = loop.create_task(child("a", suspend=False))
        steps.append("after a")
        assert finished_eagerly.done()
        suspended = loop.create_task(child("b", suspend=True))
        steps.append("after b")
        assert not suspended.done()
        return await asyncio.gather(finished_eagerly, suspended)

    assert loop.run_until_complete(main()) == ["a", "b"]
    assert steps == [
        "a started",
        "a finished",
        "after a",
        "b started",
        "after b",
        "b finished",
    ]


@pytest.mark.skipif(PY < (3, 12), reason="asyncio.eager_task_factory is new in 3.12")
def test_eager_task_sees_current_task_and_running_loop(loop):
    loop.set_task_factory(asyncio.eager_task_factory)
    seen = {}

    async def child():
        seen["loop"] = asyncio.get_running_loop()
        seen["task"] = asyncio.current_task()

    async def main():
        task = loop.create_task(child())
        return task

    task = loop.run_until_complete(main())
    assert seen["loop"] is loop
    assert seen["task"] is task


def test_gather_and_wait_for(loop):
    async def value(x):
        await asyncio.sleep(0)
        return x

    async def never():
        await loop.create_future()

    async def main():
        values = await asyncio.gather(*(value(i) for i in range(10)))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(never(), timeout=0.01)
        return values

    assert loop.run_until_complete(main()) == list(range(10))


def test_asyncio_sleep_with_result(loop):
    assert loop.run_until_complete(asyncio.sleep(0.001, result="slept")) == "slept"


def test_timeout_context_manager(loop):
    async def main():
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await loop.create_future()
        return "survived"

    assert loop.run_until_complete(main()) == "survived"
