"""The interpreter specializes method lookups on the loop and its transports.

CPython's adaptive interpreter turns ``obj.method(...)`` into a cached
lookup (``*METHOD_WITH_VALUES``) only while the instance keeps its
attributes as inline values rather than a separate ``__dict__``. Stock
asyncio's loop and transports are plain Python classes and get it; zloop's
are Python subclasses of native types and must too: a native ``tp_new``
that skips the inline values (or Python code touching ``obj.__dict__``)
sends every ``loop.call_soon`` and ``transport.write`` from Python code
down the generic lookup, a few hundred instructions each.

No timings: the test reads the specialized instruction names (``dis`` with
``adaptive=True``, 3.11+).

3.13 keeps attributes inline only for classes whose instances have no
native fields (no C base with a layout, no ``__slots__`` in the MRO). For
an instance of such a class it specializes a method lookup
(``LOAD_ATTR_METHOD_LAZY_DICT``) only while the instance's ``__dict__``
has never been made: zloop's loop and socket transports keep their own
attributes in slots for that, so nothing but an assignment from outside
makes one. asyncio's transports (``BaseTransport.__slots__`` beside a
``__dict__`` of attributes) get neither there: that case skips.
"""

import asyncio
import dis
import socket
import sys

import pytest

_PROBE = """
def probe(obj):
    obj.{0}()
    obj.{1}()
"""


def _method_loads(obj, first, second):
    # A fresh code object per call: specialization state lives in the code
    # object, and another loop's type seen at the same site would deopt it.
    namespace = {}
    exec(_PROBE.format(first, second), namespace)
    probe = namespace["probe"]
    for _ in range(1000):
        probe(obj)
    return [
        ins.opname
        for ins in dis.get_instructions(probe, adaptive=True)
        if ins.opname.startswith(("LOAD_ATTR", "LOAD_METHOD"))
    ]


def _skip_unless_inline_values_possible(obj):
    cls = type(obj)
    if (sys.version_info >= (3, 13) and cls.__basicsize__ != object.__basicsize__
            and not cls.__module__.startswith("zloop")):
        pytest.skip(f"3.13 keeps no inline attribute values for {cls.__qualname__} (its instances have fields of their own: a native base or __slots__), and it keeps its attributes in a __dict__")


def _assert_cached(loads):
    assert len(loads) == 2
    assert all(name.endswith(("METHOD_WITH_VALUES", "METHOD_LAZY_DICT")) for name in loads), loads


def test_method_lookups_on_the_loop_are_specialized(loop):
    _skip_unless_inline_values_possible(loop)
    _assert_cached(_method_loads(loop, "time", "get_debug"))


def test_method_lookups_on_a_loop_that_ran_subprocess_bookkeeping_stay_specialized(loop):
    # zloop keeps its subprocess transports in a lazily created attribute;
    # closing children must not turn the loop's attributes into a dict.
    _skip_unless_inline_values_possible(loop)
    close_children = getattr(loop, "_close_children", None)
    if close_children is not None:
        close_children()
    _assert_cached(_method_loads(loop, "time", "get_debug"))


def test_method_lookups_on_a_socket_transport_are_specialized(loop):
    a, b = socket.socketpair()
    try:

        async def connect():
            return await loop.connect_accepted_socket(asyncio.Protocol, a)

        transport, _ = loop.run_until_complete(connect())
        try:
            _skip_unless_inline_values_possible(transport)
            _assert_cached(_method_loads(transport, "is_closing", "get_write_buffer_size"))
        finally:
            transport.close()
            loop.run_until_complete(asyncio.sleep(0))
    finally:
        b.close()


def test_method_lookups_on_a_datagram_transport_are_specialized(loop):
    transport, _ = loop.run_until_complete(
        loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)))
    try:
        _skip_unless_inline_values_possible(transport)
        _assert_cached(_method_loads(transport, "is_closing", "get_write_buffer_size"))
    finally:
        transport.close()
        loop.run_until_complete(asyncio.sleep(0))
