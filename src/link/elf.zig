//! Post-link edits of the extension's ELF file (Linux, FreeBSD), run by
//! build.zig on what lld wrote, on the build machine:
//!
//!   elf IN OUT [--strip-debug] [--debug-file PATH]
//!
//! 1. The code segment's program header starts on a page boundary of the
//!    file. lld starts the segment mid-page (its default layout shares the
//!    page that ends the read-only data), so the header's p_offset is not
//!    the file offset of the mapping that /proc/PID/maps shows. libunwind
//!    before 1.7 finds a library's unwind table by that offset
//!    (`p_offset == mapoff`), finds none for zloop, and falls back to frame
//!    pointers, which breaks at the first interpreter frame built without
//!    them: `py-spy dump --native` failed with UNW_EINVAL on CPython 3.12.
//!    The header is moved down to the page start, which changes nothing
//!    that is mapped (the loader maps whole pages from the page start
//!    anyway), only what the header says.
//! 2. With --strip-debug, the DWARF sections go and the symbol table stays,
//!    so that py-spy, gdb, perf and memray name zloop's functions
//!    (`reactor.Reactor.runOnce`) in a release build. --debug-file writes
//!    the whole file beside it: the same build id, so gdb and perf take it
//!    as the release file's debug info (`set debug-file-directory`,
//!    `perf buildid-cache --add`).
//!
//! ELF64, little-endian only: every ELF target zloop ships (x86_64,
//! aarch64). Anything else is copied unchanged.
const std = @import("std");
const builtin = @import("builtin");

const Ehdr = extern struct {
    ident: [16]u8,
    type: u16,
    machine: u16,
    version: u32,
    entry: u64,
    phoff: u64,
    shoff: u64,
    flags: u32,
    ehsize: u16,
    phentsize: u16,
    phnum: u16,
    shentsize: u16,
    shnum: u16,
    shstrndx: u16,
};

const Phdr = extern struct {
    type: u32,
    flags: u32,
    offset: u64,
    vaddr: u64,
    paddr: u64,
    filesz: u64,
    memsz: u64,
    @"align": u64,
};

const Shdr = extern struct {
    name: u32,
    type: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    addralign: u64,
    entsize: u64,
};

const Sym = extern struct {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
};

const PT_LOAD = 1;
const PF_X = 1;
const SHT_SYMTAB = 2;
const SHT_RELA = 4;
const SHT_NOBITS = 8;
const SHT_REL = 9;
const SHF_ALLOC = 0x2;
const SHF_INFO_LINK = 0x40;
const SHN_LORESERVE = 0xff00;

/// The page the code segment's header is aligned to: x86_64's, and that
/// of nearly every aarch64 Linux (on a kernel with 64 KiB pages, old
/// libunwind still misses it unless lld's offset happens to fall there).
const page_size = 4096;

pub const Error = error{ Malformed, Overlap, OutOfMemory };

fn load(comptime T: type, buf: []const u8, offset: u64) Error!T {
    if (offset > buf.len or buf.len - offset < @sizeOf(T)) return error.Malformed;
    return std.mem.bytesToValue(T, buf[@intCast(offset)..][0..@sizeOf(T)]);
}

fn store(comptime T: type, buf: []u8, offset: u64, value: T) void {
    @memcpy(buf[@intCast(offset)..][0..@sizeOf(T)], std.mem.asBytes(&value));
}

/// Whether `buf` is a file these edits understand (ELF64, little-endian,
/// on a little-endian build machine).
pub fn understood(buf: []const u8) bool {
    if (builtin.cpu.arch.endian() != .little) return false;
    if (buf.len < @sizeOf(Ehdr) or !std.mem.eql(u8, buf[0..4], "\x7fELF")) return false;
    return buf[4] == 2 and buf[5] == 1; // ELFCLASS64, ELFDATA2LSB
}

/// Moves the start of every executable PT_LOAD down to its page start in
/// the file (see the file's header); returns how many it moved.
pub fn alignCode(buf: []u8) Error!usize {
    const eh = try load(Ehdr, buf, 0);
    if (eh.phentsize != @sizeOf(Phdr)) return error.Malformed;
    var moved: usize = 0;
    for (0..eh.phnum) |i| {
        const at = eh.phoff + i * @sizeOf(Phdr);
        var ph = try load(Phdr, buf, at);
        if (ph.type != PT_LOAD or ph.flags & PF_X == 0) continue;
        const delta = ph.offset % page_size;
        if (delta == 0) continue;
        // The loader requires it, and maps from the page start because of it.
        if (ph.vaddr % page_size != delta) return error.Malformed;
        // The lower start must not reach into another segment's pages.
        for (0..eh.phnum) |j| {
            const other = try load(Phdr, buf, eh.phoff + j * @sizeOf(Phdr));
            if (j == i or other.type != PT_LOAD or other.vaddr >= ph.vaddr) continue;
            if (other.vaddr + other.memsz > ph.vaddr - delta) return error.Overlap;
        }
        ph.offset -= delta;
        ph.vaddr -= delta;
        ph.paddr -= delta;
        ph.filesz += delta;
        ph.memsz += delta;
        store(Phdr, buf, at, ph);
        moved += 1;
    }
    return moved;
}

fn isDebug(name: []const u8) bool {
    return std.mem.startsWith(u8, name, ".debug") or std.mem.startsWith(u8, name, ".zdebug");
}

fn sectionName(buf: []const u8, names: Shdr, sh: Shdr) Error![]const u8 {
    if (sh.name >= names.size or names.offset + names.size > buf.len) return error.Malformed;
    const rest = buf[@intCast(names.offset + sh.name)..@intCast(names.offset + names.size)];
    return rest[0 .. std.mem.indexOfScalar(u8, rest, 0) orelse return error.Malformed];
}

/// `buf` without its DWARF sections (`.debug_*`), its symbol table and
/// everything the loader maps kept byte for byte: the file up to the end
/// of the last mapped byte is copied as it is, then the other sections
/// kept, then the section headers, renumbered.
pub fn stripDebug(gpa: std.mem.Allocator, buf: []const u8) Error![]u8 {
    const eh = try load(Ehdr, buf, 0);
    if (eh.shentsize != @sizeOf(Shdr) or eh.shstrndx >= eh.shnum) return error.Malformed;
    const shdrs = try gpa.alloc(Shdr, eh.shnum);
    defer gpa.free(shdrs);
    for (shdrs, 0..) |*sh, i| sh.* = try load(Shdr, buf, eh.shoff + i * @sizeOf(Shdr));
    // new_index[i]: section i's index in the output; null: dropped.
    const new_index = try gpa.alloc(?u16, eh.shnum);
    defer gpa.free(new_index);
    var kept: u16 = 0;
    for (shdrs, new_index) |sh, *n| {
        const drop = kept > 0 and sh.flags & SHF_ALLOC == 0 and
            isDebug(try sectionName(buf, shdrs[eh.shstrndx], sh));
        n.* = if (drop) null else kept;
        if (!drop) kept += 1;
    }
    var mapped_end: u64 = eh.phoff + @as(u64, eh.phnum) * @sizeOf(Phdr);
    for (0..eh.phnum) |i| {
        const ph = try load(Phdr, buf, eh.phoff + i * @sizeOf(Phdr));
        mapped_end = @max(mapped_end, ph.offset + ph.filesz);
    }
    for (shdrs) |sh| {
        if (sh.flags & SHF_ALLOC != 0 and sh.type != SHT_NOBITS) {
            mapped_end = @max(mapped_end, sh.offset + sh.size);
        }
    }
    if (mapped_end > buf.len) return error.Malformed;

    var out: std.ArrayList(u8) = .empty;
    errdefer out.deinit(gpa);
    try out.appendSlice(gpa, buf[0..@intCast(mapped_end)]);
    var new_shdrs: std.ArrayList(Shdr) = .empty;
    defer new_shdrs.deinit(gpa);
    for (shdrs, new_index, 0..) |sh, n, i| {
        if (n == null) continue;
        var copy = sh;
        copy.link = if (sh.link < eh.shnum) new_index[sh.link] orelse 0 else sh.link;
        if ((sh.flags & SHF_INFO_LINK != 0 or sh.type == SHT_REL or sh.type == SHT_RELA) and
            sh.info < eh.shnum)
        {
            copy.info = new_index[sh.info] orelse 0;
        }
        if (i != 0 and sh.flags & SHF_ALLOC == 0) {
            const at = std.mem.alignForward(u64, out.items.len, @max(sh.addralign, 1));
            try out.appendNTimes(gpa, 0, @intCast(at - out.items.len));
            copy.offset = at;
            if (sh.type != SHT_NOBITS) {
                if (sh.offset + sh.size > buf.len) return error.Malformed;
                const content = buf[@intCast(sh.offset)..][0..@intCast(sh.size)];
                if (sh.type == SHT_SYMTAB) {
                    const dropped = try appendSymbols(gpa, &out, content, sh.info, new_index);
                    copy.size = sh.size - dropped.all * @sizeOf(Sym);
                    copy.info = sh.info - dropped.local;
                } else try out.appendSlice(gpa, content);
            }
        }
        try new_shdrs.append(gpa, copy);
    }
    const shoff = std.mem.alignForward(u64, out.items.len, 8);
    try out.appendNTimes(gpa, 0, @intCast(shoff - out.items.len));
    try out.appendSlice(gpa, std.mem.sliceAsBytes(new_shdrs.items));
    var new_eh = eh;
    new_eh.shoff = shoff;
    new_eh.shnum = kept;
    new_eh.shstrndx = new_index[eh.shstrndx] orelse return error.Malformed;
    store(Ehdr, out.items, 0, new_eh);
    return out.toOwnedSlice(gpa);
}

/// Appends symbol table `table` to `out`, its section indices pointing at
/// the renumbered sections, without the symbols of dropped sections (the
/// `$d` marks aarch64's DWARF sections carry), as `objcopy --strip-debug`
/// does; `first_global` is the table's sh_info. Returns how many went,
/// and how many of those were local (sh_info counts those).
fn appendSymbols(
    gpa: std.mem.Allocator,
    out: *std.ArrayList(u8),
    table: []const u8,
    first_global: u32,
    new_index: []const ?u16,
) Error!struct { all: u64, local: u32 } {
    if (table.len % @sizeOf(Sym) != 0 or first_global > table.len / @sizeOf(Sym)) {
        return error.Malformed;
    }
    var all: u64 = 0;
    var local: u32 = 0;
    for (0..table.len / @sizeOf(Sym)) |i| {
        var sym = try load(Sym, table, i * @sizeOf(Sym));
        if (sym.shndx != 0 and sym.shndx < SHN_LORESERVE) {
            if (sym.shndx >= new_index.len) return error.Malformed;
            if (new_index[sym.shndx]) |n| sym.shndx = n else {
                all += 1;
                if (i < first_global) local += 1;
                continue;
            }
        }
        try out.appendSlice(gpa, std.mem.asBytes(&sym));
    }
    return .{ .all = all, .local = local };
}

pub fn main(init: std.process.Init) !void {
    const io = init.io;
    const arena = init.arena.allocator();
    const args = try init.minimal.args.toSlice(arena);
    const usage = "usage: elf IN OUT [--strip-debug] [--debug-file PATH]";
    if (args.len < 3) std.process.fatal("{s}", .{usage});
    var strip = false;
    var debug_file: ?[]const u8 = null;
    var i: usize = 3;
    while (i < args.len) : (i += 1) {
        if (std.mem.eql(u8, args[i], "--strip-debug")) {
            strip = true;
        } else if (std.mem.eql(u8, args[i], "--debug-file") and i + 1 < args.len) {
            i += 1;
            debug_file = args[i];
        } else std.process.fatal("{s}", .{usage});
    }
    const cwd = std.Io.Dir.cwd();
    const buf = try cwd.readFileAlloc(io, args[1], arena, .unlimited);
    var out: []const u8 = buf;
    if (understood(buf)) {
        _ = alignCode(buf) catch |err| std.process.fatal("{s}: {t}", .{ args[1], err });
        if (strip) out = stripDebug(arena, buf) catch |err| {
            std.process.fatal("{s}: {t}", .{ args[1], err });
        };
    }
    const exe: std.Io.File.Permissions = .executable_file;
    try cwd.writeFile(io, .{ .sub_path = args[2], .data = out, .flags = .{ .permissions = exe } });
    if (debug_file) |path| {
        try cwd.writeFile(io, .{ .sub_path = path, .data = buf, .flags = .{ .permissions = exe } });
    }
}

// ---------------------------------------------------------------- tests

/// A small shared object as lld lays one out: a read-only segment, then the
/// code segment starting mid-page, then `.text`, `.debug_info`, `.symtab`
/// (symbols in `.debug_info`, in `.text`, and in a section after the
/// dropped one), `.strtab`, `.shstrtab`, `.data`.
fn sample(gpa: std.mem.Allocator) ![]u8 {
    const names = "\x00.text\x00.debug_info\x00.symtab\x00.strtab\x00.shstrtab\x00.data\x00";
    const buf = try gpa.alloc(u8, 0x3000);
    @memset(buf, 0);
    store(Ehdr, buf, 0, .{
        .ident = .{ 0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
        .type = 3,
        .machine = 62,
        .version = 1,
        .entry = 0,
        .phoff = 64,
        .shoff = 0x2000,
        .flags = 0,
        .ehsize = 64,
        .phentsize = @sizeOf(Phdr),
        .phnum = 2,
        .shentsize = @sizeOf(Shdr),
        .shnum = 7,
        .shstrndx = 5,
    });
    store(Phdr, buf, 64, loadSegment(4, 0, 0, 0x364));
    store(Phdr, buf, 64 + @sizeOf(Phdr), loadSegment(5, 0x364, 0x1364, 0x100));
    @memset(buf[0x364..0x464], 0xcc); // the code
    @memcpy(buf[0x500..0x510], "DWARF-DWARF-DWAR"); // .debug_info
    // Local: a mark in .debug_info (aarch64's `$d`), `run` in .text;
    // global: one in .data.
    const symbols = [_]Sym{
        std.mem.zeroes(Sym),
        .{ .name = 0, .info = 0, .other = 0, .shndx = 2, .value = 0, .size = 0 },
        .{ .name = 1, .info = 2, .other = 0, .shndx = 1, .value = 0x1364, .size = 0x100 },
        .{ .name = 1, .info = 0x11, .other = 0, .shndx = 6, .value = 0x2000, .size = 8 },
    };
    @memcpy(buf[0x600..][0..@sizeOf(@TypeOf(symbols))], std.mem.asBytes(&symbols));
    @memcpy(buf[0x700..0x705], "\x00run\x00");
    @memcpy(buf[0x800..][0..names.len], names);
    const sections = [_]Shdr{
        std.mem.zeroes(Shdr),
        section(1, 1, 6, 0x1364, 0x364, 0x100, 0, 16), // .text
        section(7, 1, 0, 0, 0x500, 0x10, 0, 1), // .debug_info
        section(19, SHT_SYMTAB, 0, 0, 0x600, @sizeOf(@TypeOf(symbols)), 4, 8), // .symtab
        section(27, 3, 0, 0, 0x700, 5, 0, 1), // .strtab
        section(35, 3, 0, 0, 0x800, names.len, 0, 1), // .shstrtab
        section(45, SHT_NOBITS, 3, 0x2000, 0x464, 8, 0, 8), // .data
    };
    var with_info = sections;
    with_info[3].info = 3; // the first global symbol
    with_info[3].entsize = @sizeOf(Sym);
    for (with_info, 0..) |sh, i| store(Shdr, buf, 0x2000 + i * @sizeOf(Shdr), sh);
    return buf;
}

fn loadSegment(flags: u32, offset: u64, vaddr: u64, size: u64) Phdr {
    return .{
        .type = PT_LOAD,
        .flags = flags,
        .offset = offset,
        .vaddr = vaddr,
        .paddr = vaddr,
        .filesz = size,
        .memsz = size,
        .@"align" = page_size,
    };
}

fn section(
    name: u32,
    kind: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    alignment: u64,
) Shdr {
    return .{
        .name = name,
        .type = kind,
        .flags = flags,
        .addr = addr,
        .offset = offset,
        .size = size,
        .link = link,
        .info = 0,
        .addralign = alignment,
        .entsize = 0,
    };
}

test "the code segment's header starts on its page, nothing mapped moves" {
    const buf = try sample(std.testing.allocator);
    defer std.testing.allocator.free(buf);
    try std.testing.expect(understood(buf));
    try std.testing.expectEqual(@as(usize, 1), try alignCode(buf));
    const code = try load(Phdr, buf, 64 + @sizeOf(Phdr));
    try std.testing.expectEqual(@as(u64, 0), code.offset);
    try std.testing.expectEqual(@as(u64, 0x1000), code.vaddr);
    try std.testing.expectEqual(@as(u64, 0x1464), code.vaddr + code.filesz); // the same end
    try std.testing.expectEqual(@as(usize, 0), try alignCode(buf)); // already aligned
    const rodata = try load(Phdr, buf, 64);
    try std.testing.expectEqual(@as(u64, 0x364), rodata.filesz);
}

test "a code segment whose page another segment uses is refused" {
    const buf = try sample(std.testing.allocator);
    defer std.testing.allocator.free(buf);
    var rodata = try load(Phdr, buf, 64);
    rodata.memsz = 0x1100; // its memory reaches into the code's first page
    store(Phdr, buf, 64, rodata);
    try std.testing.expectError(error.Overlap, alignCode(buf));
}

test "stripDebug drops DWARF, keeps the symbol table and every mapped byte" {
    const gpa = std.testing.allocator;
    const buf = try sample(gpa);
    defer gpa.free(buf);
    const out = try stripDebug(gpa, buf);
    defer gpa.free(out);
    try std.testing.expectEqualSlices(u8, buf[64..0x464], out[64..0x464]); // past the header
    try std.testing.expect(std.mem.indexOf(u8, out, "DWARF") == null);
    const eh = try load(Ehdr, out, 0);
    try std.testing.expectEqual(@as(u16, 6), eh.shnum);
    try std.testing.expectEqual(@as(u16, 4), eh.shstrndx);
    const names = try load(Shdr, out, eh.shoff + 4 * @sizeOf(Shdr));
    const symtab = try load(Shdr, out, eh.shoff + 2 * @sizeOf(Shdr));
    try std.testing.expectEqualStrings(".symtab", try sectionName(out, names, symtab));
    try std.testing.expectEqual(@as(u32, 3), symtab.link); // .strtab, renumbered
    try std.testing.expectEqual(@as(u64, 3 * @sizeOf(Sym)), symtab.size); // the mark went
    try std.testing.expectEqual(@as(u32, 2), symtab.info); // one local fewer
    const strtab = try load(Shdr, out, eh.shoff + 3 * @sizeOf(Shdr));
    try std.testing.expectEqualStrings("\x00run\x00", out[@intCast(strtab.offset)..][0..5]);
    const run = try load(Sym, out, symtab.offset + @sizeOf(Sym));
    try std.testing.expectEqual(@as(u16, 1), run.shndx);
    try std.testing.expectEqual(@as(u64, 0x1364), run.value);
    const data = try load(Sym, out, symtab.offset + 2 * @sizeOf(Sym));
    try std.testing.expectEqual(@as(u16, 5), data.shndx); // .data moved down one
}

test "a file that is not ELF64 little-endian is not understood" {
    var elf32: [64]u8 = @splat(0);
    @memcpy(elf32[0..6], "\x7fELF\x01\x01");
    try std.testing.expect(!understood(&elf32));
    try std.testing.expect(!understood("MZ"));
}
