"""Micro-benchmarks of one event loop, run in a process of its own.

    python bench/micro.py --loop uvloop [--bench call_soon,...] [--runs 5] [--scale 1.0]

Prints one JSON object on stdout: for each benchmark, the operations done per
timed run and the ops/s of every run (after an untimed warm-up run).  The
orchestrator (bench/run.py micro) runs this once per loop per round and
aggregates.  Exit status 3 (loops.EXIT_MISSING) means the loop is not
installed.

Each benchmark builds a fresh loop, so that no state (timer heap, freelists
grown by the previous run) carries over, and checks that every callback it
scheduled really ran: a loop that drops work must not look fast.
"""

import argparse
import asyncio
import gc
import itertools
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loops  # noqa: E402  (after the path tweak, on purpose)


def clocks():
    """(wall, CPU) time now: CPU is this process's, all threads, in seconds."""
    return time.perf_counter(), time.process_time()


def since(start):
    """(wall seconds, CPU seconds) elapsed since a clocks() reading.

    Wall time counts the moments other jobs on the machine held the CPU; CPU
    time does not, which makes ops per CPU-second the steadier figure on a
    shared machine (for one thread both agree on an idle one).
    """
    wall, cpu = clocks()
    return wall - start[0], cpu - start[1]


def expect(got, wanted, what):
    """Fail the benchmark (not just under -O's absent asserts) if work was lost."""
    if got != wanted:
        raise RuntimeError("%s: %d ran, %d expected: the loop lost work" % (what, got, wanted))


def bench_call_soon(loop, n, batch=100):
    """n callbacks: a driver queues `batch` at a time with call_soon, then itself.

    The callback is a C-level counter (itertools.count().__next__) so that the
    figure is the loop's cost per handle, not the callback's, and so that the
    count can be checked afterwards.
    """
    return _batches(loop, n, batch, loop.call_soon, "call_soon")


def bench_threadsafe_post(loop, n, batch=100):
    """call_soon_threadsafe's own cost, post and run, as bench_call_soon's:
    the driver posts `batch` at a time from the loop's thread. No second
    thread, so no GIL hand-off and at most one eventfd write and read per
    batch: the figure is repeatable (icount counts it), where `threadsafe`'s
    is the wall-clock cost a real producer thread pays."""
    return _batches(loop, n, batch, loop.call_soon_threadsafe, "threadsafe_post")


def _batches(loop, n, batch, schedule, what):
    """n counter ticks queued `batch` at a time with `schedule` by a driver
    that then queues itself; (ticks run, elapsed)."""
    counter = itertools.count()
    tick = counter.__next__
    left = n

    def driver():
        nonlocal left
        if left <= 0:
            loop.stop()
            return
        for _ in range(batch):
            schedule(tick)
        left -= batch
        schedule(driver)

    start = clocks()
    schedule(driver)
    loop.run_forever()
    elapsed = since(start)
    ran = next(counter)
    expect(ran, n - left, what)
    return ran, elapsed


def bench_call_later(loop, n):
    """n timers over 0-1 ms, one in four cancelled; run until the last fires.

    Counts every timer scheduled (fired or cancelled) as one operation: the
    loop pays for both, and asyncio's heap keeps cancelled handles until it
    pops or compacts them.  The stop timer has the latest deadline, so every
    live timer has fired when the loop stops.
    """
    counter = itertools.count()
    tick = counter.__next__
    call_later = loop.call_later
    start = clocks()
    for i in range(n):
        handle = call_later((i % 100) * 1e-5, tick)
        if i % 4 == 3:
            handle.cancel()
    call_later(0.0011, loop.stop)
    loop.run_forever()
    elapsed = since(start)
    fired = next(counter)
    expect(fired, n - n // 4, "call_later")
    return n, elapsed


def bench_sleep0(loop, n, tasks=100):
    """`tasks` tasks each awaiting asyncio.sleep(0) in turn: n switches in all."""
    per_task = n // tasks
    done = 0

    async def worker():
        nonlocal done
        sleep = asyncio.sleep
        for _ in range(per_task):
            await sleep(0)
        done += per_task

    async def main():
        await asyncio.gather(*[worker() for _ in range(tasks)])

    start = clocks()
    loop.run_until_complete(main())
    elapsed = since(start)
    expect(done, per_task * tasks, "sleep0")
    return per_task * tasks, elapsed


def bench_gather(loop, n, batch=1000):
    """create_task + gather of `batch` trivial coroutines, n tasks in all."""
    rounds = max(1, n // batch)
    finished = 0

    async def small():
        return 1

    async def main():
        nonlocal finished
        create_task = loop.create_task
        for _ in range(rounds):
            results = await asyncio.gather(*[create_task(small()) for _ in range(batch)])
            finished += len(results)

    start = clocks()
    loop.run_until_complete(main())
    elapsed = since(start)
    expect(finished, rounds * batch, "gather")
    return rounds * batch, elapsed


def bench_threadsafe(loop, n):
    """A second thread posts n callbacks with call_soon_threadsafe.

    Timed from the thread's start until the loop has run the last callback:
    the cost includes the loop's wake-ups (self-pipe / eventfd) and the GIL
    hand-offs between the two threads, which is what a real producer pays.
    """
    counter = itertools.count()
    tick = counter.__next__

    def producer():
        post = loop.call_soon_threadsafe
        for _ in range(n):
            post(tick)
        post(loop.stop)  # FIFO: runs after every tick posted before it

    thread = threading.Thread(target=producer)
    start = clocks()
    loop.call_soon(thread.start)
    loop.run_forever()
    elapsed = since(start)
    thread.join()
    ran = next(counter)
    expect(ran, n, "threadsafe")
    return n, elapsed


# name -> (function, operations per timed run at --scale 1, what one op is)
BENCHES = {
    "call_soon": (bench_call_soon, 500_000, "callback scheduled and run, 100 per batch"),
    "call_later": (bench_call_later, 100_000, "timer scheduled (1/4 cancelled)"),
    "sleep0": (bench_sleep0, 300_000, "sleep(0) switch, 100 tasks"),
    "gather": (bench_gather, 100_000, "task created and gathered, 1000 per gather"),
    "threadsafe": (bench_threadsafe, 100_000, "call_soon_threadsafe from a thread"),
    "threadsafe_post": (bench_threadsafe_post, 500_000,
                        "call_soon_threadsafe from the loop's thread, 100 per batch"),
}


def run_one(make_loop, func, n):
    """Run func on a fresh loop after a full collection; return (ops, (wall_s, cpu_s))."""
    loop = make_loop()
    asyncio.set_event_loop(loop)
    gc.collect()
    try:
        return func(loop, n)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", required=True, choices=sorted(loops.LOOPS))
    parser.add_argument("--bench", default=",".join(BENCHES))
    parser.add_argument("--runs", type=int, default=5, help="timed runs per benchmark")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the op counts")
    parser.add_argument("--n", type=int, help="exact op count per run (overrides --scale)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the warm-up run")
    parser.add_argument("--icount", action="store_true",
                        help="mark runs of n and 3n ops for callgrind (see icount.py)")
    args = parser.parse_args()

    names = [b for b in args.bench.split(",") if b]
    unknown = [b for b in names if b not in BENCHES]
    if unknown:
        parser.error("unknown benchmark(s): %s" % ", ".join(unknown))
    try:
        make_loop = loops.factory(args.loop)
    except loops.LoopMissing as exc:
        print(json.dumps({"loop": args.loop, "missing": str(exc)}))
        return loops.EXIT_MISSING

    out = {
        "loop": args.loop,
        "version": loops.version(args.loop),
        "python": sys.version.split()[0],
        "results": {},
    }
    for name in names:
        func, base_n, unit = BENCHES[name]
        n = args.n or max(1000, int(base_n * args.scale))
        if not args.no_warmup:
            run_one(make_loop, func, max(1000, n // 4))  # warm-up: caches, freelists
        if args.icount:
            # os.getpgrp() is callgrind's --dump-before marker: the dumps
            # between the marks hold exactly one run of n and one of 3n ops.
            os.getpgrp()
            run_one(make_loop, func, n)
            os.getpgrp()
            run_one(make_loop, func, 3 * n)
            os.getpgrp()
            out["results"][name] = {"ops": n, "unit": unit, "marks": 3}
            continue
        wall_rates, cpu_rates = [], []
        for _ in range(args.runs):
            ops, (wall_s, cpu_s) = run_one(make_loop, func, n)
            wall_rates.append(ops / wall_s)
            cpu_rates.append(ops / max(cpu_s, 1e-9))
        out["results"][name] = {"ops": n, "unit": unit, "ops_per_s": wall_rates,
                                "ops_per_cpu_s": cpu_rates}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
