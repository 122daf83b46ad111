"""Tests of the release checks (scripts/binaries.py, scripts/check_wheels.py)
on the files scripts/wheels.py really built, and on deliberately wrong ones
made from them: each check must accept the first and refuse the second.

    ZLOOP_CHECK_WHEELS=wheelhouse ZLOOP_CHECK_FREEBSD=DIR ZLOOP_CHECK_PORTABLE=SO \\
        python -m pytest scripts/test_check_wheels.py

scripts/test-wheels runs them after building the wheels; without the
variables, the tests that need those files are skipped.
"""

import os
import re
import struct
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import binaries  # noqa: E402
import check_wheels  # noqa: E402


def _files(var, pattern):
    where = os.environ.get(var)
    if not where:
        return []
    return sorted(os.path.join(where, n) for n in os.listdir(where) if re.fullmatch(pattern, n))


WHEELS = _files("ZLOOP_CHECK_WHEELS", r".*\.whl")
MACOS = [w for w in WHEELS if "macosx" in w]
LINUX = [w for w in WHEELS if "manylinux" in w]
FREEBSD = _files("ZLOOP_CHECK_FREEBSD", r"_zloop\.cp3\d+-freebsd-x86_64\.so")
PORTABLE = os.environ.get("ZLOOP_CHECK_PORTABLE")
ZIG_LIB = os.environ.get("ZLOOP_CHECK_ZIG_LIB")


def _need(files, what):
    if not files:
        pytest.skip(f"no {what} (see this file's docstring)")
    return files


def _extension(wheel):
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".so")]
        return zf.read(name)


def _macos_tag(wheel):
    """(version, arch, (major, minor)) from a macOS wheel's name."""
    version, (platform,) = check_wheels.wheel_tags(wheel)
    _, major, minor, arch = platform.split("_", 3)
    return version, arch, (int(major), int(minor))


@pytest.fixture(scope="module")
def exports():
    return check_wheels.Exports()


def _check_macho(data, wheel, exports=None, zig_lib=None):
    version, arch, minimum = _macos_tag(wheel)
    return check_wheels.check_macho(data, arch, minimum, version, zig_lib, exports)[0]


# --- the readers on real files -----------------------------------------------------


def test_macho_reader_reads_what_the_build_set():
    for wheel in _need(MACOS, "macOS wheels"):
        _, arch, minimum = _macos_tag(wheel)
        m = binaries.read_macho(_extension(wheel))
        assert m.arch == arch
        assert m.filetype_name == "DYLIB"  # what Zig emits; CPython dlopen()s it
        assert m.minos[:2] == minimum
        assert m.dylibs == [("LC_LOAD_DYLIB", "/usr/lib/libSystem.B.dylib")]
        binds = {b.symbol: b.ordinal for b in m.binds}
        assert binds["_PyModule_Create2"] == binaries.BIND_SPECIAL_DYLIB_FLAT_LOOKUP
        assert binds["_kevent"] == 1
        assert any(s.exported and s.name == "_PyInit__zloop" for s in m.symbols)


def test_elf_reader_reads_freebsd_and_linux():
    for path in _need(FREEBSD, "FreeBSD extensions"):
        with open(path, "rb") as f:
            elf = binaries.read_elf(f.read())
        assert elf.machine == binaries.EM_X86_64 and "libc.so.7" in elf.needed
        kevent = [s for s in elf.symbols if s.name == "kevent"]
        # FreeBSD 12's kevent (ext[4] in struct kevent) is FBSD_1.5.
        assert [(s.undefined, s.version, s.library) for s in kevent] == [
            (True, "FBSD_1.5", "libc.so.7")]
    for wheel in _need(LINUX, "manylinux wheels"):
        elf = binaries.read_elf(_extension(wheel))
        assert "libc.so.6" in elf.needed
        assert any(s.version and s.version.startswith("GLIBC_2.") for s in elf.symbols)


def test_readers_refuse_the_other_format():
    with pytest.raises(binaries.FormatError, match="an ELF file"):
        binaries.read_macho(_extension(_need(LINUX, "manylinux wheels")[0]))
    with pytest.raises(binaries.FormatError, match="a Mach-O file"):
        binaries.read_elf(_extension(_need(MACOS, "macOS wheels")[0]))


# --- the checks accept the real files ----------------------------------------------


def test_checks_accept_the_real_macos_wheels(exports):
    for wheel in _need(MACOS, "macOS wheels"):
        assert _check_macho(_extension(wheel), wheel, exports, ZIG_LIB) == [], wheel


def test_checks_accept_the_real_freebsd_extensions(exports):
    for path in _need(FREEBSD, "FreeBSD extensions"):
        assert check_wheels.check_extension(path, exports)[0] == [], path


# --- and refuse wrong ones ---------------------------------------------------------


def test_a_linux_extension_is_not_a_macos_or_freebsd_one():
    linux = _extension(_need(LINUX, "manylinux wheels")[0])
    with pytest.raises(binaries.FormatError):
        _check_macho(linux, _need(MACOS, "macOS wheels")[0])
    problems = "\n".join(check_wheels.check_freebsd(linux, "3.12", None)[0])
    assert "FreeBSD's libc.so.7 and only" in problems, problems
    assert "needs GLIBC_2." in problems, problems


def _patched(data, old, new):
    assert len(old) == len(new) and old in data
    return data.replace(old, new)


def _arm64():
    return [w for w in _need(MACOS, "macOS wheels") if "arm64" in w][0]


def test_wrong_cpu_minimum_library_and_signature_are_refused():
    wheel = _arm64()
    data = _extension(wheel)

    def refused(bad, expected):
        problems = "\n".join(_check_macho(bad, wheel))
        assert expected in problems, problems

    # The header's cputype: x86_64 code in an arm64 wheel.
    refused(struct.pack("<I", binaries.MH_MAGIC_64) + struct.pack("<i", binaries.CPU_TYPE_X86_64)
            + data[8:], "is not arm64's")
    # LC_BUILD_VERSION's minos 11.0 -> 12.0: the wheel would promise too much.
    m = binaries.read_macho(data)
    (at,) = [off for cmd, off in m.commands if cmd == binaries.LC_BUILD_VERSION]
    bad = bytearray(data)
    struct.pack_into("<I", bad, at + 12, 12 << 16)
    refused(bytes(bad), "minimum macOS 12.0 but the tag says 11.0")
    # Another library loaded beside (instead of) libSystem.
    refused(_patched(data, b"/usr/lib/libSystem.B.dylib", b"/usr/lib/libPython.B.dylib"),
            "libSystem alone expected")
    # No code signature: macOS kills unsigned arm64 code.
    (at,) = [off for cmd, off in m.commands if cmd == binaries.LC_CODE_SIGNATURE]
    bad = bytearray(data)
    struct.pack_into("<I", bad, at, 0x2A)  # LC_SOURCE_VERSION
    refused(bytes(bad), "not signed")


def test_a_flat_lookup_of_anything_but_python_is_refused():
    wheel = _arm64()
    bad = _patched(_extension(wheel), b"_PyLong_FromLong\0", b"_XyLong_FromLong\0")
    problems = "\n".join(_check_macho(bad, wheel))
    assert "_XyLong_FromLong bound with ordinal -2" in problems, problems


def test_a_python_symbol_the_interpreter_lacks_is_refused(exports):
    # What translate-c makes of a static inline C-API function it cannot
    # translate: an external name no interpreter exports.
    wheel = _arm64()
    bad = _patched(_extension(wheel), b"_PyLong_FromLong\0", b"_PyLong_FromLonq\0")
    problems = "\n".join(_check_macho(bad, wheel, exports))
    assert "does not export: ['PyLong_FromLonq']" in problems, problems


def test_a_libsystem_function_newer_than_the_minimum_is_refused():
    if not ZIG_LIB:
        pytest.skip("no ZLOOP_CHECK_ZIG_LIB")
    wheel = [w for w in _need(MACOS, "macOS wheels") if "x86_64" in w][0]
    data = _extension(wheel)
    m = binaries.read_macho(data)
    system = {b.symbol for b in m.binds if b.ordinal == 1}
    assert {"_clock_gettime", "_kqueue", "_getenv"} <= system
    # As built: nothing newer than 10.13 (clock_gettime is 10.12's).
    assert check_wheels.check_availability(m, system, (10, 13), ZIG_LIB) == []
    # A minimum below clock_gettime's.
    problems = check_wheels.check_availability(m, system, (10, 11), ZIG_LIB)
    assert any(p.startswith("_clock_gettime: in libSystem since macOS 10.12, newer than 10.11")
               for p in problems), problems
    # preadv (macOS 11) in getenv's place, bound lazily as getenv is: what
    # std's panic handler used to pull in, and a call to it aborts the
    # process on macOS 10.13-10.15. Refused, lazy or not, and by the whole
    # check of the wheel.
    bad = _patched(data, b"_getenv\0", b"_preadv\0")
    m = binaries.read_macho(bad)
    assert [b.kind for b in m.binds if b.symbol == "_preadv"] == ["lazy"]
    system = {b.symbol for b in m.binds if b.ordinal == 1}
    problems = check_wheels.check_availability(m, system, (10, 13), ZIG_LIB)
    assert problems == ["_preadv: in libSystem since macOS 11.0, newer than 10.13 "
                        "(bound lazily: the first call aborts there)"], problems
    assert problems[0] in _check_macho(bad, wheel, zig_lib=ZIG_LIB)
    # Bound at load time, it is said so.
    for b in m.binds:
        if b.symbol == "_preadv":
            b.kind = "bind"
    problems = check_wheels.check_availability(m, system, (10, 13), ZIG_LIB)
    assert any(p.startswith("_preadv: in libSystem since macOS 11.0") and "load time" in p
               for p in problems), problems


def test_a_freebsd_extension_needing_another_libc_is_refused():
    path = _need(FREEBSD, "FreeBSD extensions")[0]
    with open(path, "rb") as f:
        data = f.read()
    problems = "\n".join(check_wheels.check_freebsd(_patched(data, b"libc.so.7\0",
                                                             b"libc.so.8\0"), "3.12", None)[0])
    assert "FreeBSD's libc.so.7" in problems, problems


def _code_segment_moved(data, by):
    """`data` with its executable PT_LOAD's header moved `by` bytes up."""
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    out = bytearray(data)
    for i in range(phnum):
        at = phoff + i * phentsize
        p_type, flags, offset, vaddr, paddr = struct.unpack_from("<IIQQQ", out, at)
        if p_type == binaries.PT_LOAD and flags & binaries.PF_X:
            struct.pack_into("<QQQ", out, at + 8, offset + by, vaddr + by, paddr + by)
    return bytes(out)


def _elf_problems(data):
    return "\n".join(check_wheels.check_elf_common(binaries.read_elf(data), data))


def test_an_elf_release_names_its_functions_and_unwinds():
    for path in _need(LINUX, "manylinux wheels")[:1] + FREEBSD[:1]:
        data = _extension(path) if path.endswith(".whl") else open(path, "rb").read()
        assert _elf_problems(data) == "", path
        # Stripped to the exported symbol, as a release once was: no names.
        nameless = _patched(data, b"reactor.Reactor.runOnce\0", b"reactor.Reactor.runOnc_\0")
        assert "not reactor.Reactor.runOnce: stripped" in _elf_problems(nameless)
        # lld's own layout, which py-spy's libunwind cannot unwind.
        assert "starts mid-page" in _elf_problems(_code_segment_moved(data, 0x364))
        assert "no GNU build id" in _elf_problems(_patched(data, b"GNU\0", b"GNX\0"))
    if PORTABLE:  # a development build keeps its debug info
        with open(PORTABLE, "rb") as f:
            assert "has debug info" in _elf_problems(f.read())


def test_a_portable_linux_build_is_refused():
    # -Dportable: the kqueue backend over the test-only emulation; its
    # extension names the backend, which a Linux release never has.
    if not PORTABLE:
        pytest.skip("no ZLOOP_CHECK_PORTABLE")
    with open(PORTABLE, "rb") as f:
        problems = check_wheels.check_no_emulation(f.read())
    assert problems and "test-only kqueue emulation" in problems[0]
    for wheel in _need(LINUX, "manylinux wheels"):
        assert check_wheels.check_no_emulation(_extension(wheel)) == [], wheel


# --- the instruction classes -------------------------------------------------------


@pytest.mark.parametrize("mnemonic,v2,core2", [
    ("movdqa", False, False), ("pshufb", False, False), ("pextrw", False, False),
    ("ptest", False, True), ("pinsrq", False, True), ("pmovzxbw", False, True),
    ("popcntq", False, True), ("crc32b", False, True),
    ("vpxor", True, True), ("vmovdqu", True, True), ("vfmadd231ps", True, True),
    ("tzcntl", True, True), ("shlx", True, True), ("verw", False, False),
])
def test_instruction_levels(mnemonic, v2, core2):
    assert check_wheels.above_v2(mnemonic) == v2
    assert check_wheels.above_core2(mnemonic) == core2


def test_mnemonic_skips_prefixes_and_reads_both_objdumps():
    assert check_wheels._mnemonic("   19d44:\tlock cmpxchg %rcx,(%rdx)") == "cmpxchg"
    assert check_wheels._mnemonic("    1720:      \tpushq\t%rbp") == "pushq"
    assert check_wheels._mnemonic("0000000000001720 <_main>:") is None
