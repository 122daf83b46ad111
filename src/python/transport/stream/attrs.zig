//! A stream transport's attributes: `get_extra_info`, and the attributes
//! asyncio's transports keep in their `__dict__` (`_extra`, `_sock`,
//! `_loop`, `_paused`...), native here. A served connection makes its
//! extra info and its socket object on first use (`Lazy`, `makeExtra`).
//! Also `_set_protocol`, `_set_context` and the finalizer's warning.
//!
//! The object, its plumbing and its public surface are transport/stream.zig's.
const py = @import("../../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const sockaddr = @import("../../sock/addr.zig");
const sockio = @import("../../sock/io.zig");
const transport = @import("../stream.zig");
const served = @import("serve.zig");
const server = @import("../connections.zig");
const write = @import("write.zig");
const Transport = transport.Transport;
const ReadMode = transport.ReadMode;
const names = &transport.names;
const innerOrRaise = transport.object.innerOrRaise;
const succeeded = transport.succeeded;
const updateInterest = transport.updateInterest;
const uncork = write.uncork;

// ------------------------------------------- made on first use (served)

/// What a served connection makes on first use rather than when accepted
/// (uvloop does the same): its `peername` and `sockname` as the kernel gave
/// them (a listener bound to one address shares its own `sockname`
/// object), its `socket.socket`, and the extra info made of them. A
/// connection that nobody asks makes none of these objects.
pub const Lazy = struct {
    peer: sockaddr.Lazy = .none,
    local: sockaddr.Lazy = .none,
    /// `socket.socket(family, type, proto, fileno)` arguments.
    family: u16 = 0,
    sock_type: i32 = 0,
    proto: i32 = 0,
    /// The fd is the transport's, with no socket object yet: `_sock` makes
    /// one, and connection_lost closes the fd itself.
    sock: bool = false,
    /// Entries of `extra` still to make.
    peername: bool = false,
    sockname: bool = false,
    socket: bool = false,

    fn pending(z: *const Lazy) bool {
        return z.peername or z.sockname or z.socket;
    }

    pub fn release(z: *Lazy) void {
        z.peer.release();
        z.local.release();
    }
};

/// The socket object, made now for a served connection (it then owns the
/// fd); null with an exception set.
fn socketObject(t: *Transport) ?*Obj {
    if (t.sock) |s| return py.newref(s);
    const in = t.inner orelse return py.newref(py.none());
    if (t.lost or !in.lazy.sock) return py.newref(py.none());
    const z = &in.lazy;
    const s = newSocket(z.family, z.sock_type, z.proto, in.w.fd) orelse return null;
    z.sock = false;
    t.sock = s;
    return py.newref(s);
}

/// `socket.socket(family, type, proto, fd)`; fd < 0: a socket of that
/// kind made and closed at once (what a lost connection's `socket` extra
/// shows on asyncio: `fd=-1`). Where `type` cannot carry SOCK_NONBLOCK
/// (`sys.sock_nonblock` is 0: macOS, the BSDs, the portable path),
/// `setblocking(False)` gives the socket object the timeout 0 the flag
/// gives it elsewhere (the fd itself is non-blocking already), as
/// transport/accept.zig's `wrapSocket` does.
fn newSocket(family: u16, sock_type: i32, proto: i32, fd: i32) ?*Obj {
    const cls = served.classes.?;
    const family_obj = c.PyLong_FromLong(family) orelse return null;
    defer py.decref(family_obj);
    const type_obj = c.PyLong_FromLong(sock_type) orelse return null;
    defer py.decref(type_obj);
    const proto_obj = c.PyLong_FromLong(proto) orelse return null;
    defer py.decref(proto_obj);
    if (fd < 0) {
        const s = py.call(cls.socket, .{ family_obj, type_obj, proto_obj }) orelse return null;
        if (succeeded(py.callMethod(s, names.close, .{}))) return s;
        py.decref(s);
        return null;
    }
    const fd_obj = c.PyLong_FromLong(fd) orelse return null;
    defer py.decref(fd_obj);
    const s = py.call(cls.socket, .{ family_obj, type_obj, proto_obj, fd_obj }) orelse return null;
    if (sockio.sys.sock_nonblock != 0) return s;
    if (succeeded(py.callMethod(s, names.setblocking, .{py.boolean(false)}))) return s;
    // The socket object owns the fd now: detached first, so that the fd
    // stays the transport's.
    if (!succeeded(py.callMethod(s, names.detach, .{}))) c.PyErr_WriteUnraisable(s);
    py.decref(s);
    return null;
}

/// The `extra` entries a served connection makes on first use.
const Entry = enum { peername, sockname, socket };

/// A lazy `extra` entry, made.
fn lazyEntry(t: *Transport, which: Entry) ?*Obj {
    const z = &t.inner.?.lazy;
    switch (which) {
        .peername => return z.peer.object(),
        .sockname => return z.local.object(),
        .socket => {
            const s = if (t.lost and t.sock == null)
                newSocket(z.family, z.sock_type, z.proto, -1)
            else
                socketObject(t);
            const sock = s orelse return null;
            defer py.decref(sock);
            return py.call(served.classes.?.transport_socket, .{sock});
        },
    }
}

/// Makes the lazy `extra` entries `name` asks for (all of them for a name
/// that is a str subclass), into `t.extra`; false with an exception set.
fn makeExtra(t: *Transport, name: ?*Obj) bool {
    const z = &(t.inner orelse return true).lazy;
    if (!z.pending()) return true;
    const all = name == null or (c.PyUnicode_Check(name.?) != 0 and c.PyUnicode_CheckExact(name.?) == 0);
    // In asyncio's order: the server's peername, then the transport's own.
    inline for (.{ "peername", "socket", "sockname" }) |key| {
        const key_obj = @field(names, key);
        const wanted = all or (name.? == key_obj or
            (c.PyUnicode_CheckExact(name.?) != 0 and c.PyUnicode_Compare(name.?, key_obj) == 0));
        if (wanted and @field(z, key)) {
            const value = lazyEntry(t, @field(Entry, key)) orelse return false;
            defer py.decref(value);
            if (t.extra == null) t.extra = c.PyDict_New() orelse return false;
            if (c.PyObject_SetItem(t.extra.?, key_obj, value) < 0) return false;
            @field(z, key) = false;
        }
    }
    return true;
}

// ------------------------------------------------ attributes of asyncio's

/// `get_extra_info(name, default=None)`: asyncio's `self._extra.get(name,
/// default)`, a served connection's entries made on first use. The
/// socket goes out after what earlier write() calls held back (see
/// `Cork`): whoever sends on it directly comes after them.
pub fn getExtraInfo(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    var a: [2]?*Obj = undefined;
    if (kwnames == null and nargs >= 1 and nargs <= 2) {
        a = .{ args[0], if (nargs == 2) args[1] else null };
    } else if (!py.bindArgs("get_extra_info", &.{ names.name, names.default }, 1, args, nargs, kwnames, &a)) {
        return null;
    }
    const name = a[0].?;
    const default = a[1] orelse py.none();
    if (name == names.socket or (c.PyUnicode_Check(name) != 0 and c.PyUnicode_Compare(name, names.socket) == 0)) {
        if (!uncork(t)) return null;
    }
    if (c.PyUnicode_Check(name) != 0 and !makeExtra(t, name)) return null;
    const extra = t.extra orelse {
        // An empty dict's get(): an unhashable name still raises.
        if (c.PyObject_Hash(name) == -1) return null;
        return py.newref(default);
    };
    if (c.PyDict_CheckExact(extra) != 0) {
        const v = c.PyDict_GetItemWithError(extra, name) orelse {
            if (c.PyErr_Occurred() != null) return null;
            return py.newref(default);
        };
        return py.newref(v);
    }
    return py.callMethod(extra, names.get, .{ name, default });
}

/// `_extra`: every entry made (see `Lazy`); the dict made if none is.
pub fn getExtra(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (!makeExtra(t, null)) return null;
    if (t.extra == null) t.extra = c.PyDict_New() orelse return null;
    return py.newref(t.extra.?);
}

pub fn setExtra(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const t = py.cast(Transport, self.?);
    const v = value orelse {
        _ = py.raise(c.PyExc_AttributeError, "cannot delete _extra");
        return -1;
    };
    const old = t.extra;
    t.extra = py.newref(v);
    py.xdecref(old);
    // Replaced: the entries not made yet are gone with the old dict.
    if (t.inner) |in| {
        in.lazy.peername = false;
        in.lazy.sockname = false;
        in.lazy.socket = false;
    }
    return 0;
}

/// `_sock`: the socket (made now for a served connection); None once the
/// connection is lost.
pub fn getSock(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return socketObject(py.cast(Transport, self.?));
}

pub fn setSock(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    return setOptional(&py.cast(Transport, self.?).sock, value);
}

/// A setter's `value` into `field`: None (or a delete) makes it null.
fn setOptional(field: *?*Obj, value: ?*Obj) c_int {
    const old = field.*;
    field.* = if (value == null or py.isNone(value)) null else py.newref(value.?);
    py.xdecref(old);
    return 0;
}

/// `_loop`: None once the connection is lost, as asyncio's.
pub fn getLoopAttr(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (t.lost) return py.newref(py.none());
    return py.newref(t.loop orelse py.none());
}

pub fn getSendfileFut(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.newref(py.cast(Transport, self.?).sendfile_fut orelse py.none());
}

pub fn setSendfileFut(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    return setOptional(&py.cast(Transport, self.?).sendfile_fut, value);
}

pub fn getProtocolConnected(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(py.cast(Transport, self.?).protocol_connected);
}

pub fn setProtocolConnected(self: ?*Obj, value: ?*Obj, _: ?*anyopaque) callconv(.c) c_int {
    const v = c.PyObject_IsTrue(value orelse py.none());
    if (v < 0) return -1;
    py.cast(Transport, self.?).protocol_connected = v == 1;
    return 0;
}

/// `_closed`: the connection is lost and the socket closed (what repr()
/// calls "closed", asyncio's `_sock is None`).
pub fn getClosed(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return py.boolean(t.lost or (t.sock == null and !(if (t.inner) |in| in.lazy.sock else false)));
}

/// As asyncio's transport `__del__`: a transport collected with its
/// socket open warns (ResourceWarning, through `_warn_unclosed`) and
/// closes it; from 3.13 it also counts itself out of its server, so that
/// `wait_closed()` returns. One collected while still in the reactor (its
/// reading over, nothing to write: the reactor held no reference) leaves
/// it first, before its fd closes.
pub fn finalize(self: ?*Obj) callconv(.c) void {
    const t = py.cast(Transport, self.?);
    if (t.inner) |in| transport.object.leaveReactor(t, in);
    const lazy_open = if (t.inner) |in| in.lazy.sock else false;
    if (t.lost or (t.sock == null and !lazy_open)) return;
    const saved = py.fetchException();
    const r = py.callMethod(self.?, names.warn_unclosed, .{});
    if (r) |o| py.decref(o) else c.PyErr_WriteUnraisable(self.?);
    if (py.at_least_313 and !server.detach(t)) c.PyErr_WriteUnraisable(self.?);
    if (saved) |e| py.restoreException(e);
}

/// `_set_context(ctx)`: the context every read-side callback runs in from
/// now on, whoever resumes reading (3.15's transports keep their own).
pub fn setContext(self: ?*Obj, ctx: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (c.Py_TYPE(ctx.?) != &c.PyContext_Type) return py.raise(c.PyExc_TypeError, "_set_context(contextvars.Context)");
    py.xdecref(in.context);
    in.context = py.newref(ctx.?);
    in.context_fixed = true;
    return py.newref(py.none());
}

/// `_read_polling`: the loop reads for the transport now (its repr's
/// `read=polling`, asyncio's reader registered): not before
/// connection_made, nor once paused, at EOF or closing.
pub fn getReadPolling(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.boolean(false);
    return py.boolean(in.attached and in.reading());
}

/// `_paused`: pause_reading() is in effect (the attribute asyncio's
/// selector transports carry, read by code that waits for a pause).
pub fn getPaused(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return py.boolean(if (py.cast(Transport, self.?).inner) |in| in.paused else false);
}

pub fn setProtocolNative(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (nargs != 2) return py.raise(c.PyExc_TypeError, "_set_protocol(protocol, reads)");
    const reads = ReadMode.parse(args[1].?) orelse return null;
    if (t.inner) |in| reads.apply(in);
    py.clear(&t.protocol);
    t.protocol = py.newref(args[0].?);
    updateInterest(t); // a buffered protocol reads the usual way
    return py.newref(py.none());
}
