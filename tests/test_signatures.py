"""Arguments are bound as asyncio's Python signatures bind them.

zloop's hot methods are native, and a native method parses its own
arguments: these tests hold them to what the Python methods of stock
asyncio accept (parameters named by keyword, the TypeErrors of a bad call)
and check that `inspect.signature` reads the same parameters from them,
as libraries that introspect callables (and help()) expect.
"""

import asyncio
import inspect
import socket
import sys
from asyncio import events, selector_events

import pytest


def test_scheduling_methods_take_their_parameters_by_keyword(loop):
    got = []

    def cb(*args):
        got.append(args)

    loop.call_soon(callback=cb)
    loop.call_soon_threadsafe(callback=cb)
    loop.call_soon(callback=cb, context=None)
    loop.call_later(delay=0, callback=cb)
    loop.call_later(0, callback=cb)
    loop.call_at(when=loop.time(), callback=cb)
    loop.call_at(callback=cb, when=loop.time())
    loop.call_soon(cb, 1, 2)

    async def five():
        return 5

    task = loop.create_task(coro=five())
    assert loop.run_until_complete(task) == 5
    assert sorted(got) == sorted([(), (), (), (), (), (), (), (1, 2)])


@pytest.mark.parametrize(
    "call",
    [
        "call_soon(cb, callback=cb)",
        "call_soon(callbak=cb)",
        "call_soon()",
        "call_soon_threadsafe(cb, callback=cb)",
        "call_later(callback=cb)",
        "call_later(0)",
        "call_later()",
        "call_later(0, cb, delay=0)",
        "call_at(1, cb, callback=cb)",
        "call_at(when=1)",
        "call_at(1, cb, whence=1)",
    ],
)
def test_bad_scheduling_calls_raise_type_error(loop, call):
    def cb():
        pass

    with pytest.raises(TypeError):
        eval("loop." + call, {"loop": loop, "cb": cb})
    # Nothing was scheduled by the failed call.
    loop.call_soon(loop.stop)
    loop.run_forever()


def test_stream_writes_take_their_parameter_by_keyword(loop):
    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        tr, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        try:
            tr.write(data=b"one ")
            tr.writelines(list_of_data=[b"two ", bytearray(b"three")])
            for bad in ("tr.write()", "tr.write(b'x', b'y')", "tr.write(b'x', data=b'y')",
                        "tr.write(dat=b'x')", "tr.writelines()", "tr.writelines(lines=[])"):
                with pytest.raises(TypeError):
                    eval(bad, {"tr": tr})
            got = b""
            while len(got) < 13:
                got += await loop.sock_recv(b, 100)
            return got
        finally:
            tr.close()
            b.close()

    assert loop.run_until_complete(main()) == b"one two three"


@pytest.mark.parametrize(
    "call", ["sendto(data=b'x', addr=addr)", "sendto(b'x', addr=addr)", "sendto(b'x', addr)"]
)
def test_datagram_sendto_takes_its_parameters_by_keyword(loop, call):
    async def main():
        got = loop.create_future()

        class Receiver(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.set_result(data)

        rx, _ = await loop.create_datagram_endpoint(Receiver, local_addr=("127.0.0.1", 0))
        tx, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        try:
            eval("tx." + call, {"tx": tx, "addr": rx.get_extra_info("sockname")})
            return await asyncio.wait_for(got, 10)
        finally:
            rx.close()
            tx.close()

    assert loop.run_until_complete(main()) == b"x"


@pytest.mark.parametrize(
    "call", ["sendto()", "sendto(b'x', None, 1)", "sendto(b'x', data=b'y')", "sendto(b'x', adr=None)"]
)
def test_bad_datagram_sendto_calls_raise_type_error(loop, call):
    async def main():
        tx, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=("127.0.0.1", 9))
        try:
            with pytest.raises(TypeError):
                eval("tx." + call, {"tx": tx})
        finally:
            tx.close()

    loop.run_until_complete(main())


def test_create_task_with_coro_twice_raises_type_error(loop):
    async def five():
        return 5

    first, second = five(), five()
    with pytest.raises(TypeError):
        loop.create_task(first, coro=second)
    with pytest.raises(TypeError):
        loop.create_task()
    first.close()
    second.close()


# Parameters zloop offers beyond the running Python's asyncio: the newest
# asyncio's, on every version.
_EXTRA = {
    "create_connection": {"all_errors"} if sys.version_info < (3, 12) else set(),
    "create_server": {"keep_alive"} if sys.version_info < (3, 13) else set(),
    "create_unix_server": {"cleanup_socket"} if sys.version_info < (3, 13) else set(),
    "shutdown_default_executor": {"timeout"} if sys.version_info < (3, 12) else set(),
}


def _params(fn):
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return params


def _same_parameters(ours, stock, extra=()):
    """The parameters of `stock` (names, order, kinds, defaults), plus `extra`."""
    mine = [p for p in _params(ours) if p.name not in extra]
    theirs = _params(stock)
    assert [p.name for p in mine] == [p.name for p in theirs], (
        ours, inspect.signature(ours), inspect.signature(stock))
    assert len(_params(ours)) == len(mine) + len(extra), (ours, extra)
    for m, t in zip(mine, theirs):
        assert m.default == t.default, (ours, m, t)
        assert (m.kind == m.VAR_POSITIONAL) == (t.kind == t.VAR_POSITIONAL), (ours, m, t)
        assert (m.kind == m.KEYWORD_ONLY) == (t.kind == t.KEYWORD_ONLY), (ours, m, t)


def test_loop_methods_have_asyncio_signatures(zloop_module):
    loop_type = zloop_module.Loop
    names = [n for n in dir(asyncio.AbstractEventLoop) if not n.startswith("_")]
    for name in names:
        _same_parameters(
            getattr(loop_type, name),
            getattr(asyncio.SelectorEventLoop, name),
            _EXTRA.get(name, ()),
        )


def _transports(loop):
    """(stream transport, datagram transport) of the loop, then a cleanup."""
    a, b = socket.socketpair()
    stream, _ = loop.run_until_complete(loop.create_connection(asyncio.Protocol, sock=a))
    dgram, _ = loop.run_until_complete(
        loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
    )

    def cleanup():
        stream.close()
        dgram.close()
        b.close()
        loop.call_soon(loop.stop)
        loop.run_forever()

    return stream, dgram, cleanup


def test_transport_and_handle_methods_have_asyncio_signatures(zloop_module):
    loop = zloop_module.new_event_loop()
    try:
        stream, dgram, cleanup = _transports(loop)
        try:
            for ours, stock in (
                (type(stream), selector_events._SelectorSocketTransport),
                (type(dgram), selector_events._SelectorDatagramTransport),
            ):
                for name in dir(stock):
                    if name.startswith("_") or not callable(getattr(stock, name)):
                        continue
                    _same_parameters(getattr(ours, name), getattr(stock, name))
            handle = loop.call_soon(print)
            timer = loop.call_later(60, print)
            for ours, stock in ((handle, events.Handle), (timer, events.TimerHandle)):
                for name in ("cancel", "cancelled", "get_context", "when"):
                    if hasattr(stock, name):
                        _same_parameters(getattr(ours, name), getattr(stock, name))
            handle.cancel()
            timer.cancel()
        finally:
            cleanup()
    finally:
        loop.close()
