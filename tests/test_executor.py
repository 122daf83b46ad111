"""Async generators, executors and the resolver (getaddrinfo/getnameinfo)."""

import asyncio
import concurrent.futures
import gc
import socket
import sys
import threading

import pytest

from _support import PY

# -- async generators --------------------------------------------------------


def test_asyncgen_hooks_installed_while_running_and_restored_after(loop):
    before = sys.get_asyncgen_hooks()

    async def hooks():
        return sys.get_asyncgen_hooks()

    inside = loop.run_until_complete(hooks())
    assert inside.firstiter is not None and inside.finalizer is not None
    assert inside != before
    assert sys.get_asyncgen_hooks() == before


async def _first(gen):
    # Step the generator inside the loop: the loop's firstiter hook only
    # sees generators first iterated while it runs.
    return await gen.__anext__()


def test_shutdown_asyncgens_finalizes_an_unfinished_generator(loop):
    events = []

    async def agen():
        try:
            events.append("started")
            yield 1
            yield 2
        finally:
            events.append("finalized in loop" if asyncio._get_running_loop() is loop else "?")

    gen = agen()
    assert loop.run_until_complete(_first(gen)) == 1
    assert events == ["started"]
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert events == ["started", "finalized in loop"]


def test_garbage_collected_asyncgen_is_finalized_by_the_loop(loop):
    finalized = asyncio.Event()
    where = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            where.append(asyncio._get_running_loop() is loop)
            finalized.set()

    async def main():
        gen = agen()
        await gen.__anext__()
        del gen  # unfinished: the loop's finalizer hook must aclose() it
        gc.collect()
        await asyncio.wait_for(finalized.wait(), timeout=10)

    loop.run_until_complete(main())
    assert where == [True]


def test_shutdown_asyncgens_reports_errors_to_the_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def agen():
        try:
            yield 1
        finally:
            raise ValueError("in finally")

    gen = agen()
    loop.run_until_complete(_first(gen))
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert len(contexts) == 1
    assert contexts[0]["message"].startswith(
        "an error occurred during closing of asynchronous generator"
    )
    assert isinstance(contexts[0]["exception"], ValueError)
    assert contexts[0]["asyncgen"] is gen


def test_asyncgen_started_after_shutdown_warns(loop):
    loop.run_until_complete(loop.shutdown_asyncgens())

    async def agen():
        yield 1

    gen = agen()
    with pytest.warns(ResourceWarning, match="was scheduled after loop.shutdown_asyncgens"):
        loop.run_until_complete(_first(gen))
    loop.run_until_complete(gen.aclose())


# -- executors -----------------------------------------------------------------


def _whoami(*args):
    return threading.current_thread().name, args


def test_run_in_default_executor(loop):
    name, args = loop.run_until_complete(loop.run_in_executor(None, _whoami, 1, "a"))
    assert args == (1, "a")
    assert name != threading.current_thread().name
    # asyncio names its default executor's threads "asyncio_N".
    assert name.startswith("asyncio_")


def test_run_in_custom_executor(loop):
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="custom") as pool:
        name, _ = loop.run_until_complete(loop.run_in_executor(pool, _whoami))
    assert name.startswith("custom")


def test_run_in_executor_propagates_exceptions(loop):
    def fails():
        raise ZeroDivisionError("in thread")

    with pytest.raises(ZeroDivisionError, match="in thread"):
        loop.run_until_complete(loop.run_in_executor(None, fails))


def test_run_in_executor_returns_an_asyncio_future(loop):
    fut = loop.run_in_executor(None, _whoami)
    assert asyncio.isfuture(fut)
    assert fut.get_loop() is loop
    loop.run_until_complete(fut)


def test_set_default_executor(loop):
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mine")
    try:
        loop.set_default_executor(pool)
        name, _ = loop.run_until_complete(loop.run_in_executor(None, _whoami))
        assert name.startswith("mine")
    finally:
        pool.shutdown(wait=True)


@pytest.mark.parametrize(
    "executor",
    [object(), "pool", None],
    ids=["object", "str", "None"],
)
def test_set_default_executor_requires_a_thread_pool(loop, executor):
    # Since 3.11 anything but a ThreadPoolExecutor is refused.
    with pytest.raises(TypeError) as info:
        loop.set_default_executor(executor)
    assert str(info.value) == "executor must be ThreadPoolExecutor instance"


def test_set_default_executor_refuses_a_process_pool(loop):
    pool = concurrent.futures.ProcessPoolExecutor(1)
    try:
        with pytest.raises(TypeError) as info:
            loop.set_default_executor(pool)
        assert str(info.value) == "executor must be ThreadPoolExecutor instance"
    finally:
        pool.shutdown(wait=False)


def test_shutdown_default_executor_joins_its_threads(loop):
    def current():
        return threading.current_thread()

    worker = loop.run_until_complete(loop.run_in_executor(None, current))
    assert worker.is_alive()
    loop.run_until_complete(loop.shutdown_default_executor())
    assert not worker.is_alive()
    with pytest.raises(RuntimeError) as info:
        loop.run_in_executor(None, current)
    assert str(info.value) == "Executor shutdown has been called"


def test_shutdown_default_executor_without_an_executor(loop):
    assert loop.run_until_complete(loop.shutdown_default_executor()) is None


@pytest.mark.skipif(PY < (3, 12), reason="shutdown_default_executor(timeout=) is new in 3.12")
def test_shutdown_default_executor_timeout_not_reached(loop, recwarn):
    loop.run_until_complete(loop.run_in_executor(None, _whoami))
    loop.run_until_complete(loop.shutdown_default_executor(timeout=30))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.skipif(
    PY < (3, 13),
    reason="3.12.1's shutdown_default_executor waits for the executor before "
    "applying the timeout, so a stuck worker blocks it",
)
def test_shutdown_default_executor_timeout_warns(loop):
    release = threading.Event()
    started = threading.Event()

    def blocked():
        started.set()
        release.wait(30)

    job = loop.run_in_executor(None, blocked)
    started.wait(30)
    try:
        # The worker cannot finish until `release` is set, so the join
        # cannot complete within the timeout, however fast the machine.
        with pytest.warns(RuntimeWarning, match="did not finishing joining its threads"):
            loop.run_until_complete(loop.shutdown_default_executor(timeout=0.05))
    finally:
        release.set()
    loop.run_until_complete(job)


def test_run_in_executor_on_a_closed_loop_raises(loop):
    loop.close()
    with pytest.raises(RuntimeError) as info:
        loop.run_in_executor(None, _whoami)
    assert str(info.value) == "Event loop is closed"


# -- resolver --------------------------------------------------------------------

GAI_CASES = [
    (("127.0.0.1", 0), {}),
    (("127.0.0.1", 80), {"type": socket.SOCK_STREAM}),
    (("127.0.0.1", "8080"), {"family": socket.AF_INET, "type": socket.SOCK_DGRAM}),
    (("127.0.0.1", 0), {"proto": socket.IPPROTO_TCP}),
    ((None, 0), {"flags": socket.AI_PASSIVE, "type": socket.SOCK_STREAM}),
    ((None, 443), {"family": socket.AF_INET}),
    (("::1", 0), {"family": socket.AF_INET6}),
    ((b"127.0.0.1", b"53"), {"flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV}),
    (("localhost", 22), {"family": socket.AF_INET, "type": socket.SOCK_STREAM}),
    (("10.1.2.3", None), {"flags": socket.AI_NUMERICHOST}),
]


@pytest.mark.parametrize("args, kwargs", GAI_CASES, ids=[str(i) for i in range(len(GAI_CASES))])
def test_getaddrinfo_matches_the_socket_module(loop, args, kwargs):
    expected = socket.getaddrinfo(*args, **kwargs)
    got = loop.run_until_complete(loop.getaddrinfo(*args, **kwargs))
    assert got == expected


def test_getaddrinfo_error_matches_the_socket_module(loop):
    with pytest.raises(socket.gaierror) as expected:
        socket.getaddrinfo("not an address", 0, flags=socket.AI_NUMERICHOST)
    with pytest.raises(socket.gaierror) as got:
        loop.run_until_complete(
            loop.getaddrinfo("not an address", 0, flags=socket.AI_NUMERICHOST)
        )
    assert got.value.args == expected.value.args
    assert got.value.errno == expected.value.errno


def test_getaddrinfo_bad_port_type(loop):
    with pytest.raises(OSError) as expected:
        socket.getaddrinfo("127.0.0.1", 1.5)
    with pytest.raises(OSError) as got:
        loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 1.5))
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize(
    "sockaddr, flags",
    [
        (("127.0.0.1", 80), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV),
        (("127.0.0.1", 0), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV),
        (("::1", 8080, 0, 0), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV),
        (("127.0.0.1", 53), socket.NI_NUMERICHOST | socket.NI_DGRAM),
    ],
)
def test_getnameinfo_matches_the_socket_module(loop, sockaddr, flags):
    expected = socket.getnameinfo(sockaddr, flags)
    got = loop.run_until_complete(loop.getnameinfo(sockaddr, flags))
    assert got == expected


def test_getaddrinfo_returns_a_coroutine_like_awaitable(loop):
    pending = loop.getaddrinfo("127.0.0.1", 0)
    try:
        assert hasattr(pending, "__await__")
    finally:
        loop.run_until_complete(pending)
