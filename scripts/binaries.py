"""Small readers of Mach-O and ELF shared objects, for the release checks
(scripts/check_wheels.py): what a dynamic loader will see in zloop's
extension, read with nothing but the standard library, so that the macOS
and FreeBSD builds can be checked on a Linux machine with no macOS tools.

    python scripts/binaries.py FILE...    prints what each reader finds

Mach-O (64-bit, little-endian; mach-o/loader.h): the header (CPU type,
file type, flags), the load commands, the minimum macOS version
(LC_BUILD_VERSION or LC_VERSION_MIN_MACOSX), the dylibs it loads, its
symbol table, and the binds dyld performs (LC_DYLD_INFO's bind, lazy-bind
and weak-bind opcode streams), each with the library ordinal it is looked
up in: 1..n the n-th loaded dylib, -2 a flat lookup in every image loaded
(what `-undefined dynamic_lookup` leaves for the interpreter's symbols).

ELF (64-bit, little-endian): the header (OS/ABI, machine, type), DT_NEEDED
and DT_SONAME, the dynamic symbols with the version each undefined one is
bound to (.gnu.version and .gnu.version_r: the library and version name),
and the notes (e.g. FreeBSD's .note.tag).

Each reader raises `FormatError` on a file that is not what it reads.
"""

import dataclasses
import struct
import sys


class FormatError(ValueError):
    """The file is not an object file of the kind asked for, or is damaged."""


# --- Mach-O -------------------------------------------------------------------------

MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPE_X86_64 = 0x01000007
CPU_TYPE_ARM64 = 0x0100000C
CPU_SUBTYPE_MASK = 0xFF000000  # capability bits above the subtype proper
CPU_SUBTYPE_X86_64_ALL = 3
CPU_SUBTYPE_ARM64_ALL = 0
MH_FILETYPES = {1: "OBJECT", 2: "EXECUTE", 6: "DYLIB", 8: "BUNDLE"}
MH_TWOLEVEL = 0x80

LC_REQ_DYLD = 0x80000000
LC_SYMTAB = 0x2
LC_LOAD_DYLIB = 0xC
LC_ID_DYLIB = 0xD
LC_LOAD_WEAK_DYLIB = 0x18 | LC_REQ_DYLD
LC_SEGMENT_64 = 0x19
LC_REEXPORT_DYLIB = 0x1F | LC_REQ_DYLD
LC_LAZY_LOAD_DYLIB = 0x20
LC_DYLD_INFO = 0x22
LC_DYLD_INFO_ONLY = 0x22 | LC_REQ_DYLD
LC_LOAD_UPWARD_DYLIB = 0x23 | LC_REQ_DYLD
LC_VERSION_MIN_MACOSX = 0x24
LC_CODE_SIGNATURE = 0x1D
LC_BUILD_VERSION = 0x32
LC_DYLD_CHAINED_FIXUPS = 0x34 | LC_REQ_DYLD
# The commands that make dyld load a library: each takes the next ordinal.
DYLIB_LOADS = {LC_LOAD_DYLIB: "LC_LOAD_DYLIB", LC_LOAD_WEAK_DYLIB: "LC_LOAD_WEAK_DYLIB",
               LC_REEXPORT_DYLIB: "LC_REEXPORT_DYLIB", LC_LAZY_LOAD_DYLIB: "LC_LAZY_LOAD_DYLIB",
               LC_LOAD_UPWARD_DYLIB: "LC_LOAD_UPWARD_DYLIB"}
PLATFORM_MACOS = 1

N_STAB = 0xE0
N_TYPE = 0x0E
N_EXT = 0x01
N_UNDF = 0x0
N_SECT = 0xE

# Library ordinals (n_desc's high byte; bind opcodes' special values).
SELF_LIBRARY_ORDINAL = 0
DYNAMIC_LOOKUP_ORDINAL = 0xFE  # in n_desc: a flat lookup
BIND_SPECIAL_DYLIB_FLAT_LOOKUP = -2  # in the bind opcodes


@dataclasses.dataclass
class MachOSymbol:
    name: str
    n_type: int
    n_desc: int

    @property
    def undefined(self):
        return not self.n_type & N_STAB and self.n_type & N_TYPE == N_UNDF

    @property
    def exported(self):
        return not self.n_type & N_STAB and self.n_type & N_TYPE == N_SECT and bool(
            self.n_type & N_EXT)

    @property
    def ordinal(self):
        return (self.n_desc >> 8) & 0xFF


@dataclasses.dataclass
class Bind:
    symbol: str
    ordinal: int  # 1..n: a loaded dylib; -2: flat lookup; 0: this image; -1: the executable
    kind: str  # "bind", "lazy" or "weak"
    weak_import: bool


@dataclasses.dataclass
class MachO:
    cputype: int
    cpusubtype: int
    filetype: int
    flags: int
    commands: list  # (cmd, offset of the command in the file)
    dylibs: list  # (command name, install name), in ordinal order
    platform: int | None
    minos: tuple | None  # (major, minor, patch)
    sdk: tuple | None
    symbols: list
    binds: list
    segments: list  # segment names
    sections: list  # (segment, section) names

    @property
    def filetype_name(self):
        return MH_FILETYPES.get(self.filetype, hex(self.filetype))

    @property
    def arch(self):
        return {CPU_TYPE_ARM64: "arm64", CPU_TYPE_X86_64: "x86_64"}.get(self.cputype,
                                                                         hex(self.cputype))

    def has_command(self, cmd):
        return any(c == cmd for c, _ in self.commands)


def _cstr(data, at, end=None):
    stop = data.find(b"\0", at, len(data) if end is None else end)
    if stop < 0:
        raise FormatError(f"unterminated string at {at:#x}")
    return data[at:stop].decode("utf-8", "replace")


def _version(encoded):
    """xxxx.yy.zz in nibbles, as Mach-O encodes versions."""
    return (encoded >> 16, (encoded >> 8) & 0xFF, encoded & 0xFF)


def _uleb(data, at):
    value = shift = 0
    while True:
        if at >= len(data):
            raise FormatError("truncated ULEB128")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _sleb(data, at):
    value = shift = 0
    while True:
        if at >= len(data):
            raise FormatError("truncated SLEB128")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if byte & 0x40:
                value -= 1 << shift
            return value, at


def read_binds(stream, kind):
    """The symbols a bind opcode stream binds, with their library ordinals
    (mach-o/loader.h BIND_OPCODE_*). A lazy stream is a run of entries each
    ended by DONE, so DONE never stops the reading here."""
    binds = []
    ordinal, symbol, flags = 0, None, 0
    at = 0
    while at < len(stream):
        byte = stream[at]
        at += 1
        op, imm = byte & 0xF0, byte & 0x0F
        if op == 0x00:  # DONE
            continue
        if op == 0x10:  # SET_DYLIB_ORDINAL_IMM
            ordinal = imm
        elif op == 0x20:  # SET_DYLIB_ORDINAL_ULEB
            ordinal, at = _uleb(stream, at)
        elif op == 0x30:  # SET_DYLIB_SPECIAL_IMM: 0, -1, -2, -3
            ordinal = 0 if imm == 0 else imm - 16
        elif op == 0x40:  # SET_SYMBOL_TRAILING_FLAGS_IMM
            flags = imm
            end = stream.find(b"\0", at)
            if end < 0:
                raise FormatError("unterminated symbol name in a bind stream")
            symbol = stream[at:end].decode("utf-8", "replace")
            at = end + 1
        elif op == 0x50:  # SET_TYPE_IMM
            pass
        elif op == 0x60:  # SET_ADDEND_SLEB
            _, at = _sleb(stream, at)
        elif op in (0x70, 0x80, 0xA0):
            # SET_SEGMENT_AND_OFFSET_ULEB, ADD_ADDR_ULEB, DO_BIND_ADD_ADDR_ULEB
            _, at = _uleb(stream, at)
        elif op == 0xC0:  # DO_BIND_ULEB_TIMES_SKIPPING_ULEB
            _, at = _uleb(stream, at)
            _, at = _uleb(stream, at)
        elif op == 0xD0:  # THREADED: SET_BIND_ORDINAL_TABLE_SIZE_ULEB (0) or APPLY (1)
            if imm == 0:
                _, at = _uleb(stream, at)
        elif op not in (0x90, 0xB0):  # DO_BIND, DO_BIND_ADD_ADDR_IMM_SCALED
            raise FormatError(f"unknown bind opcode {byte:#04x}")
        if op in (0x90, 0xA0, 0xB0, 0xC0) or (op == 0xD0 and imm == 1):
            if symbol is None:
                raise FormatError("a bind before any symbol name")
            binds.append(Bind(symbol, ordinal, kind, bool(flags & 0x1)))
    return binds


def read_macho(data):
    """The Mach-O file in `data` (bytes), as dyld will see it."""
    if len(data) < 32:
        raise FormatError("too short for a Mach-O header")
    magic, cputype, cpusubtype, filetype, ncmds, sizeofcmds, flags, _ = struct.unpack_from(
        "<IiiIIIII", data, 0)
    if magic != MH_MAGIC_64:
        what = "an ELF file" if data[:4] == b"\x7fELF" else f"magic {magic:#x}"
        raise FormatError(f"not a 64-bit little-endian Mach-O file ({what})")
    if 32 + sizeofcmds > len(data):
        raise FormatError("load commands run past the end of the file")
    commands, dylibs, symbols, binds, segments, sections = [], [], [], [], [], []
    platform = minos = sdk = None
    at = 32
    for _ in range(ncmds):
        cmd, cmdsize = struct.unpack_from("<II", data, at)
        if cmdsize < 8 or at + cmdsize > 32 + sizeofcmds:
            raise FormatError(f"load command {cmd:#x} at {at:#x} has a bad size {cmdsize}")
        commands.append((cmd, at))
        if cmd in DYLIB_LOADS:
            (name_off,) = struct.unpack_from("<I", data, at + 8)
            dylibs.append((DYLIB_LOADS[cmd], _cstr(data, at + name_off, at + cmdsize)))
        elif cmd == LC_BUILD_VERSION:
            platform, minos_raw, sdk_raw = struct.unpack_from("<III", data, at + 8)
            minos, sdk = _version(minos_raw), _version(sdk_raw)
        elif cmd == LC_VERSION_MIN_MACOSX:
            minos_raw, sdk_raw = struct.unpack_from("<II", data, at + 8)
            platform, minos, sdk = PLATFORM_MACOS, _version(minos_raw), _version(sdk_raw)
        elif cmd == LC_SEGMENT_64:
            segname = data[at + 8:at + 24].rstrip(b"\0").decode()
            segments.append(segname)
            (nsects,) = struct.unpack_from("<I", data, at + 64)
            for i in range(nsects):
                sect = at + 72 + 80 * i
                sections.append((segname, data[sect:sect + 16].rstrip(b"\0").decode()))
        elif cmd == LC_SYMTAB:
            symoff, nsyms, stroff, strsize = struct.unpack_from("<IIII", data, at + 8)
            for i in range(nsyms):
                strx, n_type, _sect, n_desc, _value = struct.unpack_from(
                    "<IBBHQ", data, symoff + 16 * i)
                name = _cstr(data, stroff + strx, stroff + strsize) if strx else ""
                symbols.append(MachOSymbol(name, n_type, n_desc))
        elif cmd in (LC_DYLD_INFO, LC_DYLD_INFO_ONLY):
            fields = struct.unpack_from("<10I", data, at + 8)
            for kind, (off, size) in zip(("bind", "weak", "lazy"),
                                         (fields[2:4], fields[4:6], fields[6:8])):
                if off + size > len(data):
                    raise FormatError(f"{kind} bind stream runs past the end of the file")
                binds += read_binds(data[off:off + size], kind)
        at += cmdsize
    return MachO(cputype, cpusubtype, filetype, flags, commands, dylibs, platform, minos, sdk,
                 symbols, binds, segments, sections)


# --- ELF ----------------------------------------------------------------------------

ELFOSABI = {0: "SYSV", 3: "GNU/Linux", 9: "FreeBSD"}
EM_X86_64 = 62
EM_AARCH64 = 183
ET_DYN = 3
SHT_SYMTAB = 2
SHT_DYNAMIC = 6
SHT_NOTE = 7
SHT_DYNSYM = 11
PT_LOAD = 1
PF_X = 1
STT_FUNC = 2
NT_GNU_BUILD_ID = 3
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
DT_NEEDED = 1
DT_SONAME = 14
SHN_UNDEF = 0
STB_WEAK = 2


@dataclasses.dataclass
class ElfSymbol:
    name: str
    undefined: bool
    weak: bool
    version: str | None  # "FBSD_1.0", "GLIBC_2.17"; None: unversioned
    library: str | None  # the DT_NEEDED library the version is required from


@dataclasses.dataclass
class Elf:
    osabi: int
    machine: int
    type: int
    needed: list
    soname: str | None
    symbols: list
    notes: list  # (owner name, note type, descriptor bytes)
    section_names: list
    functions: list  # the names of the functions in the symbol table (.symtab)
    loads: list  # (flags, file offset, address) of each PT_LOAD segment

    @property
    def osabi_name(self):
        return ELFOSABI.get(self.osabi, str(self.osabi))

    @property
    def build_id(self):
        """The GNU build id, in hex, or None."""
        for name, ntype, desc in self.notes:
            if name == "GNU" and ntype == NT_GNU_BUILD_ID:
                return desc.hex()
        return None


def read_elf(data):
    """The 64-bit little-endian ELF file in `data` (bytes)."""
    if data[:4] != b"\x7fELF":
        what = "a Mach-O file" if data[:4] == struct.pack("<I", MH_MAGIC_64) else "no ELF magic"
        raise FormatError(f"not an ELF file ({what})")
    if data[4] != 2 or data[5] != 1:
        raise FormatError("not a 64-bit little-endian ELF file")
    osabi = data[7]
    e_type, machine = struct.unpack_from("<HH", data, 16)
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 54)
    loads = []
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_flags, p_offset, p_vaddr))
    if shoff == 0 or shnum == 0:
        raise FormatError("no section headers")
    sections = []
    for i in range(shnum):
        name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize = \
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        sections.append((name, sh_type, offset, size, link, entsize))
    shstr = sections[shstrndx]
    names = [_cstr(data, shstr[2] + s[0]) for s in sections]

    def of_type(sh_type):
        return [s for s in sections if s[1] == sh_type]

    needed, soname = [], None
    for _, _, offset, size, link, _ in of_type(SHT_DYNAMIC):
        strtab = sections[link][2]
        for at in range(offset, offset + size, 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == DT_NEEDED:
                needed.append(_cstr(data, strtab + value))
            elif tag == DT_SONAME:
                soname = _cstr(data, strtab + value)
    versions = {}  # version index -> (library, version name)
    for _, _, offset, size, link, _ in of_type(SHT_GNU_VERNEED):
        strtab = sections[link][2]
        at = offset
        while True:
            _ver, count, file_off, aux, nxt = struct.unpack_from("<HHIII", data, at)
            library = _cstr(data, strtab + file_off)
            a = at + aux
            for _ in range(count):
                _hash, _flags, other, name_off, anext = struct.unpack_from("<IHHII", data, a)
                versions[other] = (library, _cstr(data, strtab + name_off))
                a += anext
            if not nxt:
                break
            at += nxt
    versym = of_type(SHT_GNU_VERSYM)
    symbols = []
    for _, _, offset, size, link, entsize in of_type(SHT_DYNSYM):
        strtab = sections[link][2]
        for i in range(1, size // entsize):
            name_off, info, _other, shndx, _value, _size = struct.unpack_from(
                "<IBBHQQ", data, offset + i * entsize)
            index = struct.unpack_from("<H", data, versym[0][2] + 2 * i)[0] & 0x7FFF \
                if versym else 0
            library, version = versions.get(index, (None, None))
            symbols.append(ElfSymbol(_cstr(data, strtab + name_off), shndx == SHN_UNDEF,
                                     info >> 4 == STB_WEAK, version, library))
    functions = []
    for _, _, offset, size, link, entsize in of_type(SHT_SYMTAB):
        strtab = sections[link][2]
        for at in range(offset + entsize, offset + size, entsize):
            name_off, info = struct.unpack_from("<IB", data, at)
            if info & 0xF == STT_FUNC:
                functions.append(_cstr(data, strtab + name_off))
    notes = []
    for _, _, offset, size, _, _ in of_type(SHT_NOTE):
        at = offset
        while at + 12 <= offset + size:
            namesz, descsz, ntype = struct.unpack_from("<III", data, at)
            name = data[at + 12:at + 12 + namesz].rstrip(b"\0").decode("utf-8", "replace")
            desc_at = at + 12 + (namesz + 3) // 4 * 4
            notes.append((name, ntype, data[desc_at:desc_at + descsz]))
            at = desc_at + (descsz + 3) // 4 * 4
    return Elf(osabi, machine, e_type, needed, soname, symbols, notes, names, functions, loads)


def describe(path):
    """A few lines saying what the readers find in the file at `path`."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == b"\x7fELF":
        elf = read_elf(data)
        undefined = [s for s in elf.symbols if s.undefined]
        return [f"{path}: ELF, OS/ABI {elf.osabi_name}, machine {elf.machine}, type {elf.type}",
                f"  needed: {', '.join(elf.needed)}",
                f"  versions: {', '.join(sorted({s.version for s in undefined if s.version}))}",
                f"  undefined: {len(undefined)}, unversioned: "
                f"{sum(1 for s in undefined if not s.version)}",
                f"  notes: {[(n, t) for n, t, _ in elf.notes]}"]
    macho = read_macho(data)
    by_ordinal = {}
    for b in macho.binds:
        by_ordinal.setdefault(b.ordinal, set()).add(b.symbol)
    return [f"{path}: Mach-O {macho.filetype_name} {macho.arch}, minos "
            f"{'.'.join(map(str, macho.minos or ()))}, platform {macho.platform}",
            f"  dylibs: {macho.dylibs}",
            "  binds: " + ", ".join(f"ordinal {o}: {len(s)} symbols"
                                    for o, s in sorted(by_ordinal.items()))]


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("\n".join(describe(arg)))
