"""What `import zloop` says when its compiled extension is missing: this
`zloop` is a source directory that was never built for the running Python,
most often a checkout's, imported from its root ahead of an installed zloop."""

import importlib.machinery
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(PACKAGE_DIR)


def _same(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def installed_elsewhere():
    """The directory of another zloop on sys.path (one this directory
    hides), or None."""
    others = [p for p in sys.path if not _same(p or os.curdir, CHECKOUT)]
    spec = importlib.machinery.PathFinder.find_spec("zloop", others)
    if spec is None or not spec.submodule_search_locations:
        return None
    where = list(spec.submodule_search_locations)[0]
    return None if _same(where, PACKAGE_DIR) else where


def message():
    exe = sys.executable
    lines = [f"zloop's compiled extension zloop._zloop is not built for this Python ({exe}): "
             f"the zloop imported is the source directory {PACKAGE_DIR}, which has none."]
    from_root = _same(os.getcwd(), CHECKOUT) and any(
        _same(p or os.curdir, CHECKOUT) for p in sys.path)
    elsewhere = installed_elsewhere()
    if from_root:
        lines.append(
            "Started from the checkout's root, Python imports the checkout's zloop/ directory "
            "(python -m, -c and the REPL look in the current directory first), ahead of any "
            "zloop installed in this environment"
            + (f" (one is in {elsewhere})" if elsewhere else "")
            + ": to use an installed zloop, run from another directory.")
    elif elsewhere:
        lines.append(f"It hides the zloop in {elsewhere}, which comes later on sys.path.")
    if os.path.exists(os.path.join(CHECKOUT, "scripts", "dev-build")):
        lines.append(
            "To use this checkout in place, build the extension: "
            f"{exe} -m pip install ziglang==0.17.1, then "
            f"ZIG='{exe} -m ziglang' bash scripts/dev-build {exe} (in {CHECKOUT}); "
            f"or install it: {exe} -m pip install {CHECKOUT}.")
    lines.append("`pip install zloop` from PyPI gives an unrelated 0.0.1 until zloop 0.1 is "
                 "released: install from a checkout of zloop's repository (see its README).")
    return "\n".join(lines)
