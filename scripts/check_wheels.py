"""Checks the wheels scripts/wheels.py made: what a user's machine will meet.

    python scripts/check_wheels.py [--zig-lib DIR] [--no-exports] [DIR_OR_FILE...]

Every wheel (`*.whl`) in the directories named (default: wheelhouse), and
every bare extension of a target with no wheel (`_zloop.cp312-freebsd-x86_64.so`,
see scripts/wheels.py), is checked for what its platform needs:

- every one: its tags (file name and WHEEL agree), one extension named for
  its CPython and platform, with no debug info, exporting PyInit__zloop, and every
  symbol it leaves for the interpreter is one that CPython X.Y's own
  interpreter exports (read from the interpreter that scripts/wheels.py
  finds for X.Y, unless --no-exports): translate-c declares a C-API inline
  function it cannot translate as an external one, which only the
  interpreter's export list tells from a real one;
- ELF (Linux, FreeBSD): a symbol table naming zloop's functions (profilers
  and debuggers show them), a GNU build id (its debug file's key), and a
  code segment whose header starts on a page (py-spy's libunwind needs it);
- manylinux: `auditwheel show` finds it consistent with manylinux_2_17 (no
  glibc symbol newer than 2.17, no library outside the manylinux set); the
  x86_64 one holds no instruction above x86-64-v2 (AVX, BMI, MOVBE,
  LZCNT/TZCNT: a v2 CPU would die on them with SIGILL); and it carries no
  kqueue backend: a Linux release offers epoll and io_uring only, and only a
  `-Dportable` (test) build, whose kqueue runs over the test-only emulation,
  has the backend name `kqueue` in it;
- macosx_X_Y_ARCH: read with scripts/binaries.py, no macOS tool needed: a
  Mach-O dylib or bundle for ARCH, minimum macOS (LC_BUILD_VERSION or
  LC_VERSION_MIN_MACOSX) X.Y as the tag says, loading libSystem and nothing
  else, every bind either to libSystem or a flat lookup (what `-undefined
  dynamic_lookup` leaves) of a Python C-API name, ad-hoc signed on arm64
  (macOS kills unsigned arm64 code), no debug info; with --zig-lib, no
  libSystem function newer than X.Y, however it is bound (the macOS SDK
  headers Zig ships say when each appeared: their availability annotations
  are the table); a lazy bind of a function the running macOS lacks loads,
  then aborts the process on the first call, and no check here can prove a
  call never comes; x86_64:
  no instruction above Zig's macOS baseline, Core 2 (no SSE4.1/4.2,
  POPCNT, AVX...; llvm-objdump disassembles it);
- FreeBSD (a bare extension): ELF x86_64 shared object that needs only
  FreeBSD's libc.so.7, libthr.so.3, libm.so.5 or libgcc_s.so.1, every
  undefined symbol either bound to one of their FBSD_* versions or an
  unversioned Python C-API name.

Exits 1 naming each failure. Needs auditwheel (pip) and objdump (binutils)
for the manylinux wheels, llvm-objdump for macOS x86_64.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import binaries  # noqa: E402
import wheels  # noqa: E402

# A Python C-API name as the interpreter exports it (ELF spelling; Mach-O
# puts one more underscore in front): PyModule_Create2, _Py_Dealloc,
# PyExc_TypeError, _Py_NoneStruct.
PYTHON_API = re.compile(r"^_?Py")
MODULE_INIT = "PyInit__zloop"

LIBSYSTEM = "/usr/lib/libSystem.B.dylib"

FREEBSD_LIBS = {"libc.so.7", "libthr.so.3", "libm.so.5", "libgcc_s.so.1"}

# --- instruction baselines ---------------------------------------------------------

# Above x86-64-v2: every VEX/EVEX instruction (AVX, AVX2, FMA, F16C, AVX-512:
# their AT&T mnemonics begin with v, as no v2 instruction but VMX's do),
# BMI1/2, MOVBE, LZCNT and TZCNT.
_VMX = {"verr", "verw", "vmcall", "vmlaunch", "vmresume", "vmxoff", "vmxon", "vmread",
        "vmwrite", "vmptrld", "vmptrst", "vmclear", "vmfunc", "vmrun", "vmload", "vmsave",
        "vmmcall"}
_V3 = {"andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "mulx", "pdep", "pext", "rorx", "sarx",
       "shlx", "shrx", "movbe", "lzcnt", "tzcnt"}
# Above Core 2 (SSSE3), up to v2: SSE4.1, SSE4.2 and POPCNT.
_SSE4 = {"blendpd", "blendps", "blendvpd", "blendvps", "dppd", "dpps", "extractps", "insertps",
         "movntdqa", "mpsadbw", "packusdw", "pblendvb", "pblendw", "pcmpeqq", "pextrb", "pextrd",
         "pextrq", "phminposuw", "pinsrb", "pinsrd", "pinsrq", "pmaxsb", "pmaxsd", "pmaxud",
         "pmaxuw", "pminsb", "pminsd", "pminud", "pminuw", "pmuldq", "pmulld", "ptest", "roundpd",
         "roundps", "roundsd", "roundss", "pcmpestri", "pcmpestrm", "pcmpistri", "pcmpistrm",
         "pcmpgtq", "crc32", "popcnt"}
_SSE4_PREFIXES = ("pmovsx", "pmovzx")
_PREFIXES = {"lock", "rep", "repe", "repz", "repne", "repnz", "data16", "data32", "addr32", "cs",
             "ds", "es", "fs", "gs", "ss", "notrack", "bnd", "rex", "rex.w", "xacquire",
             "xrelease"}


def _mnemonic(line):
    """The instruction's mnemonic in an objdump line, prefixes skipped."""
    if "\t" not in line or ":" not in line.split("\t", 1)[0]:
        return None
    for word in line.split("\t", 1)[1].split():
        if word not in _PREFIXES:
            return word
    return None


def _in(mnemonic, names):
    """Whether `mnemonic` is one of `names`, with or without an AT&T size
    suffix (popcntq, crc32b, lzcntl)."""
    return mnemonic in names or (mnemonic[-1:] in "bwlq" and mnemonic[:-1] in names)


def above_v2(mnemonic):
    return (mnemonic.startswith("v") and mnemonic not in _VMX) or _in(mnemonic, _V3)


def above_core2(mnemonic):
    return above_v2(mnemonic) or _in(mnemonic, _SSE4) or mnemonic.startswith(_SSE4_PREFIXES)


def check_baseline(so, above, level, objdump):
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", so],
                         capture_output=True, text=True)
    if out.returncode != 0 or "file format not recognized" in out.stderr:
        return [f"{objdump} cannot disassemble it: {out.stderr.strip()[:200]}"]
    mnemonics = [(m, line.strip()) for line in out.stdout.splitlines()
                 if (m := _mnemonic(line))]
    hits = [line for m, line in mnemonics if above(m)]
    if hits:
        return [f"{len(hits)} instructions above {level}, e.g. {hits[:3]}"]
    if len(mnemonics) < 1000:
        return [f"{objdump} disassembled almost nothing: the check proves nothing"]
    return []


def llvm_objdump():
    """An objdump that reads Mach-O: LLVM's (on macOS, `objdump` is LLVM's)."""
    for name in ("llvm-objdump", "objdump"):
        path = shutil.which(name)
        if path and "LLVM" in subprocess.run([path, "--version"], capture_output=True,
                                             text=True).stdout:
            return path
    return None


# --- what the interpreter exports --------------------------------------------------


class Exports:
    """The symbols each CPython's interpreter exports, read from the
    interpreter scripts/wheels.py finds for that version (or its
    libpython, when the executable links one)."""

    def __init__(self):
        self.cache = {}

    def __call__(self, version):
        if version not in self.cache:
            self.cache[version] = self._read(version)
        return self.cache[version]

    def _read(self, version):
        exe = wheels.interpreter_for(version)
        if exe is None:
            return None
        elf = binaries.read_elf(_read(exe))
        names = {s.name for s in elf.symbols if not s.undefined}
        if "Py_Initialize" in names:
            return exe, names
        libdir = os.path.join(os.path.dirname(os.path.dirname(exe)), "lib")
        for needed in elf.needed:
            path = os.path.join(libdir, needed)
            if needed.startswith("libpython") and os.path.exists(path):
                lib = binaries.read_elf(_read(path))
                return path, {s.name for s in lib.symbols if not s.undefined}
        return None


def check_python_imports(names, version, exports):
    """`names` (ELF spelling) are what the extension leaves for the
    interpreter; each must be something CPython `version` exports."""
    found = exports(version)
    if found is None:
        return [f"no CPython {version} interpreter found to read its exports from "
                "(see scripts/wheels.py; or --no-exports)"]
    where, exported = found
    missing = sorted(set(names) - exported)
    if missing:
        return [f"{len(missing)} symbols left for the interpreter that CPython {version} "
                f"({where}) does not export: {missing[:8]}"]
    return []


# --- Mach-O ------------------------------------------------------------------------


def darwin_introduced(zig_lib, names):
    """{C name: (major, minor) or "unavailable"} for those of `names` whose
    declaration in the macOS SDK headers that Zig ships carries a macOS
    availability annotation, before or after it, or through a macro that
    stands for one (`__CLOCK_AVAILABILITY`); a name with none is as old as
    the headers tell (or private, such as __ulock_wait, which they do not
    declare)."""
    root = os.path.join(zig_lib, "libc", "include", "any-darwin-any")
    if not os.path.isdir(root):
        raise FileNotFoundError(f"no macOS headers in {root}")
    comments = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
    # A declaration: the name at the start of a line, or after its return
    # type, before any parenthesis (not a parameter, not a macro).
    decl = re.compile(r"^[^;{}()#\n]*?\b(" + "|".join(map(re.escape, sorted(names))) +
                      r")\s*\(", re.MULTILINE)
    define = re.compile(r"^\s*#\s*define\s+(\w+)[ \t]+(.*(?:macos|OSX|__MAC_).*)$",
                        re.MULTILINE)
    versions = (re.compile(r"\bmacosx?\(\s*(\d+)\.(\d+)"),
                re.compile(r"__OSX_AVAILABLE\(\s*(\d+)\.(\d+)"),
                re.compile(r"__OSX_AVAILABLE(?:_STARTING|_BUT_DEPRECATED)\(\s*__MAC_(\d+)_(\d+)"))
    unavailable = re.compile(r"__API_UNAVAILABLE\([^)]*\bmacos\b|__OSX_UNAVAILABLE|__MAC_NA\b")
    texts = []
    for folder, _, files in os.walk(root):
        for file in sorted(files):
            if file.endswith(".h"):
                with open(os.path.join(folder, file), encoding="utf-8", errors="replace") as f:
                    texts.append(comments.sub(" ", f.read()))
    macros = {m.group(1): m.group(2) for text in texts for m in define.finditer(text)}
    word = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\b") if macros else None
    found = {}
    for text in texts:
        for m in decl.finditer(text):
            begin = max(text.rfind(c, 0, m.start(1)) for c in ";{}") + 1
            end = text.find(";", m.end())
            statement = text[begin:end if end >= 0 else m.end() + 400]
            if "{" in statement or len(statement) > 2000:
                continue  # a definition, not a declaration
            if word:
                statement = word.sub(lambda w: macros[w.group(1)], statement)
            if unavailable.search(statement):
                found[m.group(1)] = "unavailable"
                continue
            for pattern in versions:
                v = pattern.search(statement)
                if v:
                    version = (int(v.group(1)), int(v.group(2)))
                    found[m.group(1)] = max(found.get(m.group(1), version), version)
                    break
    return found


def _c_name(macho_name):
    """A Mach-O symbol's C name: one leading underscore off, and any
    variant suffix ($INODE64, $NOCANCEL, $DARWIN_EXTSN) with it."""
    return macho_name[1:].split("$", 1)[0]


def check_macho(so_data, arch, minimum, version, zig_lib, exports):
    problems = []
    m = binaries.read_macho(so_data)
    want_cpu = {"arm64": binaries.CPU_TYPE_ARM64, "x86_64": binaries.CPU_TYPE_X86_64}[arch]
    want_sub = {"arm64": binaries.CPU_SUBTYPE_ARM64_ALL,
                "x86_64": binaries.CPU_SUBTYPE_X86_64_ALL}[arch]
    if m.cputype != want_cpu or m.cpusubtype & ~binaries.CPU_SUBTYPE_MASK != want_sub:
        problems.append(f"CPU type {m.cputype:#x}/{m.cpusubtype:#x} is not {arch}'s")
    if m.filetype_name not in ("DYLIB", "BUNDLE"):
        problems.append(f"file type {m.filetype_name}: an extension is a dylib or a bundle")
    if m.platform != binaries.PLATFORM_MACOS or m.minos is None:
        problems.append(f"no minimum macOS version (platform {m.platform})")
    elif m.minos[:2] != minimum:
        problems.append(f"minimum macOS {m.minos[0]}.{m.minos[1]} but the tag says "
                        f"{minimum[0]}.{minimum[1]}")
    if m.dylibs != [("LC_LOAD_DYLIB", LIBSYSTEM)]:
        problems.append(f"loads {m.dylibs}: libSystem alone expected")
    if m.has_command(binaries.LC_DYLD_CHAINED_FIXUPS):
        problems.append("chained fixups: this check reads LC_DYLD_INFO's binds only")
    elif not (m.has_command(binaries.LC_DYLD_INFO_ONLY) or m.has_command(binaries.LC_DYLD_INFO)):
        problems.append("no LC_DYLD_INFO: no binds to check")
    if arch == "arm64" and not m.has_command(binaries.LC_CODE_SIGNATURE):
        problems.append("not signed: macOS kills unsigned arm64 code")
    if any(s.n_type & binaries.N_STAB for s in m.symbols) or "__DWARF" in m.segments or any(
            sect.startswith("__debug") for _, sect in m.sections):
        problems.append("not stripped (debug info)")
    if not any(s.exported and s.name == "_" + MODULE_INIT for s in m.symbols):
        problems.append(f"does not export {MODULE_INIT}")
    flat, system = set(), set()
    for b in m.binds:
        if b.kind == "weak":
            problems.append(f"weak bind of {b.symbol}")
        elif b.ordinal == 1:
            system.add(b.symbol)
        elif b.ordinal == binaries.BIND_SPECIAL_DYLIB_FLAT_LOOKUP and PYTHON_API.match(
                b.symbol[1:]):
            flat.add(b.symbol)
        else:
            problems.append(f"{b.symbol} bound with ordinal {b.ordinal}: only libSystem (1) "
                            "or, for a Python C-API name, a flat lookup (-2)")
    for s in m.symbols:
        if not s.undefined:
            continue
        if s.name not in flat | system:
            problems.append(f"undefined {s.name} is bound nowhere")
        elif s.name in flat and s.ordinal not in (binaries.SELF_LIBRARY_ORDINAL,
                                                  binaries.DYNAMIC_LOOKUP_ORDINAL):
            problems.append(f"{s.name}: library ordinal {s.ordinal} in the symbol table")
    if exports is not None:
        problems += check_python_imports([n[1:] for n in flat], version, exports)
    if zig_lib:
        problems += check_availability(m, system, minimum, zig_lib)
    minos = ".".join(map(str, (m.minos or ())[:2]))
    facts = (f"Mach-O {m.filetype_name} {m.arch}, macOS {minos}+, "
             f"loads {', '.join(n for _, n in m.dylibs)}; {len(system)} libSystem binds, "
             f"{len(flat)} flat-lookup Python binds")
    return problems, facts


def check_availability(m, system, minimum, zig_lib):
    """No libSystem function newer than the minimum macOS, whether dyld
    binds it at load time or lazily on the first call (which aborts the
    process on an older macOS)."""
    introduced = darwin_introduced(zig_lib, {_c_name(n) for n in system})
    lazy = {b.symbol for b in m.binds if b.kind == "lazy"}
    problems = []
    for name in sorted(system):
        since = introduced.get(_c_name(name))
        if since is None or (since != "unavailable" and since <= minimum):
            continue
        when = "never on macOS" if since == "unavailable" else f"since macOS {since[0]}.{since[1]}"
        problems.append(f"{name}: in libSystem {when}, newer than {minimum[0]}.{minimum[1]}"
                        + (" (bound lazily: the first call aborts there)" if name in lazy else
                           ", and bound at load time"))
    return problems


# --- ELF ---------------------------------------------------------------------------


# A release's symbol table names every function the optimiser left (about
# 400): at least these, where a profiler finds an idle loop waiting.
NAMED_FUNCTIONS = ("reactor.Reactor.runOnce", "loop.loop.runForeverNative")
MIN_FUNCTIONS = 200
PAGE = 4096


def check_elf_common(elf, data):
    """A release ELF extension has no debug info in it (a file of its own
    has it, by build id) and keeps its symbol table, so that profilers and
    debuggers name its functions; its code segment's header starts on a
    page, so that libunwind before 1.7 (py-spy's) finds its unwind table."""
    problems = []
    debug = [n for n in elf.section_names if n.startswith((".debug", ".zdebug"))]
    if debug:
        problems.append(f"has debug info ({', '.join(debug[:3])}...; {len(data)} bytes): a "
                        "release keeps it in _zloop.so.debug")
    missing = [n for n in NAMED_FUNCTIONS if n not in elf.functions]
    if missing or len(elf.functions) < MIN_FUNCTIONS:
        problems.append(f"its symbol table names {len(elf.functions)} functions, not "
                        f"{', '.join(missing) or 'every one'}: stripped to the exported symbol?")
    if elf.build_id is None:
        problems.append("no GNU build id (the key to its debug file)")
    for flags, offset, _ in elf.loads:
        if flags & binaries.PF_X and offset % PAGE:
            problems.append(f"its code segment starts mid-page (file offset {offset:#x}): "
                            "libunwind before 1.7 (py-spy --native) cannot unwind it")
    if not any(s.name == MODULE_INIT and not s.undefined for s in elf.symbols):
        problems.append(f"does not export {MODULE_INIT}")
    return problems


def check_freebsd(so_data, version, exports):
    elf = binaries.read_elf(so_data)
    problems = check_elf_common(elf, so_data)
    if elf.machine != binaries.EM_X86_64 or elf.type != binaries.ET_DYN:
        problems.append(f"machine {elf.machine}, type {elf.type}: an x86_64 shared object "
                        "expected")
    if elf.osabi_name not in ("SYSV", "FreeBSD"):
        problems.append(f"OS/ABI {elf.osabi_name}")
    for name, ntype, desc in elf.notes:
        if ntype == 1 and name not in ("FreeBSD", "GNU"):
            problems.append(f"an ABI note of {name}")
    if "libc.so.7" not in elf.needed or set(elf.needed) - FREEBSD_LIBS:
        problems.append(f"needs {elf.needed}: FreeBSD's libc.so.7 and only "
                        f"{sorted(FREEBSD_LIBS)}")
    python, versions = [], set()
    for s in elf.symbols:
        if not s.undefined:
            continue
        if s.version:
            versions.add(s.version)
            if not s.version.startswith("FBSD_") or s.library not in FREEBSD_LIBS:
                problems.append(f"{s.name} needs {s.version} of {s.library}")
        elif PYTHON_API.match(s.name) and not s.weak:
            python.append(s.name)
        else:
            problems.append(f"{s.name}: undefined, unversioned and not the Python C API")
    if exports is not None:
        problems += check_python_imports(python, version, exports)
    facts = (f"ELF x86_64 {elf.osabi_name}, needs {', '.join(elf.needed)}; versions "
             f"{', '.join(sorted(versions))}; {len(python)} Python symbols")
    return problems, facts


def check_no_emulation(so_data):
    """A Linux release offers epoll and io_uring; only a -Dportable build
    offers kqueue, over the test-only emulation, and names it."""
    if b"kqueue" in so_data:
        return ["it has a kqueue backend: a -Dportable build, with the test-only kqueue "
                "emulation, never ships"]
    return []


def check_linux(wheel, so, so_data, version, exports):
    problems = check_elf_common(binaries.read_elf(so_data), so_data)
    out = subprocess.run([sys.executable, "-m", "auditwheel", "show", wheel],
                         capture_output=True, text=True)
    text = " ".join(out.stdout.split())
    arch = "aarch64" if "aarch64" in os.path.basename(wheel) else "x86_64"
    if out.returncode != 0 or f'platform tag: "manylinux_2_17_{arch}"' not in text:
        problems.append(f"auditwheel does not find it manylinux_2_17_{arch}: "
                        f"{text or out.stderr}")
    problems += check_no_emulation(so_data)
    if arch == "x86_64":
        problems += check_baseline(so, above_v2, "x86-64-v2", "objdump")
    if exports is not None:
        elf = binaries.read_elf(so_data)
        problems += check_python_imports(
            [s.name for s in elf.symbols if s.undefined and not s.version], version, exports)
    return problems, f"ELF {arch}, manylinux_2_17"


# --- wheels ------------------------------------------------------------------------


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def wheel_tags(wheel):
    """(CPython version "3.12", [platform tags]) from the file name, after
    checking WHEEL's Tag lines say the same."""
    parts = os.path.basename(wheel)[:-len(".whl")].split("-")
    python, abi, platforms = parts[-3], parts[-2], parts[-1].split(".")
    with zipfile.ZipFile(wheel) as zf:
        meta = [n for n in zf.namelist() if n.endswith(".dist-info/WHEEL")]
        tags = [line.split(":", 1)[1].strip()
                for line in zf.read(meta[0]).decode().splitlines() if line.startswith("Tag:")]
    expected = [f"{python}-{abi}-{p}" for p in platforms]
    if sorted(tags) != sorted(expected):
        raise AssertionError(f"WHEEL says {tags}, the file name {expected}")
    if python != abi or not python.startswith("cp3"):
        raise AssertionError(f"tags {python}-{abi}: a CPython-specific wheel expected")
    return f"3.{python[3:]}", platforms


def check_wheel(wheel, work, zig_lib, exports):
    version, platforms = wheel_tags(wheel)
    cp = version.replace(".", "")
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".so")]
        if len(names) != 1:
            return [f"expected one extension, found {names}"], ""
        so = zf.extract(names[0], work)
    data = _read(so)
    platform = platforms[0]
    if platform.startswith("manylinux"):
        arch = "aarch64" if platform.endswith("aarch64") else "x86_64"
        suffix = f"{arch}-linux-gnu"
    elif platform.startswith("macosx_"):
        suffix = "darwin"
    else:
        return [f"platform {platform}: no check for it"], ""
    problems = []
    if names[0] != f"zloop/_zloop.cpython-{cp}-{suffix}.so":
        problems.append(f"extension {names[0]}, not zloop/_zloop.cpython-{cp}-{suffix}.so")
    if suffix == "darwin":
        _, major, minor, arch = platform.split("_", 3)
        found, facts = check_macho(data, arch, (int(major), int(minor)), version, zig_lib,
                                   exports)
        if arch == "x86_64":
            objdump = llvm_objdump()
            found += (check_baseline(so, above_core2, "Core 2", objdump) if objdump else
                      ["no llvm-objdump to disassemble a Mach-O file (apt install llvm)"])
    else:
        found, facts = check_linux(wheel, so, data, version, exports)
    return problems + found, f"{facts}; {len(data) // 1024} KiB"


def check_extension(path, exports):
    """A bare extension of a target with no wheel: _zloop.cp312-TARGET.so."""
    m = re.fullmatch(r"_zloop\.cp3(\d+)-(.+)\.so", os.path.basename(path))
    if not m:
        return [f"not a name scripts/wheels.py writes: {os.path.basename(path)}"], ""
    version, target = f"3.{m.group(1)}", m.group(2)
    data = _read(path)
    if target != "freebsd-x86_64":
        return [f"target {target}: no check for a bare extension of it"], ""
    problems, facts = check_freebsd(data, version, exports)
    return problems, f"{facts}; {len(data) // 1024} KiB"


def artefacts(paths):
    found = []
    for path in paths:
        if os.path.isdir(path):
            found += sorted(os.path.join(path, n) for n in os.listdir(path)
                            if n.endswith(".whl") or re.fullmatch(r"_zloop\.cp3\d+-.+\.so", n))
        else:
            found.append(path)
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["wheelhouse"])
    parser.add_argument("--zig-lib", help="Zig's lib directory (`zig env`'s lib_dir): check "
                        "macOS wheels' libSystem functions against its SDK headers")
    parser.add_argument("--no-exports", action="store_true",
                        help="do not check the Python symbols against each interpreter's exports")
    args = parser.parse_args(argv)
    files = artefacts(args.paths)
    if not files:
        print(f"check_wheels: nothing to check in {' '.join(args.paths)}")
        return 1
    exports = None if args.no_exports else Exports()
    failures = 0
    for path in files:
        with tempfile.TemporaryDirectory() as work:
            try:
                if path.endswith(".whl"):
                    problems, facts = check_wheel(path, work, args.zig_lib, exports)
                else:
                    problems, facts = check_extension(path, exports)
            except (binaries.FormatError, AssertionError, zipfile.BadZipFile) as exc:
                problems, facts = [str(exc)], ""
        status = "ok" if not problems else "FAIL"
        print(f"check_wheels: {status}: {os.path.basename(path)}" + (f" ({facts})" if facts
                                                                      else ""))
        for p in problems:
            print(f"    {p}")
        failures += bool(problems)
    print(f"check_wheels: {len(files) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
