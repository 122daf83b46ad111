"""``python -m zloop.compat check``: does this project behave the same on another loop?

Run in a project's directory (where its pytest suite runs, or any directory
below it), with zloop and pytest installed, it runs the suite once on stock
asyncio (the baseline) and once per other loop (and zloop backend), each
through the ``zloop.testing`` plugin, which swaps the loop behind
``asyncio.new_event_loop()`` and records the loops each test ran. A run in
which no test ran its loop fails, rather than passing as a silent run on
asyncio. It diffs each run against the baseline test by test, counting
only the tests that the swap reached (a test that ran no event loop, such as
AnyIO's trio half, or only a loop class of the project's own, cannot show a
loop difference), runs the tests whose outcome differs again on both loops
(``--reruns`` rounds, with the same arguments) to tell timing-dependent
tests from real differences, and prints one table and each difference with
the first lines of its failure.

Exit status: 0 when every difference is listed, with its reason, in the
``--expected`` file (the format of ``compat/SUITE/expected.toml``); 1 when
one is not, or a run failed; 2 on a usage error; 3 when the swap reached no
test (every test that ran a loop ran the project's own loop class), so that
nothing was compared. It uses pytest-xdist and pytest-timeout when the
project's runs have them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from zloop.compat import report
from zloop.compat.runner import (LOOPS, Verdict, backend_names, judge, load_run, run_label,
                                 run_pytest)
from zloop.compat.suites import Suite, SuiteError, load_expected

# Defaults for a project's own suite, which has no suite.toml to say them.
DEFAULT_JOBS = 2
DEFAULT_TIMEOUT_S = 120
WALL_LIMIT_S = 3600

# A project's own differences are run again up to this many: a real difference
# shared by many tests (one cause) must not keep the flaky ones from their
# reruns, and a rerun of a few hundred tests costs little beside a full run.
RERUN_MAX = 300

# The exit status when the swap reached no test: nothing was compared.
EXIT_NOT_REACHED = 3


def run_check(args: argparse.Namespace) -> int:
    _require("pytest", "pytest is not installed in this environment: pip install pytest")
    loops = _names(args.loops, LOOPS, "--loops")
    backends: list[str | None] = [None]
    if args.backend:
        if "zloop" not in loops:
            raise SuiteError("--backend picks zloop's backends: add zloop to --loops")
        backends = list(_names(args.backend, backend_names(), "--backend"))
    if "uvloop" in loops:
        _require("uvloop", "uvloop is not installed in this environment: pip install uvloop "
                 "(or leave it out of --loops)")
    if args.reruns < 0:
        raise SuiteError("--reruns must be 0 or more")
    project = Path.cwd().resolve()
    suite = Suite(name=project.name, directory=project, description="", source="local",
                  targets=[], pytest_args=[], jobs=DEFAULT_JOBS, timeout_s=DEFAULT_TIMEOUT_S,
                  wall_limit_s=WALL_LIMIT_S, plugins=[], requirements=[],
                  expected=load_expected(args.expected.resolve()) if args.expected else {})
    runs = [(loop, backend) for loop in loops if loop != "asyncio"
            for backend in (backends if loop == "zloop" else [None])]
    with _results_dir(args.results) as out_dir:
        return _check(suite, args, runs, out_dir)


def _require(module: str, message: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise SuiteError(message)


def _names(text: str, known: tuple[str, ...], option: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SuiteError(f"{option} {text!r}: expected a comma-separated list of "
                         f"{', '.join(known)}")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def _results_dir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="zloop-check-") as tmp:
        yield Path(tmp)


Checked = tuple[str, str | None, Verdict, dict[str, Any]]


def _check(suite: Suite, args: argparse.Namespace, runs: list[tuple[str, str | None]],
           out_dir: Path) -> int:
    project = suite.directory
    print(f"compat: checking {project}, Python {'.'.join(map(str, sys.version_info[:3]))}: "
          f"stock asyncio, then {', '.join(run_label(*r) for r in runs)}", flush=True)
    base_path = out_dir / "asyncio.json"
    rc = run_pytest(suite, project, "asyncio", None, base_path, args)
    baseline = load_run(base_path, rc)
    base_verdict = judge(suite, args, "asyncio", None, baseline, None, base_path, rc, project,
                         require_loop=False)
    own = _own_loop_tests(baseline)
    reached = baseline["summary"]["on_loop"] > 0
    if not reached and own:
        base_verdict.row["status"] = "not compared"
    elif not reached and baseline["summary"]["collected"]:
        base_verdict.row["status"] = "no loop"
        base_verdict.problems.append(
            "no test ran an event loop, so there is nothing to compare: does the suite have "
            "async tests, and is the plugin that runs them (pytest-asyncio, anyio's) "
            "installed here?")
    checked: list[Checked] = []
    if reached and not base_verdict.problems:
        for loop, backend in runs:
            name = f"{loop}-{backend}" if backend else loop
            path = out_dir / f"{name}.json"
            rc = run_pytest(suite, project, loop, backend, path, args)
            result = load_run(path, rc)
            verdict = judge(suite, args, loop, backend, result, baseline, path, rc,
                            project, rounds=args.reruns, reached_only=True,
                            rerun_max=RERUN_MAX)
            checked.append((loop, backend, verdict, result))
    return _print_outcome(suite, baseline, base_verdict, checked, args, out_dir, own)


def _own_loop_tests(result: dict[str, Any]) -> dict[str, list[str]]:
    """The tests of a run that ran loops, none of them of a known family
    (asyncio, uvloop, zloop): test -> those loop types."""
    from zloop.testing import loop_family  # imports pytest, which check requires

    return {test: entry["loops"] for test, entry in sorted(result["tests"].items())
            if entry["loops"] and all(loop_family(t) is None for t in entry["loops"])}


def _own_loop_note(own: dict[str, list[str]], bases: dict[str, str]) -> str:
    """``N tests ran on the project's own loop class `pkg.Loop` (a subclass
    of `asyncio.SelectorEventLoop`)``, for each class."""
    classes = Counter(t for loops in own.values() for t in loops)
    described = [f"`{name}` (a subclass of `{bases.get(name, 'an unknown class')}`)"
                 for name, _ in classes.most_common()]
    kind = "class" if len(described) == 1 else "classes"
    return (f"{len(own)} test(s) ran on the project's own loop {kind} "
            f"{', '.join(described)}: a loop swap does not reach them; they were not "
            "compared")


def _print_outcome(suite: Suite, baseline: dict[str, Any], base_verdict: Verdict,
                   checked: list[Checked], args: argparse.Namespace, out_dir: Path,
                   own: dict[str, list[str]]) -> int:
    problems = list(base_verdict.problems)
    rows = [base_verdict.row]
    for loop, backend, verdict, result in checked:
        if verdict.row["status"] == "stale list":
            verdict.row["status"] = "ok"  # a fixed difference is no failure here
        rows.append(verdict.row)
        label = run_label(loop, backend)
        problems += [f"{label}: {p}" for p in verdict.problems]
        assert verdict.diff is not None
        print(f"\ncompat: {label} against stock asyncio")
        report.print_diff(verdict.diff, loop, details=_details(verdict.diff, baseline, result))
        for d in verdict.diff.listed:
            print(f"  LISTED    {d.test}: asyncio {d.baseline}, {loop} {d.target} "
                  f"({d.entry.reason if d.entry else ''})")
        _print_unswapped(result, loop)
        if verdict.diff.unlisted:
            problems.append(f"{label}: {len(verdict.diff.unlisted)} test(s) differ from "
                            "stock asyncio and are not listed in "
                            f"{args.expected or 'an --expected file'}")
    print(f"\ncompat: {suite.name} ({suite.directory}), Python "
          "{}.{}.{}".format(*sys.version_info[:3]))
    report.print_table(rows, report.CHECK_COLUMNS)
    print("  on_loop: tests that ran a loop of the run's kind; other_loop: only loops the "
          "swap does not replace (the project's own class, or asyncio's built from a "
          "class); no_loop: no event loop; not_counted: differing outcomes in tests the "
          "swap did not reach, which cannot come from the loop")
    if args.results:
        print(f"compat: reports and pytest's output in {out_dir}")
    note = _own_loop_note(own, baseline.get("loop_bases", {})) if own else None
    if note and baseline["summary"]["on_loop"] == 0 and not problems:
        print(f"compat: NOT COMPARED: {note}.")
        print("compat: nothing to compare, so no verdict. To check those tests on zloop, "
              "make the loop class's base configurable (e.g. zloop.Loop when an "
              "environment variable says so) and run them on each base; the suite's other "
              "tests, if any, are compared by this check (docs/validate.md, \"A suite with "
              "its own loop class\")")
        return EXIT_NOT_REACHED
    if note:
        print(f"compat: NOTE: {note}")
    for problem in problems:
        print(f"compat: FAIL: {problem}")
    if problems:
        if any(v.diff is not None and v.diff.unlisted for _, _, v, _ in checked):
            print("compat: a difference is a zloop bug to report, unless the test depends on "
                  "stock asyncio's own classes or internals; list accepted ones, with the "
                  "reason, in a TOML file passed as --expected (see docs/validate.md)")
        return 1
    print("compat: OK: every run ran on its loop, and no test differs from stock asyncio "
          "beyond the listed ones")
    return 0


def _details(diff: report.DiffResult, baseline: dict[str, Any],
             result: dict[str, Any]) -> dict[str, list[str]]:
    """The first lines of each unlisted difference's failure, from the run
    in which it failed (the loop under test's, else asyncio's)."""
    details = {}
    for d in diff.unlisted:
        for side, run in (("", result), ("on asyncio: ", baseline)):
            entry = run["tests"].get(d.test) or {}
            lines = entry.get("detail") or ([entry["message"]] if entry.get("message") else [])
            if report.outcome_class(entry.get("outcome")) == "failed" and lines:
                details[d.test] = [side + lines[0], *lines[1:]]
                break
    return details


def _print_unswapped(result: dict[str, Any], loop: str, limit: int = 5) -> None:
    """Tests that ran only stock asyncio loops in a run on another loop:
    their loop came from a loop class (``asyncio.SelectorEventLoop()``), not
    from ``asyncio.new_event_loop()``, so the swap could not reach them.
    They are compared all the same (the stock run ran them on the same)."""
    from zloop.testing import is_loop_of  # imports pytest, which check requires

    missed = sorted(test for test, entry in result["tests"].items()
                    if entry["loops"] and all(is_loop_of(t, "asyncio") for t in entry["loops"]))
    if not missed:
        return
    print(f"  NOTE      {len(missed)} test(s) ran only stock asyncio loops in the {loop} run "
          "(built from a loop class, which the swap does not reach), e.g.:")
    for test in missed[:limit]:
        print(f"            {test}")
