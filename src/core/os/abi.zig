//! The build-time proof that every OS constant and layout zloop uses is the
//! target's: each is compared, at compile time, with what the target's own
//! C headers say (`abi.h`, translated by `zig build` for that target; Zig
//! ships the headers of glibc, musl, macOS and FreeBSD). A difference is a
//! compile error naming every constant that differs, so `zig build
//! check-kqueue` fails for macOS or FreeBSD on a Linux machine, before any
//! Mac or BSD runs the code.
//!
//! Checked: the constants zloop writes itself (`addr.ni_numerichost`,
//! macOS's FIONREAD) and every constant of the namespaces of Zig's std it
//! takes its numbers from (errno, AF_, SOCK_, SOL_, SO_, MSG_, IPPROTO_,
//! TCP_, F_, O_, SHUT_, NI_, AT_, kqueue's EV_, EVFILT_, NOTE_; Linux's
//! EPOLL, EFD_, W, POLL), each compared where the header defines the same
//! name; and the layout (size, each field's offset) of the structures it
//! hands the kernel. Only compiled in the core's tests, which the build
//! gives the translated headers as the module `os_headers`.
const std = @import("std");
const builtin = @import("builtin");
const h = @import("os_headers");
const addr = @import("addr.zig");
const common = @import("common.zig");
const sys = @import("../sys.zig");

const c = std.c;
const linux = std.os.linux;
const is_linux = builtin.os.tag == .linux;

/// The OS layer's per-target file, for the constants it writes itself.
const target_calls = switch (builtin.os.tag) {
    .macos, .ios, .tvos, .watchos, .visionos => @import("darwin.zig"),
    .freebsd => @import("freebsd.zig"),
    else => @import("linux_libc.zig"),
};

/// One constant: zloop's value and the header's name for it.
const One = struct { name: []const u8, value: i128 };

/// The constants zloop writes itself, or takes from a place no namespace
/// sweep below covers.
fn own() []const One {
    var list: []const One = &.{
        .{ .name = "NI_NUMERICHOST", .value = addr.ni_numerichost },
        .{ .name = "zloop_FIONREAD", .value = target_calls.fionread },
        .{ .name = "FD_CLOEXEC", .value = c.FD_CLOEXEC },
        .{ .name = "IOV_MAX", .value = sys.iov_max },
        .{ .name = "AT_FDCWD", .value = c.AT.FDCWD },
    };
    if (is_linux) list = list ++ &[_]One{
        .{ .name = "zloop_FIONREAD", .value = linux.T.FIONREAD },
        .{ .name = "zloop_TIOCOUTQ", .value = linux.T.IOCOUTQ },
        .{ .name = "IOV_MAX", .value = linux.IOV_MAX },
    };
    return list;
}

/// A namespace of Zig's std and the prefix its names carry in C, with what
/// joins the two: `_` (AF_INET), nothing (POLLIN, WNOHANG), or the first
/// of both that the header defines (EPOLL_CTL_ADD but EPOLLIN).
const Sweep = struct { prefix: []const u8, ns: type, joins: []const []const u8 = &.{"_"} };

fn sweeps() []const Sweep {
    var list: []const Sweep = &.{
        .{ .prefix = "E", .ns = common.E, .joins = &.{""} },
        .{ .prefix = "AF", .ns = c.AF },
        .{ .prefix = "SOCK", .ns = c.SOCK },
        .{ .prefix = "SOL", .ns = c.SOL },
        .{ .prefix = "SO", .ns = c.SO },
        .{ .prefix = "MSG", .ns = c.MSG },
        .{ .prefix = "IPPROTO", .ns = c.IPPROTO },
        .{ .prefix = "TCP", .ns = c.TCP },
        .{ .prefix = "F", .ns = c.F },
        .{ .prefix = "O", .ns = c.O },
        .{ .prefix = "SHUT", .ns = c.SHUT },
        .{ .prefix = "NI", .ns = c.NI },
        .{ .prefix = "SIG", .ns = c.SIG, .joins = &.{""} },
    };
    if (is_linux) {
        // The default build's raw syscalls take Linux's own numbers.
        list = list ++ &[_]Sweep{
            .{ .prefix = "E", .ns = linux.E, .joins = &.{""} },
            .{ .prefix = "AF", .ns = linux.AF },
            .{ .prefix = "SOCK", .ns = linux.SOCK },
            .{ .prefix = "SOL", .ns = linux.SOL },
            .{ .prefix = "SO", .ns = linux.SO },
            .{ .prefix = "MSG", .ns = linux.MSG },
            .{ .prefix = "IPPROTO", .ns = linux.IPPROTO },
            .{ .prefix = "TCP", .ns = linux.TCP },
            .{ .prefix = "F", .ns = linux.F },
            .{ .prefix = "SHUT", .ns = linux.SHUT },
            .{ .prefix = "AT", .ns = linux.AT },
            .{ .prefix = "EPOLL", .ns = linux.EPOLL, .joins = &.{ "_", "" } },
            .{ .prefix = "EFD", .ns = linux.EFD },
            .{ .prefix = "W", .ns = linux.W, .joins = &.{""} },
            .{ .prefix = "POLL", .ns = linux.POLL, .joins = &.{""} },
        };
    } else {
        list = list ++ &[_]Sweep{
            .{ .prefix = "EV", .ns = c.EV },
            .{ .prefix = "EVFILT", .ns = c.EVFILT },
            .{ .prefix = "NOTE", .ns = c.NOTE },
        };
    }
    return list;
}

/// A structure handed to the kernel, its C twin, and the fields compared:
/// Zig's names, which C spells with a prefix (`sin_port`).
const Layout = struct {
    zig: type,
    c_name: []const u8,
    c_prefix: []const u8,
    fields: []const []const u8,
};

fn layouts() []const Layout {
    const sa = if (is_linux) linux.sockaddr else c.sockaddr;
    const msghdr_fields = &.{
        "name", "namelen", "iov", "iovlen", "control", "controllen", "flags",
    };
    var list: []const Layout = &.{
        .{
            .zig = sa.in,
            .c_name = "struct_sockaddr_in",
            .c_prefix = "sin_",
            .fields = &.{ "family", "port", "addr" },
        },
        .{
            .zig = sa.in6,
            .c_name = "struct_sockaddr_in6",
            .c_prefix = "sin6_",
            .fields = &.{ "family", "port", "flowinfo", "addr", "scope_id" },
        },
        .{
            .zig = sa.un,
            .c_name = "struct_sockaddr_un",
            .c_prefix = "sun_",
            .fields = &.{ "family", "path" },
        },
        .{
            .zig = sa.storage,
            .c_name = "struct_sockaddr_storage",
            .c_prefix = "ss_",
            .fields = &.{"family"},
        },
        .{
            .zig = c.msghdr_const,
            .c_name = "struct_msghdr",
            .c_prefix = "msg_",
            .fields = msghdr_fields,
        },
        .{
            .zig = std.posix.iovec_const,
            .c_name = "struct_iovec",
            .c_prefix = "iov_",
            .fields = &.{ "base", "len" },
        },
        .{
            .zig = c.timespec,
            .c_name = "struct_timespec",
            .c_prefix = "tv_",
            .fields = &.{ "sec", "nsec" },
        },
    };
    if (is_linux) list = list ++ &[_]Layout{
        .{
            .zig = linux.msghdr_const,
            .c_name = "struct_msghdr",
            .c_prefix = "msg_",
            .fields = msghdr_fields,
        },
        .{
            .zig = linux.epoll_event,
            .c_name = "struct_epoll_event",
            .c_prefix = "",
            .fields = &.{ "events", "data" },
        },
    } else list = list ++ &[_]Layout{
        .{
            .zig = c.Stat,
            .c_name = "struct_stat",
            .c_prefix = "st_",
            .fields = &.{ "mode", "ino" },
        },
        .{
            .zig = c.Kevent,
            .c_name = "struct_kevent",
            .c_prefix = "",
            .fields = &.{ "ident", "filter", "flags", "fflags", "data", "udata" },
        },
    };
    return list;
}

/// `v` as an integer, or null for what is no number (a type, a function,
/// a pointer such as SIG_IGN).
fn intOf(v: anytype) ?i128 {
    return switch (@typeInfo(@TypeOf(v))) {
        .int, .comptime_int => v,
        .@"enum" => @backingInt(v),
        else => null,
    };
}

/// Every difference between `sweep`'s namespace and the header's names
/// of the same prefix, one line each.
fn sweepDiffs(comptime sweep: Sweep) []const u8 {
    var out: []const u8 = "";
    switch (@typeInfo(sweep.ns)) {
        .@"enum" => |e| for (e.field_names, e.field_values) |name, value| {
            out = out ++ compare(cName(sweep, name), value, sweep.prefix ++ "." ++ name);
        },
        .@"struct" => |s| if (s.layout == .@"packed") {
            // A packed struct of flags (O, NI): each named bool is a bit.
            var bit: u16 = 0;
            for (s.field_names, s.field_types) |name, T| {
                if (T == bool) {
                    const value = @as(i128, 1) << bit;
                    out = out ++ compare(cName(sweep, name), value, sweep.prefix ++ "." ++ name);
                }
                bit += @bitSizeOf(T);
            }
        } else for (s.decl_names) |name| {
            const value = intOf(@field(sweep.ns, name)) orelse continue;
            out = out ++ compare(cName(sweep, name), value, sweep.prefix ++ "." ++ name);
        },
        else => @compileError("abi: no sweep of " ++ @typeName(sweep.ns)),
    }
    return out;
}

/// The C name of `sweep`'s `name`: the first join the header defines.
fn cName(comptime sweep: Sweep, comptime name: []const u8) []const u8 {
    for (sweep.joins) |join| {
        if (@hasDecl(h, sweep.prefix ++ join ++ name)) return sweep.prefix ++ join ++ name;
    }
    return sweep.prefix ++ sweep.joins[0] ++ name;
}

/// Names of Zig's std that are not compared, on `os` or everywhere: zloop
/// uses none of them there, and std's number is not the header's.
const not_compared = [_]struct { name: []const u8, os: ?std.Target.Os.Tag = null }{
    // Counts that grow with each release.
    .{ .name = "AF_MAX" },
    .{ .name = "EVFILT_SYSCOUNT" },
    .{ .name = "IPPROTO_MAX" },
    // Flags C composes of two bits, which std's packed struct names by one.
    .{ .name = "O_SYNC", .os = .linux },
    .{ .name = "O_TMPFILE", .os = .linux },
    // glibc defines it as 0 on 64-bit targets (the kernel implies it); std
    // gives the kernel's bit.
    .{ .name = "O_LARGEFILE", .os = .linux },
    // Mistakes in std: F_SETOWN is 8 and F_GETOWN 9 (std swaps them);
    // NOTE_PCTRLMASK is ~0x000fffff; user space's EOPNOTSUPP is 102 (std
    // gives 45, which is ENOTSUP). zloop names OPNOTSUPP only on Linux.
    .{ .name = "F_SETOWN", .os = .linux },
    .{ .name = "F_GETOWN", .os = .linux },
    .{ .name = "NOTE_PCTRLMASK", .os = .macos },
    .{ .name = "EOPNOTSUPP", .os = .macos },
};

fn isCompared(c_name: []const u8) bool {
    for (not_compared) |skip| {
        const here = skip.os == null or skip.os.? == builtin.os.tag;
        if (here and std.mem.eql(u8, skip.name, c_name)) return false;
    }
    return true;
}

/// A line when the header defines `c_name` as a number other than `value`.
fn compare(comptime c_name: []const u8, comptime value: i128, comptime zig: []const u8) []const u8 {
    if (!@hasDecl(h, c_name)) return "";
    if (!isCompared(c_name)) return "";
    const theirs = intOf(@field(h, c_name)) orelse return "";
    if (sameBits(value, theirs)) return "";
    const line = "  {s}: zloop has {d}, the header's {s} is {d}\n";
    return std.fmt.comptimePrint(line, .{ zig, value, c_name, theirs });
}

/// Equal numbers, or the same 32 bits: a flag a header writes 0x80000000
/// in an `int` is the bit Zig writes in a `u32`, and EVFILT_READ's -1 in
/// an `i16` the same as the header's `(-1)`.
fn sameBits(a: i128, b: i128) bool {
    if (a == b) return true;
    if (!fits32(a) or !fits32(b)) return false;
    return low32(a) == low32(b);
}

fn low32(x: i128) u32 {
    return @truncate(@as(u128, @bitCast(x)));
}

fn fits32(x: i128) bool {
    return x >= -(1 << 31) and x < (1 << 32);
}

fn layoutDiffs(comptime l: Layout) []const u8 {
    const C = @field(h, l.c_name);
    var out: []const u8 = "";
    if (@sizeOf(l.zig) != @sizeOf(C)) {
        const line = "  {s}: {d} bytes, the header's {s} {d}\n";
        const sizes = .{ @typeName(l.zig), @sizeOf(l.zig), l.c_name, @sizeOf(C) };
        out = out ++ std.fmt.comptimePrint(line, sizes);
    }
    var fields = l.fields;
    // A BSD's socket addresses start with a length byte (sin_len).
    if (@hasField(l.zig, "len") and @hasField(C, l.c_prefix ++ "len")) {
        if (!std.mem.eql(u8, l.c_prefix, "iov_")) fields = fields ++ &[_][]const u8{"len"};
    }
    for (fields) |name| {
        const c_field = l.c_prefix ++ name;
        const ours = .{ @offsetOf(l.zig, name), @sizeOf(@FieldType(l.zig, name)) };
        const theirs = .{ @offsetOf(C, c_field), @sizeOf(@FieldType(C, c_field)) };
        if (ours[0] != theirs[0] or ours[1] != theirs[1]) {
            const line = "  {s}.{s}: offset {d} size {d}, " ++
                "the header's {s}.{s}: offset {d} size {d}\n";
            out = out ++ std.fmt.comptimePrint(line, .{
                @typeName(l.zig), name, ours[0], ours[1], l.c_name, c_field, theirs[0], theirs[1],
            });
        }
    }
    return out;
}

comptime {
    @setEvalBranchQuota(200_000);
    var diffs: []const u8 = "";
    for (own()) |o| diffs = diffs ++ compare(o.name, o.value, o.name);
    for (sweeps()) |s| diffs = diffs ++ sweepDiffs(s);
    for (layouts()) |l| diffs = diffs ++ layoutDiffs(l);
    if (diffs.len > 0) {
        @compileError("OS constants or layouts that differ from " ++ @tagName(builtin.os.tag) ++
            "'s headers (" ++ @tagName(builtin.cpu.arch) ++ "):\n" ++ diffs);
    }
}

test "the OS constants were checked against the target's headers" {
    // The check is the comptime block above; this names it in the test
    // list, and proves the header module is the target's.
    try std.testing.expectEqual(@as(c_int, @backingInt(common.E.AGAIN)), h.EAGAIN);
}
