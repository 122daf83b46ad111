"""The loop swap behind ``zloop.testing``, with no pytest in it.

``install_loop(name)`` makes ``asyncio.new_event_loop()`` build the named
loop, process-wide, and ``RECORDER`` records the type of every loop that
runs and whether the swap built it. The pytest plugin (``zloop.testing``)
does both in the process that runs the tests; ``zloop.compat.children``
does them in the Python processes a test starts, which have no pytest
plugin and may have no pytest at all: forked children inherit the swap
and the recorder, and send what they record to the test that started
them.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import os
import threading
import weakref
from typing import Any, Callable

from zloop import _policy

LOOP_NAMES = ("asyncio", "uvloop", "zloop")


def backend_names() -> tuple[str, ...]:
    """The backends of the zloop build that is importable here
    (``zloop.BACKENDS``): the extension knows them, so a build with another
    set (kqueue) needs no change here."""
    import zloop

    return tuple(zloop.BACKENDS)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """Return the factory that builds a new loop of the named kind.

    ``asyncio`` is the stock default loop (a selector loop on Unix), built as
    ``asyncio.new_event_loop()`` would before any swap.
    """
    if name == "asyncio":
        return _STOCK_LOOP_CLASS
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name == "zloop":
        import zloop

        if hasattr(zloop, "new_event_loop"):
            return zloop.new_event_loop
        # zloop is being imported: a child process's swap is set up once it
        # imports asyncio, which zloop's own import may be the first to do.
        # The factory is looked up when a loop is first asked for.

        def new_event_loop() -> asyncio.AbstractEventLoop:
            return zloop.new_event_loop()

        return new_event_loop
    raise ValueError(f"unknown event loop {name!r}; choose from {', '.join(LOOP_NAMES)}")


def loop_type_name(loop: object) -> str:
    """``module.QualName`` of a loop's type, as recorded in reports."""
    loop_type = type(loop)
    return f"{loop_type.__module__}.{loop_type.__qualname__}"


def is_loop_of(type_name: str, name: str) -> bool:
    """Whether a recorded loop type name belongs to the named loop family.

    The family is the top-level module of the type: ``zloop.Loop`` is zloop's,
    ``uvloop.Loop`` uvloop's, ``asyncio.unix_events._UnixSelectorEventLoop``
    asyncio's. Subclasses defined elsewhere count as their module's.
    """
    return type_name.split(".", 1)[0] == name


def loop_family(type_name: str) -> str | None:
    """The loop family (one of ``LOOP_NAMES``) of a recorded loop type name,
    or None for a loop class of a family of its own (a project's)."""
    family = type_name.split(".", 1)[0]
    return family if family in LOOP_NAMES else None


def stock_base(loop_type: type) -> str:
    """The public name of the nearest base class of ``loop_type`` that
    belongs to a known loop family: ``asyncio.SelectorEventLoop`` for a
    project's subclass of it (asyncio's own names for its classes, where it
    has one, rather than ``asyncio.unix_events._UnixSelectorEventLoop``)."""
    for cls in loop_type.__mro__:
        if cls.__module__.split(".", 1)[0] not in LOOP_NAMES:
            continue
        if cls.__module__.startswith("asyncio"):
            # 3.13 names the selector loop twice (EventLoop, SelectorEventLoop):
            # the name closest to the class's own.
            names = [n for n in getattr(asyncio, "__all__", ())
                     if getattr(asyncio, n, None) is cls]
            if names:
                return "asyncio." + max(names, key=lambda n: (n in cls.__name__, len(n)))
        return f"{cls.__module__}.{cls.__qualname__}"
    return "object"


def stock_overrides(loop_type: type) -> list[str]:
    """The private methods of the nearest stock base class of ``loop_type``
    that the project's classes in between override (``_run_once``,
    ``_process_events``): such a class is tied to that base's internals, and
    no other loop's base can take its place."""
    own = [cls for cls in loop_type.__mro__
           if cls is not object and cls.__module__.split(".", 1)[0] not in LOOP_NAMES]
    stock = next((cls for cls in loop_type.__mro__
                  if cls.__module__.split(".", 1)[0] in LOOP_NAMES), None)
    if stock is None:
        return []
    return sorted({name for cls in own for name in vars(cls)
                   if name.startswith("_") and not name.startswith("__")
                   and callable(getattr(stock, name, None))})
# --- recording the loops that actually ran -----------------------------------

# What a process other than the one that runs the tests does with a loop it
# records: (loop type, whether the swap built it, its stock base and the
# base's private methods it overrides, for a type of no known family).
ChildSink = Callable[[str, bool, "str | None", "list[str] | None"], None]


class LoopRecorder:
    """Records the type of every loop that becomes the running loop, and
    whether the swap reached the test: a loop that the swapped
    ``asyncio.new_event_loop()`` built ran, or was built.

    Every asyncio-compatible loop calls asyncio's ``_set_running_loop`` when it
    starts running (``get_running_loop()`` would not work otherwise); uvloop
    looks the function up once, at import, so the wrapper must be installed
    before any loop module is imported. Thread-safe: loops running in helper
    threads are recorded too.

    The process that runs the tests (``owner_pid``) keeps what it records
    for ``take()``. Any other process, a fork of it (which inherits the
    recorder and the swap) or a child interpreter that
    ``zloop.compat.children.start`` set up, hands each new loop type to
    ``child_sink``, which sends it to that test.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._reached = False
        # The loops the swap built: weakly, so that no loop outlives its
        # test (an unclosed loop's ResourceWarning must come as it would).
        self._swapped: weakref.WeakSet[Any] = weakref.WeakSet()
        # Loops of a type that takes no weak reference, by id: an id reused
        # by a later loop of such a type is taken for the swap's.
        self._swapped_ids: set[int] = set()
        # type name -> stock base, and the base's private methods it
        # overrides, for the loop types of no known family
        self.bases: dict[str, str] = {}
        self.overrides: dict[str, list[str]] = {}
        self.owner_pid: int | None = None
        self.child_sink: ChildSink | None = None
        # Called in a forked child, after the recorder's own reset.
        self.on_fork: Callable[[], None] | None = None
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        original = asyncio.events._set_running_loop
        recorder = self

        def _set_running_loop(loop: Any) -> None:
            if loop is not None:
                recorder.note(loop)
            original(loop)

        _set_running_loop.__wrapped__ = original  # type: ignore[attr-defined]
        # Every name under which loops find the function: asyncio re-exports
        # it, and C code may take it from _asyncio.
        asyncio.events._set_running_loop = _set_running_loop
        asyncio._set_running_loop = _set_running_loop  # type: ignore[attr-defined]
        try:
            import _asyncio

            _asyncio._set_running_loop = _set_running_loop
        except (ImportError, AttributeError, TypeError):
            pass
        os.register_at_fork(after_in_child=self._after_fork)

    def own(self) -> None:
        """Make this process the one that keeps what it records (the
        process that runs the tests)."""
        self.owner_pid = os.getpid()

    def _after_fork(self) -> None:
        # Another thread may have held the lock at the fork: the child's
        # copy would stay locked for ever.
        self._lock = threading.Lock()
        if self.on_fork is not None:
            self.on_fork()

    def note(self, loop: object, built_by_swap: bool = False) -> None:
        name = loop_type_name(loop)
        with self._lock:
            if built_by_swap:
                try:
                    self._swapped.add(loop)
                except TypeError:
                    self._swapped_ids.add(id(loop))
            self._seen.add(name)
            reached = built_by_swap or self._is_swapped(loop)
            if reached:
                self._reached = True
            if name not in self.bases and loop_family(name) is None:
                self.bases[name] = stock_base(type(loop))
                self.overrides[name] = stock_overrides(type(loop))
        sink = self.child_sink
        if sink is not None and os.getpid() != self.owner_pid:
            sink(name, reached, self.bases.get(name), self.overrides.get(name))

    def _is_swapped(self, loop: object) -> bool:
        try:
            return loop in self._swapped
        except TypeError:
            return id(loop) in self._swapped_ids

    def take(self) -> tuple[list[str], bool]:
        """Return the loop types seen since the last call, and whether a loop
        of the swap's was among them (or built); forget them."""
        with self._lock:
            seen, self._seen = self._seen, set()
            reached, self._reached = self._reached, False
        return sorted(seen), reached


RECORDER = LoopRecorder()
# asyncio's default policy class, whose loop factory the swap replaces (None
# on a Python without policies: there is then nothing to swap through).
_DEFAULT_POLICY = _policy.default_policy_class()
_STOCK_LOOP_CLASS = (asyncio.new_event_loop if _DEFAULT_POLICY is None
                     else _DEFAULT_POLICY._loop_factory)


# --- swapping the loop ---------------------------------------------------------


# --- swapping the loop ---------------------------------------------------------


def install_loop(name: str, backend: str | None = None) -> Callable[[], Any]:
    """Make ``asyncio.new_event_loop()`` build the named loop, process-wide,
    each loop it builds noted as the swap's (see ``LoopRecorder``).

    Returns that factory. For ``asyncio`` the loop is stock asyncio's own, the
    control that every other loop is compared against, behind the same
    recording wrapper: both runs count the tests the swap reached alike.
    """
    if backend is not None:
        if backend not in backend_names():
            raise ValueError(f"unknown backend {backend!r}; choose from "
                             f"{', '.join(backend_names())}")
        os.environ["ZLOOP_BACKEND"] = backend
    factory = _recording(loop_factory(name))
    if _DEFAULT_POLICY is None:
        if name == "asyncio":
            return factory  # nothing to swap, and nothing to record through
        raise RuntimeError("asyncio has no event loop policy to swap the loop through")
    # The policy class's factory, not only an instance: set_event_loop_policy(None)
    # makes a fresh DefaultEventLoopPolicy, which must still build this loop.
    _DEFAULT_POLICY._loop_factory = staticmethod(factory)  # type: ignore[attr-defined]
    _policy.set_policy(None)
    return factory


def _recording(factory: Callable[[], Any]) -> Callable[[], Any]:
    """``factory``, noting each loop it builds as the swap's, seen by the
    running test: a test that builds its loop through the swap and never
    runs it was still reached by the swap."""

    def new_event_loop() -> Any:
        loop = factory()
        RECORDER.note(loop, built_by_swap=True)
        return loop

    new_event_loop.__wrapped__ = factory  # type: ignore[attr-defined]
    return new_event_loop


def swap_reached(entry: dict[str, Any], loop: str) -> bool:
    """Whether a report's test entry ran on the run's ``loop`` through the
    swap. A report from before the swap was recorded says only the loop
    types: a loop of ``loop``'s family then counts."""
    on_family = any(is_loop_of(t, loop) for t in entry.get("loops", ()))
    if "reached" not in entry:
        return on_family
    return bool(entry["reached"]) and on_family
