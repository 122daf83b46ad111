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


@pytest.mark.skipif(PY < (3, 14), reason="3.14 passes create_task()'s keywords through")
@pytest.mark.parametrize("debug", [False, True])
def test_task_factory_gets_the_keywords_as_given(loop, debug):
    # 3.14: factory(loop, coro, **kwargs) with exactly the caller's keywords
    # (none added, name= not set afterwards), from loop.create_task and
    # asyncio.create_task alike.
    loop.set_debug(debug)
    calls = []

    def factory(lp, coro, **kwargs):
        calls.append(kwargs)
        return asyncio.Task(coro, loop=lp, **kwargs)

    loop.set_task_factory(factory)
    ctx = contextvars.copy_context()

    async def noop():
        pass

    async def main():
        await asyncio.create_task(noop(), name="n", eager_start=True)
        await loop.create_task(noop(), context=ctx, eager_start=False)
        await loop.create_task(coro=noop())

    loop.run_until_complete(main())
    assert calls[1:] == [{"name": "n", "eager_start": True},
                         {"context": ctx, "eager_start": False}, {}]


@pytest.mark.skipif(PY < (3, 14), reason="3.14 passes create_task()'s keywords through")
def test_create_task_refuses_an_unknown_keyword_as_task_does(loop):
    coro = asyncio.sleep(0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        loop.create_task(coro, colour="red")
    coro.close()


@pytest.mark.skipif(PY < (3, 14), reason="create_task(eager_start=) is new in 3.14")
def test_asyncio_create_task_eager_start_runs_up_to_the_first_await(loop):
    steps = []

    async def child():
        steps.append("child started")
        await asyncio.sleep(0)
        steps.append("child resumed")

    async def main():
        task = asyncio.create_task(child(), eager_start=True)
        steps.append("created")
        await task

    loop.run_until_complete(main())
    assert steps == ["child started", "created", "child resumed"]


@pytest.fixture
def python_task_classes(monkeypatch):
    """asyncio's pure-Python Task and Future swapped in, as CPython's own
    tests (and programs that want them) do; restored afterwards."""
    from asyncio import futures, tasks

    swaps = [(tasks, "Task", "_PyTask"), (futures, "Future", "_PyFuture"),
             (tasks, "current_task", "_py_current_task"),  # C from 3.12
             (tasks, "all_tasks", "_py_all_tasks")]  # C from 3.14
    for module, name, py_name in swaps:
        if not hasattr(module, py_name):
            continue  # only the pure-Python function exists on this Python
        monkeypatch.setattr(module, name, getattr(module, py_name))
        monkeypatch.setattr(asyncio, name, getattr(module, py_name))
    return tasks._PyTask, futures._PyFuture


def test_tasks_and_futures_follow_a_swapped_class(loop, python_task_classes):
    # The loop makes whatever asyncio.tasks.Task and asyncio.futures.Future
    # are when it is called, as base_events does.
    py_task, py_future = python_task_classes

    async def child():
        await asyncio.sleep(0)
        return asyncio.current_task()

    async def main():
        fut = loop.create_future()
        loop.call_soon(fut.set_result, "done")
        task = loop.create_task(child())
        return type(fut), await fut, type(task), await task is task

    assert loop.run_until_complete(main()) == (py_future, "done", py_task, True)


@pytest.mark.parametrize("flavour", ["c", "py"])
def test_all_tasks_from_another_thread_sees_the_loops_tasks(loop, flavour, request):
    # The C all_tasks() finds C tasks of every thread; with the pure-Python
    # Task swapped in (as test_free_threading's Py variants do), the
    # pure-Python all_tasks() finds them.
    import threading

    from asyncio import tasks

    if flavour == "py":
        request.getfixturevalue("python_task_classes")
    all_tasks = tasks.all_tasks
    seen = []

    async def sleeper():
        await asyncio.sleep(3600)

    async def main():
        mine = [loop.create_task(sleeper()) for _ in range(3)]
        await asyncio.sleep(0)
        thread = threading.Thread(target=lambda: seen.append(all_tasks(loop)))
        thread.start()
        await loop.run_in_executor(None, thread.join)
        for task in mine:
            task.cancel()
        await asyncio.gather(*mine, return_exceptions=True)
        return set(mine) | {asyncio.current_task()}

    result = loop.run_until_complete(main())
    assert seen == [result]


@pytest.mark.skipif(PY < (3, 14), reason="asyncio.capture_call_graph is new in 3.14")
def test_capture_call_graph_sees_awaiting_tasks(loop):
    async def leaf(graphs):
        graphs.append(asyncio.capture_call_graph())

    async def middle(graphs):
        await loop.create_task(leaf(graphs), name="leaf")

    async def main():
        graphs = []
        await loop.create_task(middle(graphs), name="middle")
        return graphs[0]

    graph = loop.run_until_complete(main())
    assert graph.future.get_name() == "leaf"
    assert [g.future.get_name() for g in graph.awaited_by] == ["middle"]
