"""Exception handlers, and exceptions that escape the loop."""

import asyncio
import contextvars
import gc
import logging

import pytest

from _support import PY, run_passes


def _raise(exc):
    raise exc


def test_exception_handler_roundtrip(loop):
    def handler(lp, ctx):
        pass

    assert loop.get_exception_handler() is None
    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None


def test_set_exception_handler_rejects_non_callables(loop):
    with pytest.raises(TypeError) as info:
        loop.set_exception_handler(1)
    assert str(info.value) == "A callable object or None is expected, got 1"


def test_raising_callback_goes_to_the_handler_and_the_loop_keeps_running(loop):
    contexts = []
    calls = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append((lp, ctx)))
    error = KeyError("from callback")
    handle = loop.call_soon(_raise, error)
    loop.call_soon(calls.append, "after")
    run_passes(loop, 2)
    assert calls == ["after"]
    assert len(contexts) == 1
    lp, ctx = contexts[0]
    assert lp is loop
    assert set(ctx) == {"message", "exception", "handle"}
    assert ctx["exception"] is error
    assert ctx["handle"] is handle
    assert ctx["message"].startswith("Exception in callback _raise(")


def test_raising_timer_callback_goes_to_the_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    handle = loop.call_later(0.001, _raise, IndexError("timer"))
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert [type(c["exception"]) for c in contexts] == [IndexError]
    assert contexts[0]["handle"] is handle


def test_default_handler_logs_to_the_asyncio_logger(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    error = ValueError("logged")
    loop.call_soon(_raise, error)
    run_passes(loop, 2)
    records = [r for r in caplog.records if r.exc_info and r.exc_info[1] is error]
    assert len(records) == 1
    record = records[0]
    assert record.name == "asyncio"
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("Exception in callback _raise(")
    assert "handle: <Handle " in record.getMessage()


def test_default_exception_handler_formats_the_context(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop.default_exception_handler({"message": "custom message", "extra": 123})
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("asyncio", "custom message\nextra: 123")
    ]


def test_default_exception_handler_without_message(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop.default_exception_handler({})
    assert [r.getMessage() for r in caplog.records] == ["Unhandled exception in event loop"]


def test_call_exception_handler_passes_the_context_through(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    ctx = {"message": "hello", "exception": OSError(5, "io"), "anything": object()}
    loop.call_exception_handler(ctx)
    assert contexts == [ctx]


def test_call_exception_handler_without_handler_logs(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop.call_exception_handler({"message": "no handler set"})
    assert [r.getMessage() for r in caplog.records] == ["no handler set"]


def test_failing_custom_handler_falls_back_to_the_default(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")

    def bad_handler(lp, ctx):
        raise RuntimeError("handler broke")

    loop.set_exception_handler(bad_handler)
    loop.call_exception_handler({"message": "original"})
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert messages[0].startswith("Unhandled error in exception handler\n")
    assert "context: {'message': 'original'}" in messages[0]
    assert isinstance(caplog.records[0].exc_info[1], RuntimeError)


def test_unretrieved_task_exception_reaches_the_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def fails():
        raise LookupError("never retrieved")

    task = loop.create_task(fails())
    run_passes(loop, 2)
    assert task.done()
    del task
    gc.collect()
    assert [c["message"] for c in contexts] == ["Task exception was never retrieved"]
    assert isinstance(contexts[0]["exception"], LookupError)


@pytest.mark.skipif(PY < (3, 12), reason="the handler runs in the handle's context from 3.12")
def test_handler_runs_in_the_failing_callbacks_context(loop):
    var = contextvars.ContextVar("var", default="outside")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "callback's context")
    seen = []
    loop.set_exception_handler(lambda lp, c: seen.append(var.get()))
    loop.call_soon(_raise, ValueError(), context=ctx)
    run_passes(loop, 2)
    assert seen == ["callback's context"]


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_from_callbacks_propagate_out_of_run_forever(loop, exc_type):
    calls = []
    handled = []
    loop.set_exception_handler(lambda lp, ctx: handled.append(ctx))
    loop.call_soon(_raise, exc_type())
    loop.call_soon(calls.append, "rest of the pass")
    with pytest.raises(exc_type):
        loop.run_forever()
    assert not loop.is_running()
    assert asyncio._get_running_loop() is None
    assert handled == []
    # asyncio leaves the rest of that pass queued: it runs on the next run.
    assert calls == []
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == ["rest of the pass"]


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_from_coroutines_propagate_out_of_run_until_complete(
    loop, exc_type
):
    async def main():
        await asyncio.sleep(0)
        raise exc_type()

    with pytest.raises(exc_type):
        loop.run_until_complete(main())
    assert not loop.is_running()
    assert loop.run_until_complete(asyncio.sleep(0, result="usable")) == "usable"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_base_exception_from_the_exception_handler_propagates(loop, exc_type):
    def handler(lp, ctx):
        raise exc_type()

    loop.set_exception_handler(handler)
    loop.call_soon(_raise, ValueError())
    with pytest.raises(exc_type):
        run_passes(loop, 2)


def test_exception_in_done_callback_goes_to_the_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    fut = loop.create_future()
    fut.add_done_callback(lambda f: _raise(ZeroDivisionError()))
    fut.set_result(None)
    run_passes(loop, 2)
    assert [type(c["exception"]) for c in contexts] == [ZeroDivisionError]
