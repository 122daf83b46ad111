"""Builds zloop's release wheels on one machine with Zig.

    python scripts/wheels.py [--target x86_64,aarch64,macos-arm64,macos-x86_64]
                             [--python 3.11,...] [--out wheelhouse] [--jobs N]

For each CPython and each target, `zig build` cross-compiles the extension
against that CPython's headers, ReleaseFast with no debug info in it
(`-Dstrip=true`; an ELF one keeps its symbol table, and its debug info goes
to --out's debug/.build-id/, by build id, not into the wheel), never with
`-Dportable` (the test-only kqueue emulation must not ship):

  x86_64, aarch64   Linux, glibc 2.17 (manylinux2014) at a baseline CPU
                    (x86-64-v2, which every x86_64 server of the last decade
                    runs; aarch64's baseline): manylinux_2_17 wheels;
  macos-arm64       macOS 11.0 (the first on Apple silicon), the M1
                    baseline: macosx_11_0_arm64;
  macos-x86_64      macOS 10.13 (the oldest that python.org's installers of
                    CPython 3.12 and 3.13 support), Zig's macOS baseline CPU
                    (Core 2, as the oldest Intel Macs that run 10.13):
                    macosx_10_13_x86_64. The extension calls no libSystem
                    function newer than 10.13 (scripts/check_wheels.py
                    refuses one): a release build's panic handler is its own
                    (src/python/module.zig), as std's links functions of
                    macOS 10.15 and 11;
  freebsd-x86_64    FreeBSD 14.0, built only when named: no wheel, the
                    extension alone (`_zloop.cp312-freebsd-x86_64.so` in
                    --out), to prove that it compiles and links. PyPI takes
                    no FreeBSD wheel, and a FreeBSD platform tag names one
                    exact release and patch level, so a wheel would install
                    on that one only.

The wheel is assembled here: the Python package, the extension under the
interpreter's own suffix, and metadata read from pyproject.toml. Nothing in
the wheel depends on the machine that built it, which may be Linux or macOS.

Needs: Python 3.11+ to run this (tomllib), Zig from the ziglang package
(`scripts/wheels` installs it into that Python's environment), and the C
headers of each CPython built for, looked for in this order:

  1. ZLOOP_WHEEL_PYTHON_3_12=/path/to/python3.12 (and so on): that
     interpreter's own (sysconfig);
  2. `python3.12-config --includes`, then `python3.12` (sysconfig), on PATH;
  3. pyenv's CPython 3.12.x (~/.pyenv or $PYENV_ROOT);
  4. the Debian sid chroot of scripts/sid (/var/cache/zloop/sid, or
     $ZLOOP_SID_DIR), once built: the only source of 3.14 and 3.15 headers
     on a machine that has no such interpreter. `bash scripts/sid ensure`
     builds it (as root, with apt and mmdebstrap; about 830 MB).

A CPython whose headers are found nowhere stops the build before it starts,
with what was tried. Everything temporary (Zig's output) lives in one
temporary directory, removed at the end; the wheels go to --out. A merged
copy of Debian's multiarch headers is kept in .cache/python-headers/ (by
content, so that Zig's cache finds it again on the next run).

CPython's public headers are the same for every target here (all LP64,
little-endian; pyconfig.h differs only in what CPython's own build found on
its system, never in the C API's layout), so one header set serves them
all: on Linux x86_64 and aarch64 the sizes agree; FreeBSD x86_64 has Linux
x86_64's; and for macOS, Python.h's pymacconfig.h replaces every size that
differs by architecture (long double, max_align_t, ...) from the compiler's
own macros under __APPLE__, which is how one pyconfig.h serves both halves
of CPython's universal2 macOS builds.

--jobs runs that many builds at once (default 1): a build is mostly one
thread of LLVM, so on 2 cores two builds at once take little more than one.
"""

import argparse
import base64
import dataclasses
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import binaries  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SID_DIR = os.environ.get("ZLOOP_SID_DIR", "/var/cache/zloop/sid")
HEADER_CACHE = os.path.join(ROOT, ".cache", "python-headers")
PYTHONS = ("3.11", "3.12", "3.13", "3.14", "3.15")


@dataclasses.dataclass(frozen=True)
class Target:
    """One platform a wheel (or, without platform tags, only the extension)
    is built for."""

    zig_target: str  # -Dtarget, with the minimum OS version the wheel promises
    cpu: str  # -Dcpu: the baseline the wheel promises
    platform_tags: tuple[str, ...]  # the wheel's platform tags; () for no wheel
    so_platform: str  # the extension's suffix: _zloop.cpython-312-{so_platform}.so

    def extension_name(self, version):
        return f"zloop/_zloop.cpython-{version.replace('.', '')}-{self.so_platform}.so"


TARGETS = {
    "x86_64": Target("x86_64-linux-gnu.2.17", "x86_64_v2",
                     ("manylinux_2_17_x86_64", "manylinux2014_x86_64"), "x86_64-linux-gnu"),
    "aarch64": Target("aarch64-linux-gnu.2.17", "baseline",
                      ("manylinux_2_17_aarch64", "manylinux2014_aarch64"), "aarch64-linux-gnu"),
    # Zig's macOS default minimum is its newest supported release (15.0):
    # each target names its own. An extension for macOS is a Mach-O dylib
    # with the interpreter's symbols left to a flat lookup at load time (what
    # `-undefined dynamic_lookup` gives); scripts/check_wheels.py proves it.
    "macos-arm64": Target("aarch64-macos.11.0", "baseline", ("macosx_11_0_arm64",), "darwin"),
    "macos-x86_64": Target("x86_64-macos.10.13", "baseline", ("macosx_10_13_x86_64",),
                           "darwin"),
    "freebsd-x86_64": Target("x86_64-freebsd.14.0", "baseline", (), "x86_64-freebsd"),
}
# What `--target` builds unless told: every target that makes a wheel.
WHEEL_TARGETS = tuple(name for name, t in TARGETS.items() if t.platform_tags)


class Missing(Exception):
    """A prerequisite that is not there, and what was tried."""


# --- headers -----------------------------------------------------------------------


def headers_for(version, work):
    """A directory holding Python.h and a self-contained pyconfig.h for
    CPython `version`; `work` is a temporary directory for merged copies."""
    tried = []
    for where, find in _HEADER_SOURCES:
        include = find(version)
        if include and os.path.exists(os.path.join(include, "Python.h")):
            return _self_contained(include, version, work)
        tried.append(where.format(v=version, u=version.replace(".", "_")))
    raise Missing(f"CPython {version} headers: tried " + "; ".join(tried))


def _from_env(version):
    python = os.environ.get("ZLOOP_WHEEL_PYTHON_" + version.replace(".", "_"))
    return _interpreter_include(python) if python else None


def _from_config(version):
    config = shutil.which(f"python{version}-config")
    if not config:
        return None
    out = subprocess.run([config, "--includes"], capture_output=True, text=True)
    for flag in out.stdout.split():
        if flag.startswith("-I") and os.path.exists(os.path.join(flag[2:], "Python.h")):
            return flag[2:]
    return None


def _from_path(version):
    python = shutil.which(f"python{version}")
    return _interpreter_include(python) if python else None


def _from_pyenv(version):
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "include",
                                          f"python{version}")))
    return found[-1] if found else None


def _from_sid(version):
    return os.path.join(SID_DIR, "usr", "include", f"python{version}")


_HEADER_SOURCES = (
    ("$ZLOOP_WHEEL_PYTHON_{u} (unset)", _from_env),
    ("python{v}-config --includes (not on PATH)", _from_config),
    ("python{v} on PATH (none)", _from_path),
    ("pyenv's {v}.x (none)", _from_pyenv),
    (f"the Debian sid chroot in {SID_DIR} (not built: `bash scripts/sid ensure`, as root, "
     "with apt and mmdebstrap, about 830 MB)", _from_sid),
)


def interpreter_for(version):
    """The CPython `version` executable found where the headers are looked
    for (not python3.X-config, which names none), for reading what it
    exports (scripts/check_wheels.py); None if there is none."""
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [os.environ.get("ZLOOP_WHEEL_PYTHON_" + version.replace(".", "_")),
                  shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin",
                                                f"python{version}")))[-1:]
    candidates.append(os.path.join(SID_DIR, "usr", "bin", f"python{version}"))
    for python in candidates:
        # pyenv's shims are scripts: the interpreter is what they run.
        if python and os.path.exists(python) and not _is_script(python):
            return os.path.realpath(python)
    return None


def _is_script(path):
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


def _interpreter_include(python):
    out = subprocess.run([python, "-c", "import sysconfig;print(sysconfig.get_paths()['include'])"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def _self_contained(include, version, work):
    """The headers as Zig can use them for any target. Debian's multiarch
    pyconfig.h only includes <x86_64-linux-gnu/python3.X/pyconfig.h> from
    the system's include directory, which a cross build does not search: a
    copy of the headers with that file in its place serves every target."""
    with open(os.path.join(include, "pyconfig.h"), encoding="utf-8", errors="replace") as f:
        pyconfig = f.read()
    if "linux-gnu/python" not in pyconfig:
        return include
    system = os.path.dirname(include)  # .../usr/include
    found = sorted(glob.glob(os.path.join(system, "*-linux-gnu", f"python{version}",
                                          "pyconfig.h")),
                   key=lambda path: "/x86_64-linux-gnu/" not in path)
    if not found:
        raise Missing(f"CPython {version} headers in {include}: its pyconfig.h includes a "
                      f"multiarch one, and there is none in {system}/*-linux-gnu/")
    arch_conf = found[0]
    # Kept by content in .cache/python-headers/: Zig's cache knows a header
    # directory by its path, so a fresh copy each run would rebuild every
    # extension of this CPython.
    digest = hashlib.sha256(_read(arch_conf))
    for folder, _, files in sorted(os.walk(include)):
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, include).encode() + b"\0" + _read(path))
    merged = os.path.join(HEADER_CACHE, f"python{version}-{digest.hexdigest()[:16]}")
    if not os.path.isdir(merged):
        staging = os.path.join(work, f"headers-{version}")
        shutil.copytree(include, staging)
        os.remove(os.path.join(staging, "pyconfig.h"))
        shutil.copyfile(arch_conf, os.path.join(staging, "pyconfig.h"))
        os.makedirs(HEADER_CACHE, exist_ok=True)
        try:
            os.rename(staging, merged)
        except OSError:  # another run put it there first
            shutil.rmtree(staging)
    return merged


def check_zig():
    probe = subprocess.run([sys.executable, "-m", "ziglang", "version"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        raise Missing(f"Zig: {sys.executable} -m ziglang does not run (pip install "
                      "ziglang==0.17.1; scripts/wheels does it)")
    return probe.stdout.strip()


# --- building ----------------------------------------------------------------------


def build_command(version, target_name, headers, prefix):
    """The `zig build` of the release (ReleaseFast) extension for one CPython
    and target. Never -Dportable: that build carries the kqueue emulation,
    which is test infrastructure (scripts/check_wheels.py refuses it)."""
    target = TARGETS[target_name]
    return [sys.executable, "-m", "ziglang", "build", "-Doptimize=ReleaseFast", "-Dstrip=true",
            f"-Dtarget={target.zig_target}", f"-Dcpu={target.cpu}",
            f"-Dpython-include={headers}", "--prefix", prefix]


def build_all(pairs, parallel, headers, work):
    """Builds the extension for every (version, target) of `pairs`,
    `parallel` builds at a time, and returns {pair: extension path}. The
    first failure stops the builds still running and raises."""
    running, built, pending = {}, {}, list(pairs)
    while pending or running:
        while pending and len(running) < parallel:
            version, target = pending.pop(0)
            prefix = os.path.join(work, f"{version}-{target}")
            cmd = build_command(version, target, headers[version], prefix)
            print("wheels: " + " ".join(cmd[3:]), flush=True)
            proc = subprocess.Popen(cmd, cwd=ROOT)
            running[proc] = ((version, target), prefix, time.monotonic())
        proc = _wait_any(running)
        pair, prefix, started = running.pop(proc)
        if proc.returncode != 0:
            for other in running:
                other.terminate()
                other.wait()
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
        print(f"wheels: built cp{pair[0].replace('.', '')} {pair[1]} in "
              f"{time.monotonic() - started:.0f} s", flush=True)
        built[pair] = os.path.join(prefix, "lib", "_zloop.so")
    return built


def _wait_any(procs):
    while True:
        for proc in procs:
            if proc.poll() is not None:
                return proc
        time.sleep(0.2)


def metadata():
    """METADATA's text (core metadata 2.4) from pyproject.toml and README.md."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines.append(f"License-Expression: {project['license']}")
    lines += [f"License-File: {f}" for f in project.get("license-files", [])]
    for url_name, url in project.get("urls", {}).items():
        lines.append(f"Project-URL: {url_name}, {url}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(ROOT, project.get("readme", "README.md")), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join(lines) + "\n\n" + readme, project


def package_files():
    """(archive name, path) of every file the package ships besides the extension."""
    out = []
    for pattern in ("zloop/*.py", "zloop/*.pyi", "zloop/py.typed", "zloop/compat/*.py",
                    "_zloop_pytest.py"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            out.append((os.path.relpath(path, ROOT), path))
    return out


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def write_extension(version, target_name, so_path, out_dir):
    """A target with no wheel: the extension alone, for the checks."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"_zloop.cp{version.replace('.', '')}-{target_name}.so")
    shutil.copyfile(so_path, path)
    print(f"wheels: wrote {os.path.relpath(path, ROOT)} (no wheel for {target_name})", flush=True)
    return path


def write_wheel(version, target_name, so_path, out_dir):
    meta, project = metadata()
    target = TARGETS[target_name]
    if not target.platform_tags:
        return write_extension(version, target_name, so_path, out_dir)
    name, ver = project["name"], project["version"]
    tag = "cp" + version.replace(".", "")
    wheel_name = f"{name}-{ver}-{tag}-{tag}-{'.'.join(target.platform_tags)}.whl"
    dist_info = f"{name}-{ver}.dist-info"
    wheel_meta = "Wheel-Version: 1.0\nGenerator: zloop scripts/wheels.py\nRoot-Is-Purelib: false\n"
    wheel_meta += "".join(f"Tag: {tag}-{tag}-{p}\n" for p in target.platform_tags)
    entries = [(n, _read(p)) for n, p in package_files()]
    entries.append((target.extension_name(version), _read(so_path)))
    entries.append((f"{dist_info}/METADATA", meta.encode()))
    entries.append((f"{dist_info}/WHEEL", wheel_meta.encode()))
    # pyproject's [project.entry-points] (zloop's inert pytest plugin).
    groups = project.get("entry-points", {})
    if groups:
        points = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
                         for group, eps in groups.items())
        entries.append((f"{dist_info}/entry_points.txt", points.encode()))
    license_path = os.path.join(ROOT, "LICENSE")
    if os.path.exists(license_path):
        entries.append((f"{dist_info}/licenses/LICENSE", _read(license_path)))
    record = [_record_line(n, d) for n, d in entries] + [f"{dist_info}/RECORD,,"]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, wheel_name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in entries:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, d)
        zf.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)),
                    "\n".join(record) + "\n")
    print(f"wheels: wrote {os.path.relpath(path, ROOT)}", flush=True)
    return path


def write_debug_file(so_path, out_dir):
    """An ELF extension's debug info (the build's `_zloop.so.debug`: the
    whole linked file, with the release file's build id) under
    OUT/debug/.build-id/, the layout gdb (`set debug-file-directory
    OUT/debug`) and debuginfod servers look it up in. Not in the wheel."""
    debug = so_path + ".debug"
    if not os.path.exists(debug):
        return None  # Mach-O: stripped by Zig, no debug file
    build_id = binaries.read_elf(_read(so_path)).build_id
    if build_id is None:
        raise AssertionError(f"{so_path}: no build id")
    path = os.path.join(out_dir, "debug", ".build-id", build_id[:2], build_id[2:] + ".debug")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copyfile(debug, path)
    return path


def _choices(text, known, option, parser):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        parser.error(f"{option} {text!r}: choose from {', '.join(known)}")
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", "--arch", default=",".join(WHEEL_TARGETS),
                        help=f"comma-separated targets of {','.join(TARGETS)} "
                             f"(default: {','.join(WHEEL_TARGETS)})")
    parser.add_argument("--python", default=",".join(PYTHONS),
                        help=f"comma-separated CPython versions (default: {','.join(PYTHONS)})")
    parser.add_argument("--out", default=os.path.join(ROOT, "wheelhouse"))
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="builds run at once (default 1)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be 1 or more")
    targets = _choices(args.target, tuple(TARGETS), "--target", parser)
    versions = _choices(args.python, PYTHONS, "--python", parser)
    with tempfile.TemporaryDirectory(prefix="zloop-wheels-") as work:
        # Every prerequisite first, so that a missing one stops the build
        # before it starts, with all that is missing at once.
        headers, missing = {}, []
        try:
            print(f"wheels: Zig {check_zig()}", flush=True)
        except Missing as exc:
            missing.append(str(exc))
        for version in versions:
            try:
                headers[version] = headers_for(version, work)
                print(f"wheels: CPython {version} headers: {headers[version]}", flush=True)
            except Missing as exc:
                missing.append(str(exc))
        if missing:
            print("wheels: cannot build; missing:\n  " + "\n  ".join(missing) +
                  "\n(or build fewer: --python 3.12,3.13)", file=sys.stderr)
            return 1
        pairs = [(v, t) for v in versions for t in targets]
        built = build_all(pairs, args.jobs, headers, work)
        for version, target in pairs:
            write_wheel(version, target, built[(version, target)], args.out)
            write_debug_file(built[(version, target)], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
