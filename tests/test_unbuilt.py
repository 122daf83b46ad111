"""What `import zloop` says when its extension is not built: a copy of the
checkout's package with no extension, imported as a user would meet it (a
subprocess started from the copy's root, with another zloop installed)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zloop

PACKAGE = Path(zloop.__file__).resolve().parent


@pytest.fixture
def unbuilt(tmp_path):
    """A checkout whose zloop/ has no extension, and an installed zloop."""
    checkout = tmp_path / "checkout"
    shutil.copytree(PACKAGE, checkout / "zloop",
                    ignore=shutil.ignore_patterns("_zloop*.so", "__pycache__", ".tmp_zloop*"))
    (checkout / "scripts").mkdir()
    (checkout / "scripts" / "dev-build").write_text("")
    site = tmp_path / "site"
    (site / "zloop").mkdir(parents=True)
    (site / "zloop" / "__init__.py").write_text("")
    return checkout, site


def _import_error(cwd, pythonpath):
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    out = subprocess.run([sys.executable, "-c", "import zloop"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    return out.stderr.strip().splitlines()[-4:]


def test_from_the_checkouts_root_it_says_the_checkout_hides_the_installed_one(unbuilt):
    checkout, site = unbuilt
    text = "\n".join(_import_error(checkout, site))
    assert "ModuleNotFoundError: zloop's compiled extension zloop._zloop is not built" in text
    assert f"the source directory {checkout / 'zloop'}" in text
    assert "Started from the checkout's root" in text
    assert f"(one is in {site / 'zloop'})" in text
    assert "run from another directory" in text
    assert f"bash scripts/dev-build {sys.executable}" in text
    # PyPI's zloop is another project's 0.0.1: never offered as the fix.
    assert "`pip install zloop` from PyPI gives an unrelated 0.0.1" in text


def test_from_elsewhere_it_says_how_to_build_the_checkout(unbuilt, tmp_path):
    checkout, _ = unbuilt
    text = "\n".join(_import_error(tmp_path, checkout))
    assert "is not built" in text and "Started from the checkout's root" not in text
    assert f"pip install {checkout}" in text
