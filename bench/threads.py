"""Threads posting to a loop with call_soon_threadsafe, each loop in a
process of its own (`bench/run.py threads`).

    python bench/threads.py --loop zloop --case stalled [--posts N]

Three cases, each a shape real programs have:

- `stalled`: a callback on the loop starts a thread that posts N no-op
  callbacks and joins it: the loop is blocked on its producer the whole
  time and can drain nothing. Wall time from the thread's start until the
  loop has run every callback.
- `janus`: 8 producer threads put N items in all through a bridge in the
  style of the `janus` package: each put takes a lock, appends to a deque
  and posts a notification whose callback takes the same lock; the
  consumer, a coroutine, takes every item. Wall time for all N.
- `flood`: 8 threads post no-op callbacks as fast as they can while a task
  sleeps 50 ms twenty times: the latest any of those sleeps returned
  (timers on time under a flood), and the posts the producers made.

Prints one JSON object: {"wall_s", "cpu_s", and the case's own figures}.
Exit status 3 (loops.EXIT_MISSING) when the loop is not installed.
`run_suite` (the orchestrator's side) runs every case for every loop,
interleaved round by round, and tabulates the wall time (and, for
`flood`, the latest sleep) as ratios to the baseline loop.
"""

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loops  # noqa: E402  (after the path tweak, on purpose)

CASES = ("stalled", "janus", "flood")


def case_stalled(loop, posts):
    ran = 0

    def tick():
        nonlocal ran
        ran += 1

    def producer():
        post = loop.call_soon_threadsafe
        for _ in range(posts):
            post(tick)

    def block_on_producer():
        thread = threading.Thread(target=producer)
        thread.start()
        thread.join()

    done = loop.create_future()

    def check_done():
        if ran == posts:
            done.set_result(None)
        else:
            loop.call_soon(check_done)

    start = time.perf_counter(), time.process_time()
    loop.call_soon(block_on_producer)
    loop.call_soon(check_done)
    loop.run_until_complete(done)
    wall, cpu = time.perf_counter() - start[0], time.process_time() - start[1]
    if ran != posts:
        raise RuntimeError("stalled: %d of %d ran" % (ran, posts))
    return {"wall_s": wall, "cpu_s": cpu, "posts": posts}


class Bridge:
    """A queue between threads and a coroutine, as `janus` builds one: a
    lock shared by both sides, and a notification posted per put."""

    def __init__(self, loop):
        self.loop = loop
        self.lock = threading.Lock()
        self.items = collections.deque()
        self.ready = asyncio.Event()

    def put(self, item):  # producer threads
        with self.lock:
            self.items.append(item)
            self.loop.call_soon_threadsafe(self._notify)

    def _notify(self):  # on the loop
        with self.lock:
            if self.items:
                self.ready.set()

    async def get(self):
        while True:
            with self.lock:
                if self.items:
                    return self.items.popleft()
                self.ready.clear()
            await self.ready.wait()


def case_janus(loop, posts, producers=8):
    async def main():
        bridge = Bridge(loop)
        share = posts // producers

        def producer():
            for i in range(share):
                bridge.put(i)

        threads = [threading.Thread(target=producer) for _ in range(producers)]
        for t in threads:
            t.start()
        got = 0
        for _ in range(share * producers):
            await bridge.get()
            got += 1
        for t in threads:
            t.join()
        return got

    start = time.perf_counter(), time.process_time()
    got = loop.run_until_complete(main())
    wall, cpu = time.perf_counter() - start[0], time.process_time() - start[1]
    if got != posts // producers * producers:
        raise RuntimeError("janus: %d items" % got)
    return {"wall_s": wall, "cpu_s": cpu, "posts": got}


def case_flood(loop, _posts, producers=8, sleeps=20, sleep_s=0.05):
    stop = threading.Event()
    posted = [0] * producers

    def producer(i):
        post = loop.call_soon_threadsafe
        noop = int
        while not stop.is_set():
            for _ in range(100):
                post(noop)
            posted[i] += 100

    async def main():
        threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
        for t in threads:
            t.start()
        worst = 0.0
        try:
            for _ in range(sleeps):
                t0 = time.perf_counter()
                await asyncio.sleep(sleep_s)
                worst = max(worst, time.perf_counter() - t0)
        finally:
            stop.set()
            await loop.run_in_executor(None, lambda: [t.join() for t in threads])
        return worst

    start = time.perf_counter(), time.process_time()
    worst = loop.run_until_complete(main())
    wall, cpu = time.perf_counter() - start[0], time.process_time() - start[1]
    return {"wall_s": wall, "cpu_s": cpu, "worst_sleep_s": worst, "posts": sum(posted)}


# --- the orchestrator's side (bench/run.py threads) ------------------------


def check(args):
    pass  # nothing beyond the Python under test


def _measure(args, name, case, posts):
    import common

    cmd = [args.python, os.path.abspath(__file__), "--loop", name, "--case", case,
           "--posts", str(posts)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          cwd=common.CHILD_CWD)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1])
    return json.loads(proc.stdout)


def run_suite(args, names, info):
    import common

    rounds = args.rounds or (1 if args.quick else 3)
    posts = 200_000 if args.quick else 1_000_000
    cells = [
        ("stalled: %d posts, loop joined on its producer" % posts, False,
         lambda name: _measure(args, name, "stalled", posts)),
        ("janus: %d items, 8 producers through a locked bridge" % posts, False,
         lambda name: _measure(args, name, "janus", posts)),
        ("flood: 8 producers, 20 sleeps of 50 ms", False,
         lambda name: _measure(args, name, "flood", posts)),
    ]
    rows, _ = common.interleave_cells(
        cells, names, info, rounds, "threads",
        {"wall_s": ("wall_s", False), "cpu_s": ("cpu_s", False)}, pause_s=0.2)
    flood = rows[2]
    for name, entry in flood["loops"].items():
        if entry.get("status") == "ok":
            entry["worst_sleep_s"] = common.summarize(
                [s["worst_sleep_s"] for s in entry["samples"]], higher_is_better=False)
    stat = args.stat or "median"
    md = ("### threads: wall-clock seconds, %s (in brackets: %s's ÷ this one's, >1 is "
          "faster)\n\n" % (stat, args.baseline))
    md += common.ratio_table(rows[:2], names, "wall_s", args.baseline, "case",
                             higher_is_better=False, stat=stat)
    md += ("\n### threads: the latest of twenty 50 ms sleeps under 8 flooding producers, "
           "seconds, %s\n\n" % stat)
    md += common.ratio_table([flood], names, "worst_sleep_s", args.baseline, "case",
                             higher_is_better=False, stat=stat)
    md += ("\nEach case in a process of its own per loop, the loops interleaved round by "
           "round; %s of %d rounds.\n" % (stat, rounds))
    return {"rows": rows, "params": {"rounds": rounds, "posts": posts}}, md


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", required=True, choices=list(loops.LOOPS))
    parser.add_argument("--case", required=True, choices=CASES)
    parser.add_argument("--posts", type=int, default=1_000_000)
    args = parser.parse_args()
    run = {"stalled": case_stalled, "janus": case_janus, "flood": case_flood}[args.case]
    return loops.run_child(args.loop, lambda loop: run(loop, args.posts))


if __name__ == "__main__":
    sys.exit(main())
