"""``python -m zloop.compat check`` on small asyncio projects' own suites.

    python scripts/check_projects.py [NAME ...] [--no-install] [-- CHECK ARGS]

Each project's sdist (which carries its tests) is fetched by pip at run time,
checked against the pinned sha256 and extracted into the git-ignored cache
(``$ZLOOP_COMPAT_CACHE``, else ``compat/.cache``), exactly as the harness
fetches its pinned suites; nothing of theirs enters the repository. The
pinned test requirements go into the running interpreter's environment
(``--no-install`` skips that: use a virtual environment). Then ``check``
runs in each extracted tree, as a user would run it in their project.
Exits 1 if any project's check fails. The results are in docs/validate.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zloop.compat import fetch  # noqa: E402
from zloop.compat.suites import Suite  # noqa: E402

REQUIREMENTS = ["pytest==9.2.0", "pytest-asyncio==1.5.0"]

# name: (version, sdist sha256, directory put on sys.path, pytest arguments)
PROJECTS = {
    "aiofiles": ("25.1.0", "a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2",
                 "src", []),
    # Their config adds --cov (pytest-cov), which the check does not need.
    "async-timeout": ("5.0.1",
                      "d9321a7a3d5a6a5e187e824d2fa0793ce379a202935782d555d6e9d2735677d3",
                      ".", ["-o", "addopts="]),
    # test_benchmarks.py needs pytest-codspeed.
    "janus": ("2.0.0", "0970f38e0e725400496c834a368a67ee551dc3b5ad0a257e132f5b46f2e77770",
              ".", ["-o", "addopts=", "--ignore=tests/test_benchmarks.py"]),
    "asgiref": ("3.13.0", "034cc8cbf72d00553b4be256703ac545120b4e50af13b49dec99da899aeeecb4",
                ".", []),
}


def _tree(name: str, version: str, sha256: str, cache_dir: Path) -> Path:
    pin = Suite(name=name, directory=cache_dir, description="", source="sdist", targets=[],
                pytest_args=[], jobs=0, timeout_s=0, wall_limit_s=0, plugins=[],
                requirements=[], package=name, version=version, sha256=sha256)
    return fetch.extract_sdist(pin, fetch.fetch_sdist(pin, cache_dir), cache_dir)


def main() -> int:
    argv = sys.argv[1:]
    check_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, check_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(PROJECTS)} (default: all)")
    parser.add_argument("--no-install", action="store_true")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PROJECTS]
    if unknown:
        parser.error(f"unknown project(s) {', '.join(unknown)}; known: {', '.join(PROJECTS)}")
    cache_dir = Path(os.environ.get("ZLOOP_COMPAT_CACHE", ROOT / "compat" / ".cache"))
    cache_dir = cache_dir.resolve() / "projects"
    if not args.no_install:
        fetch.install_requirements(REQUIREMENTS)
    results = {}
    for name in args.names or list(PROJECTS):
        version, sha256, path, pytest_args = PROJECTS[name]
        tree = _tree(name, version, sha256, cache_dir)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tree / path)])
        print(f"check_projects: {name} {version} in {tree}", flush=True)
        command = [sys.executable, "-m", "zloop.compat", "check", *check_args, "--",
                   *pytest_args]
        results[name] = subprocess.run(command, cwd=tree, env=env).returncode
    for name, rc in results.items():
        print(f"check_projects: {name:15} {'ok' if rc == 0 else f'FAILED (exit {rc})'}")
    return 0 if all(rc == 0 for rc in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
