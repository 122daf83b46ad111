"""Installs the test requirements into a Python's environment where some
may not install: each pinned package without its dependencies (the file pins
them all), the whole file at once, else one at a time. A package with no
wheel for this machine that does not build from source either (a Rust
extension where there is no Rust, a CPython newer than its bindings know)
is left out and printed, one ``name==version: why`` a line, on stdout.

    python tests/_install_requirements.py PYTHON [REQUIREMENTS]

The GitHub workflow's macOS and FreeBSD jobs run it and set
ZLOOP_TEST_UNAVAILABLE to what it printed: a test that needs a package left
out then skips, naming the package and why (``_support.needs``), where a
machine that should have it fails.
"""

import os
import re
import subprocess
import sys

# A build that does not end in this long is taken for one that never will.
_BUILD_S = 1200


def _requirements(path):
    with open(path) as f:
        lines = (line.split("#", 1)[0].strip() for line in f)
        return [line for line in lines if line]


def _pip(python, *args):
    return subprocess.run([python, "-m", "pip", "install", "--no-deps",
                           "--disable-pip-version-check", "--quiet", *args],
                          capture_output=True, text=True, timeout=_BUILD_S)


def _why(python, done):
    where = subprocess.run([python, "-c", "import sys, sysconfig; print('CPython %d.%d on %s' "
                            "% (*sys.version_info[:2], sysconfig.get_platform()))"],
                           capture_output=True, text=True).stdout.strip()
    said = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
    errors = [line for line in said if re.match(r"(error|ERROR)\b", line)] or said
    last = errors[-1] if errors else f"pip exited {done.returncode}"
    return f"no wheel for {where}, and building it failed ({last[:200]})"


def install(python, path):
    """Installs what it can; returns the ``name==version: why`` lines of
    what it could not."""
    requirements = _requirements(path)
    if _pip(python, "-r", path).returncode == 0:
        return []
    left_out = []
    for requirement in requirements:
        try:
            done = _pip(python, requirement)
        except subprocess.TimeoutExpired:
            left_out.append(f"{requirement}: building it took over {_BUILD_S} s")
            continue
        if done.returncode != 0:
            left_out.append(f"{requirement}: {_why(python, done)}")
    return left_out


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements.txt")
    for line in install(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else default):
        print(line, flush=True)
