"""Compatibility harness: other projects' test suites, unchanged, on zloop.

``python -m zloop.compat run SUITE --loop zloop`` fetches a suite pinned under
``compat/SUITE/`` (sdist, version and sha256), installs its pinned test
requirements, runs it through the ``zloop.testing`` pytest plugin on the chosen
loop, diffs the outcome of every test against a stock-asyncio run on the same
Python, and fails on any difference that the suite's expected-differences list
does not name (or names, but no longer sees). See docs/compat.md.
"""
