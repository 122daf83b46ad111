"""Randomised scripts of scheduling operations (issue 2): the ready queue,
the timer heap and handle cancellation.

Each case is one seed. The seed draws a script of ``call_soon``,
``call_later`` (delays from negative to a few milliseconds), ``call_at``,
``call_soon_threadsafe`` from a second thread, and cancellations of handles
that are pending, already run or already cancelled, done partly by a driver
coroutine and partly from inside the callbacks themselves (callbacks
schedule and cancel more as they run). The same seed runs on stock asyncio
and on zloop; what is checked are the rules asyncio keeps whatever the
timing:

- a handle runs once if it was not cancelled before it ran, never if it was;
  ``cancelled()`` says whether ``cancel()`` was called, before or after;
- ``call_soon`` callbacks run in the order they were scheduled, and so do
  ``call_soon_threadsafe`` callbacks from one thread;
- a timer never runs before its ``when()`` (``when()`` being the
  ``loop.time()`` of ``call_later``'s call plus its delay, or ``call_at``'s
  argument); of two timers, the one due first runs first if it was
  scheduled before the other was due (one scheduled later, with a deadline
  already past, may come after a timer that is due but still queued to run;
  equal deadlines may run in either order);
- a callback runs in the context it was scheduled with.

``ZLOOP_FUZZ_SEEDS`` picks the seeds, as for ``test_fuzz_streams.py``.
"""

import asyncio
import contextvars
import random
import threading

import pytest

from _fuzz import seeds

_TIMEOUT = 20
_DELAYS = (-1.0, 0.0, 0.0, 1e-6, 0.0002, 0.001, 0.003, 0.006)
# A timer may run this early: asyncio runs those due within the clock's
# resolution (time.get_clock_info("monotonic"), 1 ns here).
_EARLY_S = 1e-6

var = contextvars.ContextVar("var", default=None)



class Entry:
    """One scheduled callback and what became of it."""

    def __init__(self, ident, kind, thread=None):
        self.ident = ident
        self.kind = kind  # "soon", "timer", "threadsafe"
        self.scheduled_time = None  # loop.time() when scheduled (timers)
        self.when = None  # its handle's when() (timers)
        self.thread = thread
        self.handle = None
        self.cancelled_at = None  # step of a cancel() before it ran
        self.expect_var = var.get()  # the context it is scheduled in
        self.cancel_called = False  # at any time, before or after it ran
        self.ran_at = None
        self.ran_time = None


class Script:
    def __init__(self, loop, rng):
        self.loop = loop
        self.rng = rng
        self.entries = []
        self.step = 0
        self.errors = []
        self.budget = rng.randint(50, 400)  # callbacks the script may still schedule
        self.lock = threading.Lock()  # entries and step, for the thread
        self.threads = 0  # threads started, each posting its own entries

    def _tick(self):
        self.step += 1
        return self.step

    def _bad(self, what):
        self.errors.append(what)

    def pending(self):
        return [e for e in self.entries if e.ran_at is None and e.cancelled_at is None]

    # -- scheduling

    def _new(self, kind, thread=None):
        with self.lock:
            e = Entry(len(self.entries), kind, thread)
            self.entries.append(e)
        return e

    def schedule(self):
        if self.budget <= 0:
            return
        self.budget -= 1
        rng, loop = self.rng, self.loop
        how = rng.choices(["soon", "later", "at", "ctx"], weights=[35, 35, 15, 15])[0]
        if how in ("soon", "ctx"):
            e = self._new("soon")
            if how == "ctx":
                ctx = contextvars.copy_context()
                ctx.run(var.set, e.ident)
                e.expect_var = e.ident
                e.handle = loop.call_soon(self.ran, e, context=ctx)
            else:
                e.handle = loop.call_soon(self.ran, e)
        elif how == "later":
            delay = rng.choice(_DELAYS)
            e = self._new("timer")
            now = e.scheduled_time = loop.time()
            e.handle = loop.call_later(delay, self.ran, e)
            e.when = now + delay
            # call_later's own clock read comes after ours: a little later.
            if not e.when <= e.handle.when() <= loop.time() + delay:
                self._bad(f"call_later({delay}).when() is {e.handle.when()}, asked at {now}")
            e.when = e.handle.when()
        else:
            e = self._new("timer")
            e.scheduled_time = loop.time()
            e.when = e.scheduled_time + rng.choice(_DELAYS)
            e.handle = loop.call_at(e.when, self.ran, e)
            if e.handle.when() != e.when:
                self._bad(f"call_at({e.when}).when() is {e.handle.when()}")

    def cancel_some(self):
        rng = self.rng
        if not self.entries:
            return
        e = rng.choice(self.entries)
        if e.handle is None:  # a threadsafe one: its handle stays in its thread
            return
        e.handle.cancel()
        e.cancel_called = True
        if e.ran_at is None and e.cancelled_at is None:
            e.cancelled_at = self._tick()
        if not e.handle.cancelled() and e.kind != "threadsafe":
            self._bad(f"{e.ident}: cancelled() is False after cancel()")

    def act(self, n):
        for _ in range(n):
            if self.rng.random() < 0.7:
                self.schedule()
            else:
                self.cancel_some()

    # -- running

    def ran(self, e):
        with self.lock:
            if e.cancelled_at is not None:
                self._bad(f"{e.ident} ran after its cancel()")
            if e.ran_at is not None:
                self._bad(f"{e.ident} ran twice")
            e.ran_at = self._tick()
        e.ran_time = self.loop.time()
        if e.when is not None and e.ran_time < e.when - _EARLY_S:
            self._bad(f"{e.ident} ran at {e.ran_time}, before its when() {e.when}")
        if var.get() != e.expect_var:
            self._bad(f"{e.ident} ran in the wrong context: {var.get()} for {e.expect_var}")
        # Callbacks go on scheduling and cancelling.
        self.act(self.rng.choice([0, 0, 1, 2, 3]))

    def post_from_thread(self, count):
        self.threads += 1
        entries = [self._new("threadsafe", thread=self.threads) for _ in range(count)]

        def work():
            for e in entries:
                self.loop.call_soon_threadsafe(self.ran_threadsafe, e)

        t = threading.Thread(target=work)
        t.start()
        return t

    def ran_threadsafe(self, e):
        with self.lock:
            if e.ran_at is not None:
                self._bad(f"{e.ident} ran twice")
            e.ran_at = self._tick()

    # -- rules over the whole run

    def check(self):
        for e in self.entries:
            ran = e.ran_at is not None
            if ran == (e.cancelled_at is not None):
                self._bad(f"{e.ident} ({e.kind}): ran={ran}, cancelled={e.cancelled_at}")
            if e.handle is not None and e.kind != "threadsafe":
                # cancel() after the run marks it cancelled too, as asyncio's.
                if e.handle.cancelled() != e.cancel_called:
                    self._bad(f"{e.ident}: cancelled() is {e.handle.cancelled()}")
        self._check_fifo([e for e in self.entries if e.kind == "soon"], "call_soon")
        for thread in {e.thread for e in self.entries if e.kind == "threadsafe"}:
            ts = [e for e in self.entries if e.kind == "threadsafe" and e.thread == thread]
            self._check_fifo(ts, f"thread {thread}'s threadsafe")
        self._check_timer_order([e for e in self.entries if e.kind == "timer" and e.ran_at])

    def _check_fifo(self, entries, what):
        ran = [e for e in entries if e.ran_at is not None]
        order = [e.ident for e in sorted(ran, key=lambda e: e.ran_at)]
        if order != sorted(order):
            self._bad(f"{what} callbacks ran out of order: {order}")

    def _check_timer_order(self, timers):
        for a in timers:
            for b in timers:
                # a due first, and scheduled before b was due (so before b
                # could leave the heap for the ready queue): a runs first.
                due_after_a = a.scheduled_time < b.when - _EARLY_S
                if a.when < b.when and due_after_a and a.ran_at > b.ran_at:
                    self._bad(f"timer {a.ident} (when {a.when}) ran after {b.ident} (when {b.when})")


async def _case(loop, seed):
    rng = random.Random(seed)
    script = Script(loop, rng)
    threads = []
    for _ in range(rng.randint(5, 30)):
        op = rng.choices(["act", "yield", "nap", "thread"], weights=[50, 25, 15, 10])[0]
        if op == "act":
            script.act(rng.randint(1, 8))
        elif op == "yield":
            await asyncio.sleep(0)
        elif op == "nap":
            await asyncio.sleep(rng.choice([0.0005, 0.002]))
        else:
            threads.append(script.post_from_thread(rng.randint(1, 50)))
    for t in threads:
        t.join(_TIMEOUT)
    script.budget = 0  # what runs from here on schedules nothing new
    deadline = loop.time() + _TIMEOUT
    while script.pending() and loop.time() < deadline:
        await asyncio.sleep(0.001)
    assert script.pending() == []
    script.check()
    assert script.errors == []


@pytest.mark.parametrize("seed", seeds())
def test_random_schedule(loop, seed):
    loop.run_until_complete(_case(loop, seed))
