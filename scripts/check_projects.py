"""``python -m zloop.compat check`` on real asyncio projects' own suites.

    python scripts/check_projects.py [NAME ...] [-- CHECK ARGS]

Each project's sdist (which carries its tests) is fetched by pip at run time,
checked against the pinned sha256 and extracted into the git-ignored cache
(``$ZLOOP_COMPAT_CACHE``, else ``compat/.cache``), exactly as the harness
fetches its pinned suites; nothing of theirs enters the repository. Each
project gets a virtual environment of its own in that cache, made from the
Python running this script, with its test requirements pinned exactly
(everything they pull in included, resolved on CPython 3.12) and the
project installed from its verified sdist. Then ``check`` runs in the
extracted tree as a user would run it there: with the arguments plain
pytest needs in that project and no others, and zloop taken from this
checkout (build it first for this Python: scripts/dev-build).

The projects cover each kind of suite docs/validate.md describes:
pytest-asyncio in auto and in strict mode, AnyIO's pytest plugin with trio
as well as asyncio, ``unittest.IsolatedAsyncioTestCase``, a suite that runs
on its own loop class, strict pytest configurations, a suite with its own
``--event-loop`` option, one that mostly errors on both loops, one that
runs no loop, one with xfail tests that pass, suites that run their loops
in the processes they start (multiprocessing spawn children, pytester's
subprocesses), and suites that rely on stock asyncio's internals. Each has
the verdict it must give (the check's exit status); the script exits 1 if
any project's check gives another. Not part of CI (it fetches from PyPI and
takes a while); the results are in docs/validate.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zloop.compat import fetch  # noqa: E402
from zloop.compat.suites import Suite  # noqa: E402

PYTEST = ("Pygments==2.21.0", "iniconfig==2.3.1", "packaging==26.3", "pluggy==1.7.0",
          "pytest==9.2.0")
ASYNCIO_PLUGIN = ("pytest-asyncio==1.5.0", "typing_extensions==4.16.0")
COVERAGE = ("coverage==7.17.4", "pytest-cov==7.1.0")
CODSPEED = ("pytest-codspeed==5.0.4", "rich==15.0.0", "markdown-it-py==4.3.0", "mdurl==0.1.2")


@dataclasses.dataclass(frozen=True)
class Project:
    version: str
    sha256: str
    kind: str  # the kind of suite it stands for
    requirements: tuple[str, ...]  # test requirements, exact pins, transitive included
    pytest_args: tuple[str, ...] = ()  # what plain pytest needs there, if anything
    verdict: int = 0  # the exit status check must give
    expected: str = ""  # the differences accepted (--expected), as TOML


# AnyIO's conftest runs every test under blockbuster, which allows the
# blocking os.read of subprocess.Popen's exec-error pipe only from
# asyncio/base_events.py; zloop's spawn makes the same read from zloop/_unix.py.
_BLOCKBUSTER_SPAWN = "".join(
    f'[[zloop]]\ntest = "tests/{module}::*[asyncio*"\nreason = "blockbuster allows the '
    "os.read of Popen's exec-error pipe from asyncio/base_events.py only; zloop's spawn "
    'makes the same read from zloop/_unix.py (BlockingError)"\n\n'
    for module in ("test_subprocesses.py", "test_to_process.py"))

# pytest-asyncio's runner fixture ignores the "was never awaited" warning of
# a closed loop's shutdown_asyncgens() by stock asyncio's class name
# (BaseEventLoop.shutdown_asyncgens); zloop's coroutine is
# Loop.shutdown_asyncgens, so a test that counts the inner run's warnings
# counts one more.
_SHUTDOWN_ASYNCGENS_NAME = (
    '[[zloop]]\ntest = "tests/test_event_loop_fixture.py::'
    'test_closing_event_loop_in_sync_fixture_teardown_raises_warning"\nreason = '
    '"pytest-asyncio ignores the never-awaited RuntimeWarning of shutdown_asyncgens() by '
    'stock asyncio\'s class name, BaseEventLoop.shutdown_asyncgens; zloop\'s is '
    'Loop.shutdown_asyncgens, and the test counts warnings"\n')

PROJECTS = {
    "aiofiles": Project(
        "25.1.0", "a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2",
        "pytest-asyncio, auto mode", PYTEST + ASYNCIO_PLUGIN),
    "aiohappyeyeballs": Project(
        "2.7.1", "065665c041c42a5938ed220bdcd7230f22527fbec085e1853d2402c8a3615d9d",
        "pytest-asyncio, auto mode; addopts with --cov, pythonpath",
        PYTEST + ASYNCIO_PLUGIN + COVERAGE + CODSPEED),
    "asgiref": Project(
        "3.13.0", "034cc8cbf72d00553b4be256703ac545120b4e50af13b49dec99da899aeeecb4",
        "pytest-asyncio, strict mode", PYTEST + ASYNCIO_PLUGIN),
    "async-timeout": Project(
        "5.0.1", "d9321a7a3d5a6a5e187e824d2fa0793ce379a202935782d555d6e9d2735677d3",
        "pytest-asyncio, strict mode; addopts with --cov", PYTEST + ASYNCIO_PLUGIN + COVERAGE),
    "janus": Project(
        "2.0.0", "0970f38e0e725400496c834a368a67ee551dc3b5ad0a257e132f5b46f2e77770",
        "pytest-asyncio, strict mode; filterwarnings = error; benchmarks (codspeed)",
        PYTEST + ASYNCIO_PLUGIN + COVERAGE + CODSPEED),
    "anyio": Project(
        "4.16.0", "59bb03251907983d1603d27c3087ddb1e93299ea2163adcdba37899a4fb12ffb",
        "AnyIO's pytest plugin: each test on asyncio, asyncio+eager, asyncio+uvloop and "
        "trio; xdist",
        PYTEST + ("attrs==26.1.0", "blockbuster==1.5.29", "cffi==2.1.1",
                  "cryptography==50.0.2", "exceptiongroup==1.3.1", "execnet==2.1.2",
                  "forbiddenfruit==0.1.4", "hypothesis==6.170.15", "idna==3.20",
                  "outcome==1.3.0.post0", "psutil==7.2.2", "pycparser==3.12",
                  "pytest-mock==3.17.0", "pytest-timeout==2.4.0", "pytest-xdist==3.8.0",
                  "sniffio==1.3.1", "sortedcontainers==2.4.0", "trio==0.35.0",
                  "trustme==1.2.1", "truststore==0.10.5", "typing_extensions==4.16.0",
                  "uvloop==0.23.0"),
        expected=_BLOCKBUSTER_SPAWN),
    "aiometer": Project(
        "1.0.0", "c492933dbd3a90c619473c3f242d00842ee274f6285a44b5d5fbee228a407056",
        "AnyIO's pytest plugin (asyncio); --strict-config, --strict-markers, "
        "filterwarnings = error, --cov-fail-under=100",
        # trio: its filterwarnings name a trio warning class, which pytest imports.
        PYTEST + COVERAGE + ("anyio==4.16.0", "attrs==26.1.0", "idna==3.20",
                             "outcome==1.3.0.post0", "sniffio==1.3.1",
                             "sortedcontainers==2.4.0", "trio==0.35.0",
                             "typing_extensions==4.16.0")),
    "aiosqlite": Project(
        "0.22.1", "043e0bd78d32888c0a9ca90fc788b38796843360c855a7262a532813133a0650",
        "unittest.IsolatedAsyncioTestCase, in a file pytest names explicitly",
        PYTEST, pytest_args=("aiosqlite/tests/smoke.py",)),
    "async-solipsism": Project(
        "0.10", "f9ce2b7f4ac650c543e87ec4d60947b4c7cd91e3f0b9c0570e98cd948bbcbc0c",
        "its own loop class (pytest_asyncio_loop_factories)",
        PYTEST + ASYNCIO_PLUGIN + ("pytest-mock==3.17.0",), verdict=3),
    "aiosignal": Project(
        "1.4.0", "f47eecd9468083c2029cc99945502cb7708b082c232f9aca65da147157b251c7",
        "strict addopts: -p pytest_cov, --cov, --doctest-modules, --strict-markers, "
        "--showlocals; filterwarnings = error",
        PYTEST + ASYNCIO_PLUGIN + COVERAGE + ("frozenlist==1.8.0",)),
    "aiosmtplib": Project(
        "5.1.3", "ac2b418d3260ba62d9cfd0fe7359726e9dc009a4e8e8d9909fdfae332f522a7c",
        "pytest-asyncio, auto mode; its conftest defines its own --event-loop; xdist",
        PYTEST + ASYNCIO_PLUGIN + ("aiosmtpd==1.4.6", "atpublic==9.0.0", "attrs==26.1.0",
                                   "cffi==2.1.1", "cryptography==50.0.2", "execnet==2.1.2",
                                   "hypothesis==6.170.15", "idna==3.20", "pycparser==3.12",
                                   "pytest-xdist==3.8.0", "sortedcontainers==2.4.0",
                                   "trustme==1.2.1")),
    # Its tests ask for pytest-asyncio's event_loop fixture, which 1.x removed:
    # most error in setup on both loops. The scope option is what check says
    # its filterwarnings = error needs under pytest-asyncio 1.x.
    "aiorwlock": Project(
        "1.4.0", "4cea5bec4e9d03533a26919299394822a1422aa519bca9dd09178ec490f8d1cc",
        "pytest-asyncio 1.x under a suite written for 0.x: most tests error on both "
        "loops (-- -o asyncio_default_fixture_loop_scope=function)",
        PYTEST + ASYNCIO_PLUGIN,
        pytest_args=("-o", "asyncio_default_fixture_loop_scope=function"), verdict=4),
    "tenacity": Project(
        "9.2.1", "a606b5c808d0cded4a359d5b9932d867ff2a6a6b64d37350260fd01bbdf83839",
        "unittest test cases whose async tests run through asyncio.run(); loops made "
        "by asyncio.new_event_loop() and never run",
        PYTEST + ("tornado==6.6.1",)),
    "asyncstdlib": Project(
        "3.14.0", "f99396992a3bba7495d8cf6c832bfe8c8727f61213233d3569a5a9cbd1c04385",
        "coroutines driven by hand: no event loop", PYTEST + ("typing_extensions==4.16.0",),
        verdict=3),
    "httpcore": Project(
        "1.0.9", "6e34463af53fd2ab5d807f399a9b45ea31c3dfa2276f15a2c3f00afff6e176e8",
        "AnyIO's pytest plugin, asyncio and trio; xfail tests that pass; "
        "--strict-config, filterwarnings = error",
        PYTEST + ("anyio==4.16.0", "attrs==26.1.0", "blinker==1.9.0", "brotlicffi==1.2.1.0",
                  "certifi==2026.10.19.post1", "cffi==2.1.1", "click==8.5.1",
                  "decorator==5.3.1", "Flask==3.1.3", "greenlet==3.5.6", "h11==0.16.0",
                  "h2==4.4.1", "hpack==4.2.0", "httpbin==0.10.4", "hyperframe==6.1.0",
                  "idna==3.20", "itsdangerous==2.2.0", "Jinja2==3.1.6", "MarkupSafe==3.0.4",
                  "outcome==1.3.0.post0", "pycparser==3.12", "pytest-httpbin==2.1.0",
                  "pytest-trio==0.8.0", "six==1.17.0", "sniffio==1.3.1", "socksio==1.0.0",
                  "sortedcontainers==2.4.0", "trio==0.35.0", "typing_extensions==4.16.0",
                  "Werkzeug==3.1.9")),
    # Suites that run their loops in the processes they start.
    "aiorun": Project(
        "2025.1.1", "86d1075a034ce2671ab532db06e9204fe784cdd0c66ca7b8cc47a7527d0d50a3",
        "loops in multiprocessing spawn children (its conftest sets the start method); "
        "--continue-on-collection-errors",
        PYTEST + ("uvloop==0.23.0",)),
    "aiomultiprocess": Project(
        "0.9.1", "f0231dbe0291e15325d7896ebeae0002d95a4f2675426ca05eb35f24c60e495b",
        "unittest cases whose process pools run a loop in each spawned child, in files "
        "pytest names explicitly",
        PYTEST + ("uvloop==0.23.0",),
        pytest_args=("aiomultiprocess/tests/core.py", "aiomultiprocess/tests/pool.py",
                             "aiomultiprocess/tests/scheduler.py")),
    "pytest-asyncio": Project(
        "1.5.0", "92c8fa83ca419fd0d4bd6a34df6520dae435841d3733c319343249492adf37f7",
        "pytester: inner pytest runs in the test's process, and in subprocesses "
        "(runpytest_subprocess); filterwarnings = error",
        PYTEST + ("hypothesis==6.170.15", "sortedcontainers==2.4.0",
                  "typing_extensions==4.16.0"),
        expected=_SHUTDOWN_ASYNCGENS_NAME),
    # Suites that rely on stock asyncio's internals.
    "asyncio-dgram": Project(
        "3.0.0", "bd0937807a44451d799573b32400702187fd0bba6136f7cf306e9327c0c20f3e",
        "pytest-asyncio, strict mode; from_socket() writes transport._address, a private "
        "attribute of stock asyncio's datagram transport",
        PYTEST + ASYNCIO_PLUGIN, verdict=1),
    "aiocache": Project(
        "0.12.3", "f528b27bf4d436b497a1d0d1a8f59a542c153ab1e37c3621713cb376d44c4713",
        "pytest-asyncio, auto mode; --cov, filterwarnings = error; asserts "
        "isinstance(handle, asyncio.Handle) (its unit tests: the others need redis and "
        "memcached servers)",
        PYTEST + ASYNCIO_PLUGIN + COVERAGE + (
            "aiomcache==0.8.2", "marshmallow==3.26.2", "msgpack==1.2.4", "pytest-mock==3.17.0",
            "redis==4.6.0"),
        pytest_args=("-o", "asyncio_default_fixture_loop_scope=function", "tests/ut"),
        verdict=1),
}


def _tree(name: str, project: Project, cache_dir: Path) -> tuple[Path, Path]:
    pin = Suite(name=name, directory=cache_dir, description="", source="sdist", targets=[],
                pytest_args=[], jobs=0, timeout_s=0, wall_limit_s=0, plugins=[],
                requirements=[], package=name, version=project.version,
                sha256=project.sha256)
    archive = fetch.fetch_sdist(pin, cache_dir)
    return fetch.extract_sdist(pin, archive, cache_dir), archive


def _venv(name: str, project: Project, archive: Path, cache_dir: Path) -> Path:
    """The project's own environment: its pins, and the project from its
    sdist; made once, again when the pins change."""
    tag = "py{}.{}".format(*sys.version_info[:2])
    venv = cache_dir / "venv" / f"{name}-{project.version}-{tag}"
    python = venv / "bin" / "python"
    stamp = venv / ".zloop-pins"
    want = hashlib.sha256("\n".join([*project.requirements, project.sha256]).encode()).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == want:
        return python
    print(f"check_projects: {name}: making {venv}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *project.requirements], check=True)
    subprocess.run([*pip, "--no-deps", str(archive)], check=True)
    stamp.write_text(want + "\n")
    return python


def _summary(results: Path) -> dict[str, object]:
    """Counts from the check's table (``check.json``): tests, where they
    ran on stock asyncio, and how the first zloop run compared."""
    path = results / "check.json"
    if not path.exists():
        return {}
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    out = {k: rows[0].get(k) for k in ("collected", "passed", "xfailed", "xpassed", "on_loop",
                                       "other_loop", "no_loop")}
    zloop = next((row for row in rows[1:] if row["loop"] == "zloop"), None)
    if zloop is not None:
        out.update(zloop_on_loop=zloop["on_loop"], compared=zloop.get("compared"),
                   differs=zloop["differs"], flaky=zloop["flaky"],
                   not_counted=zloop["not_counted"])
    return out


def _cell(counts: dict[str, object], key: str) -> str:
    value = counts.get(key)
    return "-" if value is None else str(value)


def main() -> int:
    argv = sys.argv[1:]
    check_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, check_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(PROJECTS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PROJECTS]
    if unknown:
        parser.error(f"unknown project(s) {', '.join(unknown)}; known: {', '.join(PROJECTS)}")
    cache_dir = Path(os.environ.get("ZLOOP_COMPAT_CACHE", ROOT / "compat" / ".cache"))
    cache_dir = cache_dir.resolve() / "projects"
    rows = []
    for name in args.names or list(PROJECTS):
        project = PROJECTS[name]
        tree, archive = _tree(name, project, cache_dir)
        python = _venv(name, project, archive, cache_dir)
        results = cache_dir / "results" / name
        shutil.rmtree(results, ignore_errors=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT)
        env.pop("PYTEST_ADDOPTS", None)
        command = [str(python), "-m", "zloop.compat", "check", "--results", str(results)]
        if project.expected:
            results.mkdir(parents=True)
            (results / "expected.toml").write_text(project.expected, encoding="utf-8")
            command += ["--expected", str(results / "expected.toml")]
        command += check_args
        if project.pytest_args:
            command += ["--", *project.pytest_args]
        print(f"\ncheck_projects: {name} {project.version} ({project.kind})\n"
              f"check_projects: $ cd {tree} && python {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        rc = subprocess.run(command, cwd=tree, env=env).returncode
        rows.append((name, project, rc, time.monotonic() - started, _summary(results)))
    print()
    print(f"{'project':17} {'verdict':15} {'tests':>5} {'on_loop':>7} {'other':>5} "
          f"{'no_loop':>7} {'compared':>8} {'xfail':>5} {'xpass':>5} {'differs':>7} "
          f"{'flaky':>5} {'not_counted':>11} {'time':>6}")
    failed = False
    for name, project, rc, elapsed_s, counts in rows:
        right = rc == project.verdict
        failed |= not right
        verdict = f"{rc} {'(right)' if right else f'(want {project.verdict})'}"
        print(f"{name:17} {verdict:15} {_cell(counts, 'collected'):>5} "
              f"{_cell(counts, 'on_loop'):>7} {_cell(counts, 'other_loop'):>5} "
              f"{_cell(counts, 'no_loop'):>7} {_cell(counts, 'compared'):>8} "
              f"{_cell(counts, 'xfailed'):>5} {_cell(counts, 'xpassed'):>5} "
              f"{_cell(counts, 'differs'):>7} {_cell(counts, 'flaky'):>5} "
              f"{_cell(counts, 'not_counted'):>11} {elapsed_s:5.0f}s")
    (cache_dir / "results" / "summary.json").write_text(json.dumps(
        [{"project": n, "version": p.version, "exit": rc, "want": p.verdict, **c}
         for n, p, rc, _, c in rows], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
