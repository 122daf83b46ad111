"""Reports: reading zloop.testing results, diffing two runs, the docs table.

A difference is a test whose outcome class on the loop under test is not its
class on stock asyncio (same suite, same Python). Classes: passed, failed
(failed, error, crashed or hung), skipped, xfailed, xpassed, absent (not
collected in that run). Excluded tests are compared in neither run.

Where the swap could not reach a test, its outcome cannot differ because of
the loop, and ``check`` does not count it (``diff_reports(..., loop=...)``):
a test that ran no event loop in either run (AnyIO's trio half, a plain
function), or one that ran only loops it chose itself in both runs (a loop
class of the project's own, ``asyncio.SelectorEventLoop()``, a loop factory
it names).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zloop.compat.suites import Entry

_CLASS = {"passed": "passed", "failed": "failed", "error": "failed", "crashed": "failed",
          "skipped": "skipped", "xfailed": "xfailed", "xpassed": "xpassed"}


def outcome_class(outcome: str | None) -> str:
    if outcome is None:
        return "absent"
    return _CLASS.get(outcome, "failed")


def load_report(path: Path) -> dict[str, Any]:
    """Load a zloop.testing report; rebuild one from the .jsonl if the run was cut."""
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    partial = Path(str(path) + ".jsonl")
    if not partial.exists():
        raise FileNotFoundError(path)
    tests: dict[str, Any] = {}
    for line in partial.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            tests[entry.pop("test")] = entry
    from zloop.testing import build_report  # pytest is only needed here

    report = build_report(tests, {}, loop="unknown", backend=None, label="partial",
                          wall_s=0.0, exitstatus=None)
    report["partial"] = True
    return report


# Where a test ran, as far as the swap goes (see `reach`).
ON_LOOP = "on a loop"  # the swap reached it: compared
OTHER_LOOP = "other loop"  # only loops the test chose itself: not compared
NO_LOOP = "no loop"  # no event loop in either run: not compared


@dataclass
class Difference:
    test: str
    baseline: str  # outcome on stock asyncio
    target: str  # outcome on the loop under test
    message: str = ""
    entry: Entry | None = None
    reach: str = ON_LOOP


@dataclass
class DiffResult:
    differences: list[Difference] = field(default_factory=list)
    stale: list[Entry] = field(default_factory=list)
    # Of the stale entries, those that name no test of either run.
    unknown: list[Entry] = field(default_factory=list)
    # Unlisted differences that went away when both loops ran the test
    # again (see `drop_unconfirmed`): printed, not counted.
    flaky: list[Difference] = field(default_factory=list)
    # Outcomes that differ in tests the swap did not reach (`reach` is not
    # ON_LOOP): printed, not counted, never a difference.
    unreached: list[Difference] = field(default_factory=list)

    @property
    def unlisted(self) -> list[Difference]:
        return [d for d in self.differences if d.entry is None]

    @property
    def listed(self) -> list[Difference]:
        return [d for d in self.differences if d.entry is not None]

    @property
    def ok(self) -> bool:
        return not self.unlisted and not self.stale


def reach(base_entry: dict[str, Any] | None, target_entry: dict[str, Any] | None,
          loop: str) -> str:
    """Whether the swap to ``loop`` reached a test, in the stock-asyncio run
    or in the run on ``loop``: ON_LOOP when a loop that the swapped
    ``asyncio.new_event_loop()`` built ran (or was built) in either,
    OTHER_LOOP when the test ran only loops it chose itself, in both runs
    (its own loop class, ``asyncio.SelectorEventLoop()``, AnyIO's
    ``loop_factory``: the same loop each time, so nothing was compared),
    NO_LOOP when it ran none. A test missing from one run is ON_LOOP: a
    collection difference is a difference. For reports that do not say
    whether the swap reached a test, a loop of asyncio's family or of
    ``loop``'s counts as reached."""
    from zloop.testing import loop_family  # imports pytest, which a run needs

    if base_entry is None or target_entry is None:
        return ON_LOOP
    loops = [*base_entry.get("loops", []), *target_entry.get("loops", [])]
    if "reached" in base_entry and "reached" in target_entry:
        if base_entry["reached"] or target_entry["reached"]:
            return ON_LOOP
    elif any(loop_family(t) in ("asyncio", loop) for t in loops):
        return ON_LOOP
    return OTHER_LOOP if loops else NO_LOOP


def diff_reports(baseline: dict[str, Any], target: dict[str, Any],
                 expected: list[Entry], loop: str | None = None) -> DiffResult:
    """Compare outcome classes test by test and check them against the list.
    With ``loop`` (the target run's), a differing test that the swap did
    not reach (see ``reach``) goes to ``unreached``, not ``differences``."""
    base_tests = baseline["tests"]
    target_tests = target["tests"]
    excluded = set(baseline.get("excluded", {})) | set(target.get("excluded", {}))
    result = DiffResult()
    for test in sorted(set(base_tests) | set(target_tests)):
        if test in excluded:
            continue
        base = outcome_class((base_tests.get(test) or {}).get("outcome"))
        got_entry = target_tests.get(test) or {}
        got = outcome_class(got_entry.get("outcome"))
        if base == got:
            continue
        where = ON_LOOP if loop is None else reach(base_tests.get(test),
                                                   target_tests.get(test), loop)
        if where != ON_LOOP:
            result.unreached.append(Difference(test, base, got, got_entry.get("message", ""),
                                               None, where))
            continue
        entry = next((e for e in expected if e.matches(test)), None)
        result.differences.append(Difference(test, base, got, got_entry.get("message", ""),
                                             entry))
    matched = {id(d.entry) for d in result.differences if d.entry is not None}
    result.stale = [e for e in expected if id(e) not in matched]
    tests = set(base_tests) | set(target_tests) | excluded
    result.unknown = [e for e in result.stale if not any(e.matches(t) for t in tests)]
    return result


def drop_unconfirmed(result: DiffResult, base_rerun: dict[str, Any],
                     target_rerun: dict[str, Any]) -> None:
    """Moves the unlisted differences that did not reproduce, when both
    loops ran those tests once more, to ``result.flaky``. A test that
    differs again (or was not rerun) stays a difference."""
    kept = []
    for d in result.differences:
        if d.entry is None:
            base = outcome_class((base_rerun["tests"].get(d.test) or {}).get("outcome"))
            got = outcome_class((target_rerun["tests"].get(d.test) or {}).get("outcome"))
            if d.test in base_rerun["tests"] and d.test in target_rerun["tests"] and base == got:
                result.flaky.append(d)
                continue
        kept.append(d)
    result.differences = kept


def print_diff(result: DiffResult, loop: str, limit: int = 60,
               details: dict[str, list[str]] | None = None) -> None:
    """Prints the differences; ``details`` adds lines under a test (the
    first lines of its failure)."""
    regress = [d for d in result.differences if d.baseline == "passed"]
    improve = [d for d in result.differences if d.target == "passed"]
    flaky = (f"; {len(result.flaky)} more went away when rerun (flaky, not counted)"
             if result.flaky else "")
    print(f"\ncompat: {len(result.differences)} differences from stock asyncio "
          f"({len(regress)} pass on asyncio but not on {loop}, {len(improve)} the reverse); "
          f"{len(result.listed)} listed, {len(result.unlisted)} unlisted, "
          f"{len(result.stale)} stale list entries{flaky}")
    for d in result.unlisted[:limit]:
        note = f"  -- {d.message}" if d.message else ""
        print(f"  UNLISTED  {d.test}: asyncio {d.baseline}, {loop} {d.target}{note}")
        for line in (details or {}).get(d.test, []):
            print(f"      {line}")
    if len(result.unlisted) > limit:
        print(f"  ... and {len(result.unlisted) - limit} more unlisted (see the summary JSON)")
    unknown = {id(e) for e in result.unknown}
    for e in result.stale:
        why = ("there is no such test in either run" if id(e) in unknown
               else "no longer differs")
        print(f"  STALE     {e.test}: listed ({e.reason}) but {why}")
    for d in result.flaky:
        print(f"  FLAKY     {d.test}: asyncio {d.baseline}, {loop} {d.target}; "
              "the same on both when rerun, so not counted")
    for d in result.unreached[:limit]:
        why = ("ran no event loop in either run" if d.reach == NO_LOOP else
               "ran only loops it chose itself, in both runs (its own class, one built "
               "from a class, or a factory it names)")
        print(f"  {'NO LOOP' if d.reach == NO_LOOP else 'OTHER LOOP':9} {d.test}: asyncio "
              f"{d.baseline}, {loop} {d.target}; {why}: not a loop difference, not counted")
    if len(result.unreached) > limit:
        print(f"  ... and {len(result.unreached) - limit} more not counted")


def loop_counts(report: dict[str, Any]) -> dict[str, int]:
    """How many tests of a run ran on its loop through the swap
    (``on_loop``), only loops they chose themselves (``other_loop``: their
    own class, one built from a class, a factory they name), or no loop.
    Counted alike in every run, the stock-asyncio one included."""
    from zloop.testing import swap_reached  # imports pytest, which a run needs

    counts = {"on_loop": report["summary"]["on_loop"], "other_loop": 0, "no_loop": 0}
    for entry in report["tests"].values():
        if not entry.get("loops"):
            counts["no_loop"] += 1
        elif not swap_reached(entry, report["loop"]):
            counts["other_loop"] += 1
    return counts


def summary_row(suite: str, pin: str, loop: str, backend: str | None,
                report: dict[str, Any], diff: DiffResult | None, swap_ok: bool,
                min_on_loop: int) -> dict[str, Any]:
    counts = report["summary"]["counts"]
    failed = sum(counts.get(k, 0) for k in ("failed", "error", "crashed"))
    status = "ok"
    if not swap_ok:
        status = "swap failed"
    elif diff is not None and not diff.ok:
        status = "unlisted differences" if diff.unlisted else "stale list"
    return {
        "suite": suite,
        "pin": pin,
        "python": ".".join(report["python"].split(".")[:2]),
        "python_full": report["python"],
        "loop": loop,
        "backend": backend or "default",
        "collected": report["summary"]["collected"],
        "passed": counts.get("passed", 0),
        "failed": failed,
        "skipped": counts.get("skipped", 0) + counts.get("xfailed", 0),
        "excluded": report["summary"]["excluded"],
        "on_loop": report["summary"]["on_loop"],
        "min_on_loop": min_on_loop,
        **{k: v for k, v in loop_counts(report).items() if k != "on_loop"},
        "differs": None if diff is None else len(diff.differences),
        "flaky": None if diff is None else len(diff.flaky),
        "not_counted": None if diff is None else len(diff.unreached),
        "listed": None if diff is None else len(diff.listed),
        "unlisted": None if diff is None else len(diff.unlisted),
        "stale": None if diff is None else len(diff.stale),
        "unlisted_tests": [] if diff is None else [
            {"test": d.test, "asyncio": d.baseline, loop: d.target, "message": d.message}
            for d in diff.unlisted],
        "stale_entries": [] if diff is None else [e.test for e in diff.stale],
        "wall_s": report.get("wall_s"),
        "status": status,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


_COLUMNS = ("suite", "pin", "python", "loop", "backend", "passed", "failed", "skipped",
            "excluded", "on_loop", "differs", "listed", "status", "wall_s", "date")


# ``check``'s table: a project's own runs, and where each test ran.
CHECK_COLUMNS = ("loop", "backend", "collected", "passed", "failed", "skipped", "xfailed",
                 "xpassed", "on_loop", "other_loop", "no_loop", "compared", "differs",
                 "listed", "flaky", "not_counted", "status", "wall_s")


def print_table(rows: list[dict[str, Any]], columns: tuple[str, ...] = _COLUMNS) -> None:
    widths = {c: max(len(c), *(len(_cell(r, c)) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(_cell(row, c).ljust(widths[c]) for c in columns))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row, c) for c in _COLUMNS) + " |")
    return "\n".join(lines)


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    return "-" if value is None else str(value)


TABLE_START = "<!-- compat-table:start (generated by python -m zloop.compat table) -->"
TABLE_END = "<!-- compat-table:end -->"


def write_docs_table(doc: Path, rows: list[dict[str, Any]]) -> None:
    """Replace the generated table between the markers in a Markdown file."""
    text = doc.read_text(encoding="utf-8")
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{doc}: table markers not found")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    body = markdown_table(rows) if rows else "_no runs recorded yet_"
    doc.write_text(f"{head}{TABLE_START}\n{body}\n{TABLE_END}{tail}", encoding="utf-8")
