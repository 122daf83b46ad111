"""Command line: ``python -m zloop.compat {check,list,fetch,run,diff,table}``.

``check`` runs the suite of the project in the current directory once per loop
and says whether it behaves the same on each as on stock asyncio (see
docs/validate.md); the other commands work on the pinned suites.

``run SUITE --loop L`` is the whole job: fetch and verify the pin, install the
pinned test requirements, run the suite on loop L through ``zloop.testing``,
check that the swap took effect, and (for a loop other than asyncio) diff
against a stock-asyncio run of the same suite on the same Python, running
that baseline first when none is cached. Exit status 0 means: the swap took
effect and every difference from asyncio is listed, and every listed one
still differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

from zloop.compat import fetch, report
from zloop.compat.check import DEFAULT_TOTAL_TIMEOUT_S, GUIDE, run_check
from zloop.compat.runner import (LOOPS, backend_names, judge, load_run, python_tag,
                                 run_pytest)
from zloop.compat.suites import (PINNED_SUITES_HOME, Suite, SuiteError, default_compat_dir,
                                 load_suite, suite_names)
# The uvloop that --loop uvloop runs on: the reference a user compares against.
UVLOOP_PIN = "uvloop==0.23.0"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # Everything after "--" goes to pytest. argparse alone cannot do that
    # here: once an option follows SUITE, the optional positional list has
    # already matched empty, and "-- -k x" would be refused.
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    args = _parser().parse_args(argv)
    if extra:
        args.pytest_args = [*getattr(args, "pytest_args", []), *extra]
    try:
        return int(args.func(args) or 0)
    except (SuiteError, subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"compat: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m zloop.compat", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compat-dir", type=Path, default=None,
                        help="directory of suite definitions (default: $ZLOOP_COMPAT_DIR, "
                        "else ./compat if it holds a */suite.toml, else the compat/ of the "
                        "checkout zloop runs from)")
    sub = parser.add_subparsers(required=True, dest="command")

    p = sub.add_parser(
        "check", help="run the current directory's pytest suite on each loop and "
        "report the tests whose outcome differs from stock asyncio",
        description=textwrap.fill(
            "Run this project's pytest suite (in the current directory, as plain pytest "
            "would) once on stock asyncio and once per other loop (and zloop backend), "
            "through zloop's pytest plugin, which swaps the loop behind "
            "asyncio.new_event_loop() and records the loops each test ran; prove each run "
            "ran on its loop, rerun the tests whose outcome differs to tell flaky tests from "
            "real differences, and say each difference with the first lines of its "
            "failure.", 79),
        epilog=GUIDE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loops", default="asyncio,zloop",
                   help="comma-separated loops; asyncio, the baseline, always runs "
                   f"(from {','.join(LOOPS)}; default asyncio,zloop)")
    p.add_argument("--backend", default=None,
                   help=f"comma-separated zloop backends to run ({','.join(backend_names())}; "
                   "default: zloop's own choice)")
    p.add_argument("--expected", type=Path, default=None, metavar="FILE",
                   help="TOML list of accepted differences ([[zloop]] test = ..., "
                   "reason = ...), the format of compat/SUITE/expected.toml")
    p.add_argument("--reruns", type=int, default=2,
                   help="times a differing test runs again on both loops (default 2)")
    p.add_argument("--jobs", "-n", type=int, default=None,
                   help="pytest-xdist workers when it is installed (default: 2; 0: none)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="per-test limit in seconds (default 120): pytest-timeout, where the "
                   "project has it, fails a test that runs longer and the run goes on; "
                   "without it, such a test ends the check (exit 5), naming it. pytest must "
                   "also exit within S seconds of its last test")
    p.add_argument("--total-timeout", type=float, default=DEFAULT_TOTAL_TIMEOUT_S, metavar="S",
                   help="limit in seconds on the whole check, every run and rerun; past it "
                   "the check ends (exit 5), naming the tests that ran (default "
                   f"{DEFAULT_TOTAL_TIMEOUT_S}; 0: none)")
    p.add_argument("--results", type=Path, default=None, metavar="DIR",
                   help="keep the JSON reports and pytest's output in DIR (default: a "
                   "temporary directory)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show pytest's output as it runs (default: a progress line per run, "
                   "and the end of the output of a run that fails)")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --), "
                   "passed to every run, the reruns included")
    p.set_defaults(func=run_check)

    p = sub.add_parser("list", help="list the suites and their pins")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("fetch", help="fetch and verify a suite's sdist")
    p.add_argument("suite")
    p.set_defaults(func=_cmd_fetch)

    p = sub.add_parser("run", help="run a suite on a loop and diff it against asyncio")
    p.add_argument("suite")
    p.add_argument("--loop", choices=LOOPS, default="zloop")
    p.add_argument("--backend", choices=backend_names(), default=None,
                   help="zloop backend, passed as ZLOOP_BACKEND")
    p.add_argument("--no-install", action="store_true",
                   help="do not pip-install the pinned test requirements")
    p.add_argument("--rebaseline", action="store_true",
                   help="rerun the stock-asyncio baseline even if one is cached")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the diff against asyncio (no pass/fail on differences)")
    p.add_argument("--jobs", "-n", type=int, default=None, help="pytest-xdist workers")
    p.add_argument("--timeout", type=int, default=None, help="per-test timeout, seconds")
    p.add_argument("--record", action="store_true",
                   help="add this run's summary to compat/results.json and docs/compat.md")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("run-env", help="run from a tox env name: [pyXY-]SUITE-LOOP[-BACKEND]")
    p.add_argument("env_name")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    p.set_defaults(func=_cmd_run_env)

    p = sub.add_parser("diff", help="diff two zloop.testing reports of the same suite")
    p.add_argument("suite")
    p.add_argument("baseline", type=Path)
    p.add_argument("target", type=Path)
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("table", help="print (or --write) the compatibility table")
    p.add_argument("--write", action="store_true",
                   help="merge cached summaries into compat/results.json and docs/compat.md")
    p.set_defaults(func=_cmd_table)
    return parser


def _compat_dir(args: argparse.Namespace) -> Path:
    return (args.compat_dir or default_compat_dir()).resolve()


def _cache_dir(compat_dir: Path) -> Path:
    return Path(os.environ.get("ZLOOP_COMPAT_CACHE", compat_dir / ".cache")).resolve()


def _cmd_list(args: argparse.Namespace) -> int:
    compat_dir = _compat_dir(args)
    names = suite_names(compat_dir)
    if not names:
        # Installed from a wheel, zloop carries no suite definitions.
        print(f"compat: no suite definitions (*/suite.toml) under {compat_dir}. The pinned "
              f"suites are defined in {PINNED_SUITES_HOME}: run from a checkout of it, or "
              "pass --compat-dir (or $ZLOOP_COMPAT_DIR). To check your own project's "
              "suite: python -m zloop.compat check", file=sys.stderr)
        return 1
    for name in names:
        suite = load_suite(compat_dir, name)
        print(f"{name:15} {suite.pin:28} {suite.description}")
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    compat_dir = _compat_dir(args)
    suite = load_suite(compat_dir, args.suite)
    root = _prepare_tree(suite, _cache_dir(compat_dir))
    print(root)
    return 0


def _prepare_tree(suite: Suite, cache_dir: Path) -> Path:
    """Return the directory pytest runs in (its rootdir)."""
    if suite.source == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"])
    archive = fetch.fetch_sdist(suite, cache_dir)
    return fetch.extract_sdist(suite, archive, cache_dir)


def _result_path(cache_dir: Path, suite: Suite, loop: str, backend: str | None) -> Path:
    name = loop if not backend else f"{loop}-{backend}"
    return cache_dir / "results" / suite.name / f"py{python_tag()}" / f"{name}.json"


def _cmd_run(args: argparse.Namespace) -> int:
    compat_dir = _compat_dir(args)
    cache_dir = _cache_dir(compat_dir)
    suite = load_suite(compat_dir, args.suite)
    if args.backend and args.loop != "zloop":
        print("compat: --backend applies to zloop only", file=sys.stderr)
        return 2
    root = _prepare_tree(suite, cache_dir)
    if not args.no_install:
        extra = [UVLOOP_PIN] if args.loop == "uvloop" else []
        fetch.install_requirements(suite.requirements, extra)
        if suite.install_sdist:
            fetch.install_sdist(fetch.fetch_sdist(suite, cache_dir))
    run_root = _run_root(suite, root, cache_dir)

    baseline = None
    if args.loop != "asyncio" and not args.no_baseline:
        base_path = _result_path(cache_dir, suite, "asyncio", None)
        if args.rebaseline or not _fresh_baseline(base_path, suite):
            print(f"compat: running the stock-asyncio baseline of {suite.name} first",
                  flush=True)
            rc = run_pytest(suite, run_root, "asyncio", None, base_path, args)
            load_run(base_path, rc)
        baseline = report.load_report(base_path)

    out_path = _result_path(cache_dir, suite, args.loop, args.backend)
    rc = run_pytest(suite, run_root, args.loop, args.backend, out_path, args)
    result = load_run(out_path, rc)
    return _conclude(suite, args, result, baseline, out_path, rc, compat_dir, run_root)


def _run_root(suite: Suite, root: Path, cache_dir: Path) -> Path:
    """The directory pytest runs in: the tree, or the copied parts of it."""
    if not suite.copy:
        return root
    import shutil

    run_root = cache_dir / "run" / f"{suite.package}-{suite.version}"
    if run_root.exists():
        shutil.rmtree(run_root)
    run_root.mkdir(parents=True)
    for part in suite.copy:
        if (root / part).is_dir():
            shutil.copytree(root / part, run_root / part)
        else:
            shutil.copy2(root / part, run_root / part)
    return run_root


def _fresh_baseline(path: Path, suite: Suite) -> bool:
    if not path.exists():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return False
    return (data.get("label") == suite.pin and data.get("python") ==
            "{}.{}.{}".format(*sys.version_info[:3]) and not data.get("partial"))


def _conclude(suite: Suite, args: argparse.Namespace, result: dict[str, Any],
              baseline: dict[str, Any] | None, out_path: Path, rc: int,
              compat_dir: Path, run_root: Path) -> int:
    verdict = judge(suite, args, args.loop, args.backend, result, baseline, out_path, rc,
                    run_root)
    problems = verdict.problems
    if verdict.diff is not None:
        report.print_diff(verdict.diff, args.loop)
        if not verdict.diff.ok:
            problems.append("differences from asyncio do not match "
                            f"{suite.directory.name}/expected.toml")
    row = verdict.row
    summary_path = out_path.with_suffix(".summary.json")
    summary_path.write_text(json.dumps(row, indent=1), encoding="utf-8")
    print()
    report.print_table([row])
    if args.record:
        _record([row], compat_dir)
    for problem in problems:
        print(f"compat: FAIL: {problem}")
    print(f"compat: report {out_path}\ncompat: summary {summary_path}")
    return 1 if problems else 0


# tox factors that name a suite by a shorter word than its directory.
SUITE_ALIASES = {"asyncio": "asyncio_tests", "uvloop": "uvloop_tests"}


def parse_env_name(env_name: str) -> tuple[str, str, str | None]:
    """``py312-uvicorn-zloop-epoll`` -> ("uvicorn", "zloop", "epoll")."""
    factors = [f for f in env_name.split("-") if not (f.startswith("py") and f[2:].isdigit())]
    if len(factors) not in (2, 3) or factors[1] not in LOOPS:
        raise SuiteError(f"env name {env_name!r} is not [pyXY-]SUITE-LOOP[-BACKEND]")
    backend = factors[2] if len(factors) == 3 else None
    if backend is not None and backend not in backend_names():
        raise SuiteError(f"env name {env_name!r}: unknown backend {backend!r}")
    return SUITE_ALIASES.get(factors[0], factors[0]), factors[1], backend


def _cmd_run_env(args: argparse.Namespace) -> int:
    suite, loop, backend = parse_env_name(args.env_name)
    argv = ["run", suite, "--loop", loop]
    if backend and loop == "zloop":
        argv += ["--backend", backend]
    if args.compat_dir:
        argv = ["--compat-dir", str(args.compat_dir), *argv]
    if args.pytest_args:
        argv += ["--", *args.pytest_args]
    return main(argv)


def _cmd_diff(args: argparse.Namespace) -> int:
    suite = load_suite(_compat_dir(args), args.suite)
    baseline = report.load_report(args.baseline)
    target = report.load_report(args.target)
    python = ".".join(target["python"].split(".")[:2])
    expected = suite.expected_for(target["loop"], python, target.get("backend"))
    diff = report.diff_reports(baseline, target, expected)
    report.print_diff(diff, target["loop"])
    return 0 if diff.ok else 1


def _cmd_table(args: argparse.Namespace) -> int:
    compat_dir = _compat_dir(args)
    rows = [json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((_cache_dir(compat_dir) / "results").glob("*/*/*.summary.json"))]
    if args.write:
        rows = _record(rows, compat_dir)
    if rows:
        report.print_table(rows)
    return 0


def _record(rows: list[dict[str, Any]], compat_dir: Path) -> list[dict[str, Any]]:
    """Merge rows into compat/results.json (one per suite, Python, loop, backend)."""
    path = compat_dir / "results.json"
    merged: dict[tuple[str, ...], dict[str, Any]] = {}
    if path.exists():
        for row in json.loads(path.read_text(encoding="utf-8")):
            merged[_row_key(row)] = row
    for row in rows:
        slim = {k: v for k, v in row.items() if k not in _UNRECORDED}
        merged[_row_key(slim)] = slim
    ordered = [merged[k] for k in sorted(merged)]
    path.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
    doc = compat_dir.parent / "docs" / "compat.md"
    if doc.exists():
        report.write_docs_table(doc, ordered)
    return ordered


# Row keys that stay out of compat/results.json: lists, and check's columns.
_UNRECORDED = ("unlisted_tests", "stale_entries", "other_loop", "no_loop", "flaky",
               "not_counted")


def _row_key(row: dict[str, Any]) -> tuple[str, ...]:
    return (row["suite"], row["python"], row["loop"], row["backend"])
