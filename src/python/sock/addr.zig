//! Socket addresses between the kernel and Python: the objects CPython's
//! `socket` methods return (its `makesockaddr`: `(host, port)` for IPv4,
//! `(host, port, flowinfo, scope_id)` for IPv6, a `str` path, abstract
//! `bytes` or `''` for Unix), and `Raw`, an address kept as the kernel
//! wrote it until someone asks for it: a served connection's `peername`
//! and `sockname` are made into objects only when `get_extra_info` wants
//! them, as uvloop makes them.
const std = @import("std");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const sockio = @import("io.zig");
/// The address types as the OS layer's calls fill them in, and the
/// target's address families.
const sa_types = sockio.sys.sockaddr;
const AF = std.c.AF;

extern fn inet_ntop(af: c_int, src: *const anyopaque, dst: [*]u8, size: u32) ?[*:0]const u8;

/// The largest address `Raw` keeps: a `sockaddr_in6`. A Unix address
/// (up to 110 bytes) is made into its object at once instead.
const raw_max = @sizeOf(sa_types.in6);

/// An IPv4 or IPv6 address as the kernel wrote it.
pub const Raw = struct {
    bytes: [raw_max]u8 align(4) = undefined,
    len: u8 = 0,

    /// `storage[0..len]` when it is an IPv4 or IPv6 address, else null.
    pub fn of(storage: *const sa_types.storage, len: u32) ?Raw {
        const fits = switch (storage.family) {
            AF.INET => len >= @sizeOf(sa_types.in),
            AF.INET6 => len >= @sizeOf(sa_types.in6),
            else => false,
        };
        if (!fits) return null;
        var raw: Raw = .{ .len = @intCast(@min(len, raw_max)) };
        const src: [*]const u8 = @ptrCast(storage);
        @memcpy(raw.bytes[0..raw.len], src[0..raw.len]);
        return raw;
    }

    /// The address's Python object (a new reference), or null with an
    /// exception set.
    pub fn object(raw: *const Raw) ?*Obj {
        var storage: sa_types.storage = undefined;
        const dst: [*]u8 = @ptrCast(&storage);
        @memcpy(dst[0..raw.len], raw.bytes[0..raw.len]);
        return fromStorage(&storage, raw.len);
    }
};

/// The address `storage[0..len]` as CPython's `makesockaddr` returns it.
pub fn fromStorage(storage: *const sa_types.storage, len_in: u32) ?*Obj {
    const len = @min(len_in, @sizeOf(sa_types.storage));
    // No address at all: makesockaddr gives None.
    if (len == 0) return py.newref(py.none());
    switch (storage.family) {
        AF.INET => {
            const sa: *const sa_types.in = @ptrCast(storage);
            return inet4(sa);
        },
        AF.INET6 => {
            const sa: *const sa_types.in6 = @ptrCast(storage);
            var host: [64]u8 = undefined;
            const text = inet_ntop(AF.INET6, &sa.addr, &host, host.len) orelse unreachable;
            const port: c_int = std.mem.bigToNative(u16, sa.port);
            const flow: c_uint = std.mem.bigToNative(u32, sa.flowinfo);
            const scope: c_uint = sa.scope_id;
            return c.Py_BuildValue("(siII)", text, port, flow, scope);
        },
        AF.UNIX => return unix(storage, len),
        // zloop serves only the three families above natively.
        else => return py.raise(c.PyExc_OSError, "unsupported address family"),
    }
}

/// `(host, port)`, the host written as inet_ntop would (dotted decimal),
/// without its printf machinery (half the cost of a connection's names).
fn inet4(sa: *const sa_types.in) ?*Obj {
    var text: [15]u8 = undefined;
    const host = dotted(std.mem.asBytes(&sa.addr), &text);
    const port: c_long = std.mem.bigToNative(u16, sa.port);
    const tuple = c.PyTuple_New(2) orelse return null;
    const host_obj = c.PyUnicode_DecodeASCII(host.ptr, @intCast(host.len), null) orelse {
        py.decref(tuple);
        return null;
    };
    _ = c.PyTuple_SetItem(tuple, 0, host_obj);
    const port_obj = c.PyLong_FromLong(port) orelse {
        py.decref(tuple);
        return null;
    };
    _ = c.PyTuple_SetItem(tuple, 1, port_obj);
    return tuple;
}

/// Four octets as `a.b.c.d` into `out`.
fn dotted(octets: *const [4]u8, out: *[15]u8) []const u8 {
    var n: usize = 0;
    for (octets, 0..) |o, i| {
        if (i > 0) {
            out[n] = '.';
            n += 1;
        }
        if (o >= 100) {
            out[n] = '0' + o / 100;
            n += 1;
        }
        if (o >= 10) {
            out[n] = '0' + (o / 10) % 10;
            n += 1;
        }
        out[n] = '0' + o % 10;
        n += 1;
    }
    return out[0..n];
}

fn unix(storage: *const sa_types.storage, len: u32) ?*Obj {
    const sa: *const sa_types.un = @ptrCast(storage);
    const path_offset = @offsetOf(sa_types.un, "path");
    const n: usize = @min(len -| path_offset, sa.path.len);
    // The target's rule (`sys.addrs.unixName`): Linux's abstract names
    // (a leading NUL) are bytes; a path, or an unnamed socket's '' (on
    // macOS and FreeBSD 14 zero bytes, on Linux none), is a str.
    return switch (sockio.sys.addrs.unixName(sa.path[0..n])) {
        .abstract => |name| c.PyBytes_FromStringAndSize(name.ptr, @intCast(name.len)),
        .path => |path| c.PyUnicode_DecodeFSDefaultAndSize(path.ptr, @intCast(path.len)),
    };
}

/// An address to keep: raw for IPv4 and IPv6, made now for Unix.
pub const Lazy = union(enum) {
    none,
    raw: Raw,
    made: *Obj,

    pub fn of(storage: *const sa_types.storage, len: u32) ?Lazy {
        if (Raw.of(storage, len)) |raw| return .{ .raw = raw };
        return .{ .made = fromStorage(storage, len) orelse return null };
    }

    /// The Python object (a new reference); null with an exception set.
    pub fn object(lazy: *const Lazy) ?*Obj {
        return switch (lazy.*) {
            .none => py.newref(py.none()),
            .raw => |*raw| raw.object(),
            .made => |o| py.newref(o),
        };
    }

    /// Lets go of a made object.
    pub fn release(lazy: *Lazy) void {
        if (lazy.* == .made) py.decref(lazy.made);
        lazy.* = .none;
    }
};

/// True when a listener bound to this address accepts connections whose
/// own address is the same (a specific IPv4 or IPv6 address, not link-local
/// with a scope, or any Unix name): their `sockname` can be the
/// listener's, without a `getsockname` per connection.
pub fn sharedByAccepted(storage: *const sa_types.storage, len: u32) bool {
    switch (storage.family) {
        AF.INET => {
            if (len < @sizeOf(sa_types.in)) return false;
            const sa: *const sa_types.in = @ptrCast(storage);
            return sa.addr != 0; // INADDR_ANY
        },
        AF.INET6 => {
            if (len < @sizeOf(sa_types.in6)) return false;
            const sa: *const sa_types.in6 = @ptrCast(storage);
            const any = std.mem.allEqual(u8, &sa.addr, 0);
            const mapped_any = std.mem.allEqual(u8, sa.addr[0..10], 0) and
                sa.addr[10] == 0xff and sa.addr[11] == 0xff and
                std.mem.allEqual(u8, sa.addr[12..16], 0);
            return !any and !mapped_any and sa.scope_id == 0;
        },
        AF.UNIX => return true,
        else => return false,
    }
}
