"""Builds zloop's extension with Zig (the `ziglang` package from PyPI).

`pip install .` and `pip install -e .` both land here: the extension is
compiled by `zig build` for the interpreter running the build, against that
interpreter's own Python.h (translated by Zig's translate-c step).

ZLOOP_OPTIMIZE picks the Zig build mode: ReleaseFast (default, what ships
and what benchmarks use), ReleaseSafe or Debug (safety-checked, for tests).
ZLOOP_CPU picks the target CPU (default: the build machine's own, `native`);
a baseline such as `x86_64_v3` makes a portable build, and one valgrind can
run (it cannot execute AVX-512).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODES = ("Debug", "ReleaseSafe", "ReleaseFast", "ReleaseSmall")


class ZigBuildExt(build_ext):
    def build_extension(self, ext):
        mode = os.environ.get("ZLOOP_OPTIMIZE", "ReleaseFast")
        if mode not in MODES:
            raise SystemExit(f"ZLOOP_OPTIMIZE must be one of {MODES}, got {mode!r}")
        root = os.path.dirname(os.path.abspath(__file__))
        include = sysconfig.get_paths()["include"]
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tempfile.TemporaryDirectory() as prefix:
            cmd = [
                sys.executable, "-m", "ziglang", "build",
                f"-Doptimize={mode}",
                f"-Dpython-include={include}",
                f"-Dcpu={os.environ.get('ZLOOP_CPU', 'native')}",
                "--prefix", prefix,
                "--cache-dir", os.path.join(root, ".zig-cache"),
            ]
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, cwd=root, check=True)
            shutil.copyfile(os.path.join(prefix, "lib", "_zloop.so"), target)


setup(
    ext_modules=[Extension("zloop._zloop", sources=[])],
    cmdclass={"build_ext": ZigBuildExt},
)
