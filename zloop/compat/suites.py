"""Suite definitions: ``compat/<suite>/suite.toml`` and ``expected.toml``.

A suite directory holds only what this project writes: the pin, the injection
(pytest plugins loaded with ``-p``), the exclusions for environmental failures
and the expected differences. The upstream files are fetched at run time.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SuiteError(Exception):
    """A suite definition that cannot be used as written."""


# The platforms an entry may name: ``sys.platform`` with FreeBSD's release
# number dropped (``freebsd14`` is ``freebsd``).
PLATFORMS = ("linux", "darwin", "freebsd")


def platform_name(platform: str | None = None) -> str:
    """This machine's platform as entries name it: ``linux``, ``darwin``,
    ``freebsd`` (else ``sys.platform`` as it is)."""
    platform = sys.platform if platform is None else platform
    return "freebsd" if platform.startswith("freebsd") else platform


@dataclass(frozen=True)
class Entry:
    """One named test (or glob) with the reason it is listed."""

    test: str
    reason: str
    python: tuple[str, ...] = ()
    backend: tuple[str, ...] = ()
    outcome: str | None = None
    platform: tuple[str, ...] = ()

    def applies(self, python: str, backend: str | None, platform: str | None = None) -> bool:
        """Whether the entry is in force on this Python (``3.12``), backend
        and platform (default: this machine's, see ``platform_name``).

        ``python`` names Pythons (``"3.14"``) or open ranges (``"3.14+"``:
        that one and every later one). An entry with no ``platform`` is in
        force on every one."""
        if self.python and not any(python_matches(python, spec) for spec in self.python):
            return False
        if self.backend and (backend or "default") not in self.backend:
            return False
        if self.platform and platform_name(platform) not in self.platform:
            return False
        return True

    def matches(self, nodeid: str) -> bool:
        return glob_match(nodeid, self.test)


_PYTHON_SPEC = re.compile(r"3\.(\d+)(\+?)")


def python_matches(python: str, spec: str) -> bool:
    """Whether Python ``3.N`` is named by ``spec``: ``3.N``, or ``3.M+`` with M <= N."""
    want = _PYTHON_SPEC.fullmatch(spec)
    have = _PYTHON_SPEC.fullmatch(python)
    if want is None or have is None:
        return False
    if want.group(2):
        return int(have.group(1)) >= int(want.group(1))
    return int(have.group(1)) == int(want.group(1))


def glob_match(nodeid: str, pattern: str) -> bool:
    """Whether a test id matches a pattern where only ``*`` and ``?`` are wild.

    Brackets are literal: test ids carry parameters in them (``test_x[h11]``).
    """
    if "*" not in pattern and "?" not in pattern:
        return nodeid == pattern
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, nodeid, re.DOTALL) is not None


@dataclass
class Suite:
    """A pinned ecosystem suite, as declared in its directory."""

    name: str
    directory: Path
    description: str
    source: str  # "sdist", "stdlib", or "local" (a project's own tree: check)
    targets: list[str]
    pytest_args: list[str]
    jobs: int
    timeout_s: int
    wall_limit_s: int
    plugins: list[str]
    requirements: list[str]
    package: str | None = None
    version: str | None = None
    sha256: str | None = None
    install_sdist: bool = False
    copy: list[str] = field(default_factory=list)
    min_on_loop: dict[str, int] = field(default_factory=dict)
    excludes: list[Entry] = field(default_factory=list)
    expected: dict[str, list[Entry]] = field(default_factory=dict)

    @property
    def pin(self) -> str:
        """What the suite is pinned to, for reports: ``uvicorn 0.54.0``."""
        if self.source == "stdlib":
            return "CPython {}.{}.{} stdlib".format(*sys.version_info[:3])
        if self.source == "local":
            return "local"
        return f"{self.package} {self.version}"

    @property
    def is_local(self) -> bool:
        """A project's own suite (``check``): pytest runs it as the project
        runs it, finding its rootdir and configuration itself."""
        return self.source == "local"

    def min_on_loop_for(self, python: str) -> int:
        return int(self.min_on_loop.get(python, self.min_on_loop.get("default", 1)))

    def excludes_for(self, python: str, backend: str | None,
                     platform: str | None = None) -> list[Entry]:
        return [e for e in self.excludes if e.applies(python, backend, platform)]

    def expected_for(self, loop: str, python: str, backend: str | None,
                     platform: str | None = None) -> list[Entry]:
        """The expected differences in force for ``loop`` here (or on
        ``platform``): an entry of another platform is neither a listed
        difference nor, when its test does not differ, a stale one."""
        return [e for e in self.expected.get(loop, []) if e.applies(python, backend, platform)]


def default_compat_dir() -> Path:
    """``$ZLOOP_COMPAT_DIR``, else ``./compat`` when it holds any suite
    (``*/suite.toml``), else the ``compat/`` of the checkout that this module
    runs from. Installed from a wheel, that last one does not exist: the
    pinned suites' definitions live in zloop's repository, not in the
    package (see ``PINNED_SUITES_HOME``)."""
    env = os.environ.get("ZLOOP_COMPAT_DIR")
    if env:
        return Path(env).resolve()
    here = Path.cwd() / "compat"
    if suite_names(here):
        return here.resolve()
    return Path(__file__).resolve().parents[2] / "compat"


# Where the pinned suites are defined, for a zloop installed without them.
PINNED_SUITES_HOME = "the compat/ directory of zloop's source repository"


def suite_names(compat_dir: Path) -> list[str]:
    return sorted(p.parent.name for p in compat_dir.glob("*/suite.toml"))


def load_suite(compat_dir: Path, name: str) -> Suite:
    directory = compat_dir / name
    path = directory / "suite.toml"
    if not path.exists():
        known = ", ".join(suite_names(compat_dir)) or "none"
        raise SuiteError(f"no suite {name!r} under {compat_dir} (known: {known})")
    data = _read_toml(path)
    meta = data.get("suite", {})
    sdist = data.get("sdist", {})
    suite = Suite(
        name=name,
        directory=directory,
        description=meta.get("description", ""),
        source=meta.get("source", "sdist"),
        targets=list(meta.get("targets", ["tests"])),
        pytest_args=list(meta.get("pytest_args", [])),
        jobs=int(meta.get("jobs", 2)),
        timeout_s=int(meta.get("timeout_s", 60)),
        wall_limit_s=int(meta.get("wall_limit_s", 3600)),
        plugins=list(meta.get("plugins", [])),
        requirements=list(data.get("requirements", {}).get("test", [])),
        package=sdist.get("package"),
        version=sdist.get("version"),
        sha256=sdist.get("sha256"),
        install_sdist=bool(sdist.get("install", False)),
        copy=list(sdist.get("copy", [])),
        min_on_loop={str(k): int(v) for k, v in data.get("swap", {}).get(
            "min_on_loop", {}).items()},
        excludes=[_entry(e, path) for e in data.get("exclude", [])],
    )
    if suite.source not in ("sdist", "stdlib"):
        raise SuiteError(f"{path}: suite.source must be 'sdist' or 'stdlib'")
    if suite.source == "sdist" and not (suite.package and suite.version and suite.sha256):
        raise SuiteError(f"{path}: [sdist] needs package, version and sha256")
    for requirement in suite.requirements:
        if "==" not in requirement:
            raise SuiteError(f"{path}: test requirement {requirement!r} is not pinned (==)")
    expected_path = directory / "expected.toml"
    if expected_path.exists():
        suite.expected = load_expected(expected_path)
        # A pinned suite's difference is recorded where it was seen: one
        # seen on Linux only must not excuse (or go stale on) a Mac run.
        for loop, entries in suite.expected.items():
            for entry in entries:
                if not entry.platform:
                    raise SuiteError(
                        f"{expected_path}: [[{loop}]] {entry.test!r} names no platform: "
                        f"every entry of a pinned suite says where the difference was seen "
                        f"(platform = [{', '.join(repr(p) for p in PLATFORMS)}], or some)")
    return suite


def load_expected(path: Path) -> dict[str, list[Entry]]:
    """An expected-differences file: ``[[LOOP]]`` tables of test and reason."""
    if not path.is_file():
        raise SuiteError(f"no expected-differences file {path}")
    expected = {}
    for loop, entries in _read_toml(path).items():
        if not isinstance(entries, list):
            raise SuiteError(f"{path}: {loop!r} must be an array of tables: [[{loop}]]")
        expected[loop] = [_entry(e, path) for e in entries]
    return expected


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: {exc}") from None


def _entry(data: dict[str, Any], path: Path) -> Entry:
    if "test" not in data or not data.get("reason"):
        raise SuiteError(f"{path}: every entry needs a test and a reason: {data!r}")
    pythons = data.get("python", ())
    for spec in pythons:
        # A bare TOML number would read 3.10 as "3.1": names are strings.
        if not isinstance(spec, str) or not _PYTHON_SPEC.fullmatch(spec):
            raise SuiteError(f"{path}: python entries are strings like \"3.14\" or "
                             f"\"3.14+\" (that Python and later), not {spec!r}: {data!r}")
    platforms = data.get("platform", ())
    if isinstance(platforms, str) or any(p not in PLATFORMS for p in platforms):
        raise SuiteError(f"{path}: platform is a list of {', '.join(map(repr, PLATFORMS))} "
                         f"(sys.platform, FreeBSD's without its release): {data!r}")
    return Entry(test=data["test"], reason=data["reason"],
                 python=tuple(pythons),
                 backend=tuple(data.get("backend", ())), outcome=data.get("outcome"),
                 platform=tuple(platforms))
