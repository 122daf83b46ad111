"""Builds zloop's release wheels on one Linux machine with Zig.

    python scripts/wheels.py [--arch x86_64,aarch64] [--python 3.11,...] [--out wheelhouse]

For each CPython and each architecture, `zig build` cross-compiles the
extension against that CPython's headers for glibc 2.17 (manylinux2014) at a
baseline CPU (x86-64-v2, which every x86_64 server of the last decade runs;
aarch64's baseline), ReleaseFast and stripped, and the wheel is assembled
here: the Python package, the extension under the interpreter's own suffix,
and metadata read from pyproject.toml. Nothing in the wheel depends on the
machine that built it.

Headers: CPython 3.11-3.13 from pyenv (or any interpreter named by
ZLOOP_WHEEL_PYTHON_3_11=PATH and the like), 3.14 and 3.15 from the Debian sid
chroot that scripts/sid keeps. CPython's public headers are the same for
x86_64 and aarch64 Linux (both LP64, little-endian; pyconfig.h differs only in
flags for CPython's own inline assembly, which the C API does not use), so one
header set serves both architectures.
"""

import argparse
import base64
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SID_DIR = os.environ.get("ZLOOP_SID_DIR", "/var/cache/zloop/sid")
PYTHONS = ("3.11", "3.12", "3.13", "3.14", "3.15")
# arch -> (zig target, zig cpu, wheel platform tags)
ARCHES = {
    "x86_64": ("x86_64-linux-gnu.2.17", "x86_64_v2",
               ("manylinux_2_17_x86_64", "manylinux2014_x86_64")),
    "aarch64": ("aarch64-linux-gnu.2.17", "baseline",
                ("manylinux_2_17_aarch64", "manylinux2014_aarch64")),
}


def headers_for(version):
    """A directory holding Python.h (and a pyconfig.h) for CPython `version`."""
    override = os.environ.get("ZLOOP_WHEEL_PYTHON_" + version.replace(".", "_"))
    if override:
        return _interpreter_include(override)
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/include/python{version}")))
    if pyenv:
        return pyenv[-1]
    sid = os.path.join(SID_DIR, "usr", "include", f"python{version}")
    if not os.path.exists(os.path.join(sid, "Python.h")):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "sid"), "ensure"], check=True)
    return _debian_headers(sid, version)


def _interpreter_include(python):
    out = subprocess.run([python, "-c", "import sysconfig;print(sysconfig.get_paths()['include'])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _debian_headers(sid, version):
    """Debian's multiarch pyconfig.h includes <x86_64-linux-gnu/...>: a copy of
    the headers with that file in place serves any target."""
    merged = os.path.join(tempfile.gettempdir(), f"zloop-headers-{version}")
    if not os.path.exists(os.path.join(merged, "Python.h")):
        shutil.rmtree(merged, ignore_errors=True)
        shutil.copytree(sid, merged)
        arch_conf = os.path.join(SID_DIR, "usr", "include", "x86_64-linux-gnu",
                                 f"python{version}", "pyconfig.h")
        shutil.copyfile(arch_conf, os.path.join(merged, "pyconfig.h"))
    return merged


def build_extension(version, arch, workdir):
    """The stripped ReleaseFast extension for one CPython and architecture."""
    target, cpu, _ = ARCHES[arch]
    prefix = os.path.join(workdir, f"{version}-{arch}")
    cmd = [sys.executable, "-m", "ziglang", "build", "-Doptimize=ReleaseFast", "-Dstrip=true",
           f"-Dtarget={target}", f"-Dcpu={cpu}", f"-Dpython-include={headers_for(version)}",
           "--prefix", prefix]
    print("wheels: " + " ".join(cmd[3:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return os.path.join(prefix, "lib", "_zloop.so")


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
    for pattern in ("zloop/*.py", "zloop/*.pyi", "zloop/py.typed", "zloop/compat/*.py"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            out.append((os.path.relpath(path, ROOT), path))
    return out


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(version, arch, so_path, out_dir):
    meta, project = metadata()
    name, ver = project["name"], project["version"]
    tag = "cp" + version.replace(".", "")
    plats = ARCHES[arch][2]
    wheel_name = f"{name}-{ver}-{tag}-{tag}-{'.'.join(plats)}.whl"
    dist_info = f"{name}-{ver}.dist-info"
    wheel_meta = "Wheel-Version: 1.0\nGenerator: zloop scripts/wheels.py\nRoot-Is-Purelib: false\n"
    wheel_meta += "".join(f"Tag: {tag}-{tag}-{p}\n" for p in plats)
    entries = [(n, open(p, "rb").read()) for n, p in package_files()]
    entries.append((f"zloop/_zloop.{tag.replace('cp', 'cpython-')}-{arch}-linux-gnu.so",
                    open(so_path, "rb").read()))
    entries.append((f"{dist_info}/METADATA", meta.encode()))
    entries.append((f"{dist_info}/WHEEL", wheel_meta.encode()))
    license_path = os.path.join(ROOT, "LICENSE")
    if os.path.exists(license_path):
        entries.append((f"{dist_info}/licenses/LICENSE", open(license_path, "rb").read()))
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=",".join(ARCHES))
    parser.add_argument("--python", default=",".join(PYTHONS))
    parser.add_argument("--out", default=os.path.join(ROOT, "wheelhouse"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        for version in args.python.split(","):
            for arch in args.arch.split(","):
                if arch not in ARCHES:
                    parser.error(f"unknown arch {arch!r}; choose from {', '.join(ARCHES)}")
                so = build_extension(version, arch, work)
                write_wheel(version, arch, so, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
