"""Fetching and verifying pinned sdists; installing pinned test requirements.

The sdist comes from the package index through pip, lands in the git-ignored
cache (``compat/.cache/``) and is extracted only after its sha256 matches the
pin. Nothing fetched is ever written into the repository's tracked tree.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from zloop.compat.suites import Suite, SuiteError


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_sdist(suite: Suite, cache_dir: Path) -> Path:
    """Return the verified sdist archive of a suite, downloading it if needed."""
    assert suite.source == "sdist"
    sdist_dir = cache_dir / "sdist"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    cached = _find_archive(sdist_dir, suite)
    if cached is not None and sha256_of(cached) == suite.sha256:
        return cached
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        print(f"compat: fetching {suite.package}=={suite.version} (sdist)", flush=True)
        # --no-binary for this package only: its build dependencies may come as
        # wheels. pip prepares the sdist's metadata, which needs its build backend.
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--no-binary", suite.package, "--dest", tmp,
                   f"{suite.package}=={suite.version}"]
        subprocess.run(command, check=True)
        archive = _find_archive(Path(tmp), suite)
        if archive is None:
            raise SuiteError(f"pip fetched no sdist for {suite.package}=={suite.version}")
        digest = sha256_of(archive)
        if digest != suite.sha256:
            raise SuiteError(
                f"sha256 mismatch for {archive.name}: pinned {suite.sha256}, got {digest}; "
                "the index serves a different file than the one pinned: refusing it")
        target = sdist_dir / archive.name
        shutil.move(str(archive), target)
    return target


def _find_archive(directory: Path, suite: Suite) -> Path | None:
    stem = f"{suite.package}-{suite.version}".lower().replace("_", "-")
    for path in sorted(directory.iterdir()):
        name = path.name.lower().replace("_", "-")
        if name.startswith(stem) and name.endswith((".tar.gz", ".zip")):
            return path
    return None


def extract_sdist(suite: Suite, archive: Path, cache_dir: Path) -> Path:
    """Extract a verified sdist once; return its top directory."""
    src_dir = cache_dir / "src"
    top = src_dir / f"{suite.package}-{suite.version}"
    marker = top / ".zloop-compat-sha256"
    if _extracted(marker, suite):
        return top
    if top.exists():
        shutil.rmtree(top)
    src_dir.mkdir(parents=True, exist_ok=True)
    # Extracted and marked aside, then renamed into place: two runs at once
    # (CI runs suites on two Pythons side by side) each see either no tree
    # or a whole one.
    with tempfile.TemporaryDirectory(dir=src_dir) as tmp:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # pragma: no cover - Pythons before the extraction filters
                tar.extractall(tmp)
        entries = list(Path(tmp).iterdir())
        if len(entries) != 1 or not entries[0].is_dir():
            raise SuiteError(f"{archive.name}: expected one top-level directory")
        (entries[0] / marker.name).write_text(suite.sha256 + "\n")
        try:
            entries[0].rename(top)
        except OSError:  # another run renamed its own copy in first
            if not _extracted(marker, suite):
                raise
    return top


def _extracted(marker: Path, suite: Suite) -> bool:
    try:
        return marker.read_text().strip() == suite.sha256
    except OSError:
        return False


def install_requirements(requirements: list[str], extra: list[str] | None = None) -> None:
    """pip-install pinned requirements into the running interpreter's environment."""
    if not requirements and not extra:
        return
    print(f"compat: installing {len(requirements)} pinned test requirements", flush=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet",
               "--disable-pip-version-check", *requirements, *(extra or [])]
    subprocess.run(command, check=True)


def install_sdist(archive: Path) -> None:
    """Install the suite's own package from its verified sdist, without dependencies."""
    print(f"compat: installing {archive.name}", flush=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
               "--disable-pip-version-check", str(archive)]
    subprocess.run(command, check=True)
