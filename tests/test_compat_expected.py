"""The compat runner's expected differences per platform: an entry applies
where it names (``platform = ["linux"]``), so a difference seen on one
platform neither excuses nor goes stale on another. Run on reports made up
here, as the runner diffs two real runs; no suite is fetched."""

from pathlib import Path

import pytest

import zloop
from zloop.compat import report
from zloop.compat.suites import (PLATFORMS, SuiteError, load_expected, load_suite,
                                 platform_name, suite_names)

COMPAT = Path(__file__).resolve().parents[1] / "compat"  # the checkout's, zloop may be installed
SUITE_TOML = """
[suite]
source = "stdlib"
targets = ["tests"]
"""


def _run(outcomes):
    """A zloop.testing report of these ``{test: outcome}``."""
    return {"tests": {t: {"outcome": o, "loops": []} for t, o in outcomes.items()}}


def _suite(tmp_path, expected):
    (tmp_path / "s").mkdir(parents=True)
    (tmp_path / "s" / "suite.toml").write_text(SUITE_TOML)
    (tmp_path / "s" / "expected.toml").write_text(expected)
    return load_suite(tmp_path, "s")


LINUX_ONLY = """
[[zloop]]
test = "t.py::test_linux"
platform = ["linux"]
reason = "seen on Linux"

[[zloop]]
test = "t.py::test_everywhere"
platform = ["linux", "darwin", "freebsd"]
reason = "seen on each"
"""


def test_platform_names_follow_sys_platform():
    assert [platform_name(p) for p in ("linux", "darwin", "freebsd14", "freebsd15")] == [
        "linux", "darwin", "freebsd", "freebsd"]
    assert platform_name() in PLATFORMS


@pytest.mark.parametrize("platform,expected", [
    ("linux", ["t.py::test_linux", "t.py::test_everywhere"]),
    ("darwin", ["t.py::test_everywhere"]),
    ("freebsd14", ["t.py::test_everywhere"]),
])
def test_an_entry_applies_on_its_platforms_only(tmp_path, platform, expected):
    suite = _suite(tmp_path, LINUX_ONLY)
    entries = suite.expected_for("zloop", "3.12", "kqueue", platform)
    assert [e.test for e in entries] == expected


def test_a_linux_only_entry_is_not_stale_on_a_mac(tmp_path):
    # On the Mac the Linux-only test passes on both loops: no difference,
    # and its entry, not in force there, is no "no longer differs".
    suite = _suite(tmp_path, LINUX_ONLY)
    base = _run({"t.py::test_linux": "passed", "t.py::test_everywhere": "passed"})
    mac = _run({"t.py::test_linux": "passed", "t.py::test_everywhere": "failed"})
    diff = report.diff_reports(base, mac, suite.expected_for("zloop", "3.12", "kqueue",
                                                             "darwin"))
    assert diff.ok and not diff.stale
    assert [(d.test, d.entry.test) for d in diff.listed] == [
        ("t.py::test_everywhere", "t.py::test_everywhere")]
    # The same run judged with Linux's entries: test_linux's entry is stale.
    diff = report.diff_reports(base, mac, suite.expected_for("zloop", "3.12", "epoll", "linux"))
    assert not diff.ok and [e.test for e in diff.stale] == ["t.py::test_linux"]


def test_a_difference_seen_only_on_a_mac_fails_until_listed_for_it(tmp_path):
    suite = _suite(tmp_path, LINUX_ONLY)
    base = _run({"t.py::test_linux": "passed", "t.py::test_everywhere": "passed"})
    mac = _run({"t.py::test_linux": "failed", "t.py::test_everywhere": "failed"})
    diff = report.diff_reports(base, mac, suite.expected_for("zloop", "3.12", "kqueue",
                                                             "darwin"))
    assert not diff.ok and [d.test for d in diff.unlisted] == ["t.py::test_linux"]
    # Listed for darwin too, it is understood.
    both = _suite(tmp_path / "b", LINUX_ONLY.replace('["linux"]', '["linux", "darwin"]'))
    diff = report.diff_reports(base, mac, both.expected_for("zloop", "3.12", "kqueue", "darwin"))
    assert diff.ok and len(diff.listed) == 2


def test_a_pinned_suite_entry_must_name_its_platforms(tmp_path):
    with pytest.raises(SuiteError, match="names no platform"):
        _suite(tmp_path, '[[zloop]]\ntest = "t.py::x"\nreason = "r"\n')


@pytest.mark.parametrize("value", ['"linux"', '["macos"]', '["freebsd14"]'])
def test_a_platform_is_a_list_of_known_names(tmp_path, value):
    with pytest.raises(SuiteError, match="platform is a list of"):
        _suite(tmp_path, f'[[zloop]]\ntest = "t.py::x"\nplatform = {value}\nreason = "r"\n')


def test_a_users_expected_file_may_leave_the_platform_out(tmp_path):
    # `check --expected FILE`: a project's own list, in force everywhere
    # unless it says otherwise.
    path = tmp_path / "expected.toml"
    path.write_text('[[zloop]]\ntest = "t.py::x"\nreason = "r"\n')
    (entry,) = load_expected(path)["zloop"]
    assert all(entry.applies("3.12", None, p) for p in PLATFORMS)


def test_every_pinned_entry_names_known_platforms():
    names = suite_names(COMPAT)
    assert names, COMPAT
    for name in names:
        suite = load_suite(COMPAT, name)  # refuses an entry without a platform
        for entries in suite.expected.values():
            assert all(e.platform and set(e.platform) <= set(PLATFORMS) for e in entries)
