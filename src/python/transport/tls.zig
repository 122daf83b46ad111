//! The TLS record path: a wrapped TLS connection's steady state in native
//! code. asyncio's state machine (`zloop._tls._SSLProtocol`, a subclass of
//! `asyncio.sslproto.SSLProtocol`) keeps the handshake, the shutdown, the
//! timeouts, flow control's decisions and every error; what runs here is
//! what it does for each record while it is WRAPPED:
//!
//! - `received`: ciphertext the transport read goes into the connection's
//!   incoming BIO, its plaintext to the application's `data_received()`,
//!   and what the read made the TLS object want to send goes out (the
//!   steps of `_SSLProtocol.buffer_updated()`, without its frames);
//! - `write` (`_SSLProtocolTransport.write`): the application's bytes
//!   through `SSL_write` into the outgoing BIO, and from it to the socket
//!   transport.
//!
//! Both call OpenSSL on the very `SSL` and `BIO` objects that the
//! connection's `ssl.SSLObject` and `ssl.MemoryBIO`s own, through the
//! functions of the OpenSSL that CPython's `_ssl` module loaded (their
//! addresses found by `zloop._tls` with ctypes: no link dependency). Those
//! must be that very OpenSSL, never a second one some other library
//! loaded: where `_ssl` is built into the interpreter, the lookup searches
//! the whole process. Setup refuses functions of another version (their
//! `OpenSSL_version_num()` against `ssl.OPENSSL_VERSION_NUMBER`, asked
//! before any of them touches `_ssl`'s objects) or of another copy of the
//! same version (the live `SSL`'s method table must be the one their
//! `TLS_client_method()` returns). Where those checks, or `_ssl`'s layout
//! on a live connection (`setup`), fail, or the connection is not in its
//! plain steady state, each step takes the Python path, with the same
//! results: anything other than a plain record (a close_notify, an error, a
//! read that wants to write, a paused side) is left for the state machine
//! to meet where asyncio's would.
const std = @import("std");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;

const Ssl = opaque {};
const Bio = opaque {};

/// The OpenSSL functions the record path calls, and those setup asks which
/// OpenSSL they are; present in 1.1.1 and 3.x.
const Fns = struct {
    OpenSSL_version_num: *const fn () callconv(.c) c_ulong,
    TLS_client_method: *const fn () callconv(.c) ?*const anyopaque,
    SSL_get_ssl_method: *const fn (*const Ssl) callconv(.c) ?*const anyopaque,
    SSL_read: *const fn (*Ssl, [*]u8, c_int) callconv(.c) c_int,
    SSL_write: *const fn (*Ssl, [*]const u8, c_int) callconv(.c) c_int,
    SSL_get_error: *const fn (*const Ssl, c_int) callconv(.c) c_int,
    SSL_pending: *const fn (*const Ssl) callconv(.c) c_int,
    SSL_get_rbio: *const fn (*const Ssl) callconv(.c) ?*Bio,
    SSL_get_wbio: *const fn (*const Ssl) callconv(.c) ?*Bio,
    SSL_get_ex_data: *const fn (*const Ssl, c_int) callconv(.c) ?*anyopaque,
    BIO_write: *const fn (*Bio, [*]const u8, c_int) callconv(.c) c_int,
    BIO_read: *const fn (*Bio, [*]u8, c_int) callconv(.c) c_int,
    BIO_ctrl_pending: *const fn (*Bio) callconv(.c) usize,
};

const SSL_ERROR_WANT_READ = 2;
const SSL_ERROR_SYSCALL = 5;
const SSL_ERROR_ZERO_RETURN = 6;

/// What `setup` confirmed, for the life of the process.
const Setup = struct {
    fns: Fns,
    /// `_ssl._SSLSocket` and `_ssl.MemoryBIO`: the record path runs only
    /// on objects of exactly these types.
    tls_type: *Obj,
    bio_type: *Obj,
    /// `SSLProtocolState.WRAPPED`.
    wrapped: *Obj,
};

var ready: ?Setup = null;

/// Where CPython's `_ssl` keeps the pointers (Modules/_ssl.c, 3.11-3.15):
/// `PySSLSocket { PyObject_HEAD; PyObject *Socket; SSL *ssl; ... }` and
/// `PySSLMemoryBIO { PyObject_HEAD; BIO *bio; int eof_written; }`.
const ssl_offset = @sizeOf(c.PyObject) + @sizeOf(*anyopaque);
const bio_offset = @sizeOf(c.PyObject);
const eof_offset = bio_offset + @sizeOf(*anyopaque);

fn field(comptime T: type, o: *Obj, offset: usize) T {
    const base: [*]const u8 = @ptrCast(o);
    return @as(*align(1) const T, @ptrCast(base + offset)).*;
}

fn sslOf(tls_object: *Obj) *Ssl {
    return field(*Ssl, tls_object, ssl_offset);
}

fn bioOf(bio: *Obj) *Bio {
    return field(*Bio, bio, bio_offset);
}

/// The TLS protocol's attributes the record path reads on each record,
/// kept in the object itself: `zloop._tls._SSLProtocol` derives from
/// `_zloop.TLSProtocolState` as well as from asyncio's `SSLProtocol`, whose
/// code reads and writes them as before (member descriptors, which the
/// interpreter specializes as it does `__slots__`), while the record path
/// reads them at fixed offsets instead of through attribute lookups (about
/// 18 a round trip, 4 k instructions of a 1 KiB echo record's 35 k).
pub const ProtoState = extern struct {
    ob_base: c.PyObject,
    fields: [field_names.len]?*Obj,
    /// The application kept a plaintext it was given (`Plain`).
    keeps_data: bool,

    fn get(st: *const ProtoState, comptime f: Field) ?*Obj {
        return st.fields[@backingInt(f)];
    }

    fn isTrue(st: *const ProtoState, comptime f: Field) bool {
        return st.get(f) == c.Py_True();
    }
};

const Field = enum {
    state,
    app_reading_paused,
    app_protocol_is_buffer,
    app_protocol,
    write_backlog,
    app_writing_paused,
    write_buffer_size,
    outgoing_high_water,
    incoming_high_water,
    ssl_reading_paused,
    ssl_writing_paused,
    transport,
    records,
};

const field_names = blk: {
    const tags = std.meta.fieldNames(Field);
    var out: [tags.len][:0]const u8 = undefined;
    for (tags, 0..) |tag, i| out[i] = "_" ++ tag;
    break :blk out;
};

/// CPython's `PyMemberDef` (structmember.h before 3.12, descrobject.h
/// after), with `Py_T_OBJECT_EX` (16): an object, AttributeError when unset.
const MemberDef = extern struct {
    name: ?[*:0]const u8,
    type: c_int,
    offset: py.Ssize,
    flags: c_int,
    doc: ?[*:0]const u8,
};
const T_OBJECT_EX = 16;

var members: [field_names.len + 1]MemberDef = blk: {
    var out: [field_names.len + 1]MemberDef = undefined;
    for (field_names, 0..) |name, i| out[i] = .{
        .name = name,
        .type = T_OBJECT_EX,
        .offset = @offsetOf(ProtoState, "fields") + i * @sizeOf(?*Obj),
        .flags = 0,
        .doc = null,
    };
    out[field_names.len] = std.mem.zeroes(MemberDef);
    break :blk out;
};

var StateType: c.PyTypeObject = undefined;

fn stateTraverse(self: ?*Obj, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const st = py.cast(ProtoState, self.?);
    for (st.fields) |f| {
        if (f) |o| {
            const r = visit.?(o, arg);
            if (r != 0) return r;
        }
    }
    return 0;
}

fn stateClear(self: ?*Obj) callconv(.c) c_int {
    const st = py.cast(ProtoState, self.?);
    for (&st.fields) |*f| py.clear(f);
    return 0;
}

fn stateDealloc(self: ?*Obj) callconv(.c) void {
    c.PyObject_GC_UnTrack(self);
    _ = stateClear(self);
    c.Py_TYPE(self).*.tp_free.?(self);
}

fn stateOf(proto: *Obj) ?*ProtoState {
    if (c.PyObject_TypeCheck(proto, &StateType) == 0) return null;
    return py.cast(ProtoState, proto);
}

/// `_tls_setup(functions, tls_object, incoming, outgoing, wrapped, version)`:
/// takes OpenSSL's functions (a dict of name to address) and confirms that
/// they are those of the OpenSSL `_ssl` uses, and, on a live
/// `_ssl._SSLSocket` made with `PROTOCOL_TLS_CLIENT` and its two
/// `MemoryBIO`s, that the pointers sit where the record path reads them:
/// the functions' `OpenSSL_version_num()` must be `version`
/// (`ssl.OPENSSL_VERSION_NUMBER`), the `SSL` must name the socket object as
/// its application data and the two BIOs as its own, and its method table
/// must be the functions' `TLS_client_method()`. Returns None when the
/// record path is on, else a string saying why it is off.
pub fn setupFn(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (nargs != 6) return py.raise(c.PyExc_TypeError, "_tls_setup(functions, tls_object, incoming, outgoing, wrapped, version)");
    const table = args[0].?;
    const tls_object = args[1].?;
    const incoming = args[2].?;
    const outgoing = args[3].?;
    if (c.PyDict_Check(table) == 0) return py.raise(c.PyExc_TypeError, "functions must be a dict");
    if (comptime @hasDecl(c, "Py_GIL_DISABLED")) return reason("a free-threaded interpreter (its _ssl locks each call)");
    var fns: Fns = undefined;
    inline for (comptime std.meta.fieldNames(Fns)) |name| {
        const missing = "OpenSSL function " ++ name ++ " not found";
        const item = c.PyDict_GetItemString(table, name) orelse return reason(missing);
        const address = c.PyLong_AsVoidPtr(item) orelse {
            if (c.PyErr_Occurred() != null) return null;
            return reason(missing);
        };
        @field(fns, name) = @ptrCast(@alignCast(address));
    }
    // Another OpenSSL's functions may read `_ssl`'s objects at other
    // offsets: its version is asked before any of them is given one.
    const version = c.PyLong_AsUnsignedLongLong(args[5].?);
    if (version == std.math.maxInt(c_ulonglong) and c.PyErr_Occurred() != null) return null;
    if (fns.OpenSSL_version_num() != version) {
        return reason("the OpenSSL found is not the one _ssl uses (another version)");
    }
    const tls_type = c.Py_TYPE(tls_object);
    const bio_type = c.Py_TYPE(incoming);
    if (c.Py_TYPE(outgoing) != bio_type) return reason("the two BIOs differ in type");
    if (tls_type.*.tp_basicsize < ssl_offset + @sizeOf(*anyopaque) or
        bio_type.*.tp_basicsize < eof_offset + @sizeOf(c_int))
    {
        return reason("_ssl's objects are smaller than the layout read");
    }
    const ssl_address = field(usize, tls_object, ssl_offset);
    const in_address = field(usize, incoming, bio_offset);
    const out_address = field(usize, outgoing, bio_offset);
    for ([_]usize{ ssl_address, in_address, out_address }) |a| {
        if (a < 4096 or a % @alignOf(*anyopaque) != 0) return reason("_ssl's layout is not the one known");
    }
    const ssl: *Ssl = @ptrFromInt(ssl_address);
    if (fns.SSL_get_ex_data(ssl, 0) != @as(*anyopaque, @ptrCast(tls_object)) or
        fns.SSL_get_rbio(ssl) != @as(*Bio, @ptrFromInt(in_address)) or
        fns.SSL_get_wbio(ssl) != @as(*Bio, @ptrFromInt(out_address)))
    {
        return reason("_ssl's layout is not the one known");
    }
    // A second copy of the same version passes all of the above; the
    // method table the `SSL` was made with is a static of the copy that
    // made it.
    if (fns.SSL_get_ssl_method(ssl) != fns.TLS_client_method()) {
        return reason("the OpenSSL found is not the one _ssl uses (another copy)");
    }
    if (ready) |old| {
        py.decref(old.tls_type);
        py.decref(old.bio_type);
        py.decref(old.wrapped);
    }
    ready = .{
        .fns = fns,
        .tls_type = py.newref(py.obj(tls_type)),
        .bio_type = py.newref(py.obj(bio_type)),
        .wrapped = py.newref(args[4].?),
    };
    return py.newref(py.none());
}

fn reason(comptime text: [:0]const u8) ?*Obj {
    return c.PyUnicode_FromString(text);
}

/// `_tls_records(tls_object, incoming, outgoing)`: what `_SSLProtocol`
/// keeps as `_records` for the record path, or None where it does not run
/// (not set up, or objects of other types: a context's own
/// `sslobject_class`).
pub fn recordsFn(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (nargs != 3) return py.raise(c.PyExc_TypeError, "_tls_records(tls_object, incoming, outgoing)");
    const s = ready orelse return py.newref(py.none());
    if (py.obj(c.Py_TYPE(args[0].?)) != s.tls_type or py.obj(c.Py_TYPE(args[1].?)) != s.bio_type or
        py.obj(c.Py_TYPE(args[2].?)) != s.bio_type)
    {
        return py.newref(py.none());
    }
    return c.PyTuple_Pack(3, args[0].?, args[1].?, args[2].?);
}

/// One connection's OpenSSL objects, from its `_records`.
const Records = struct {
    ssl: *Ssl,
    incoming: *Bio,
    outgoing: *Bio,
    incoming_obj: *Obj,

    fn of(records: *Obj) ?Records {
        if (c.PyTuple_Check(records) == 0 or c.PyTuple_Size(records) != 3) return null;
        const incoming = c.PyTuple_GetItem(records, 1).?;
        return .{
            .ssl = sslOf(c.PyTuple_GetItem(records, 0).?),
            .incoming = bioOf(incoming),
            .outgoing = bioOf(c.PyTuple_GetItem(records, 2).?),
            .incoming_obj = incoming,
        };
    }
};

const Names = struct {
    ssl_protocol: *Obj,
    do_write: *Obj,
    do_read: *Obj,
    process_outgoing: *Obj,
    control_app_writing: *Obj,
    control_ssl_reading: *Obj,
    fatal_error: *Obj,
    data_received: *Obj,
    write: *Obj,
    write_py: *Obj,
    msg_fatal: *Obj,
};

var names: Names = undefined;

pub fn initNames() void {
    names = .{
        .ssl_protocol = py.intern("_ssl_protocol"),
        .do_write = py.intern("_do_write"),
        .do_read = py.intern("_do_read"),
        .process_outgoing = py.intern("_process_outgoing"),
        .control_app_writing = py.intern("_control_app_writing"),
        .control_ssl_reading = py.intern("_control_ssl_reading"),
        .fatal_error = py.intern("_fatal_error"),
        .data_received = py.intern("data_received"),
        .write = py.intern("write"),
        .write_py = py.intern("_write_py"),
        .msg_fatal = py.intern("Fatal error on SSL protocol"),
    };
}

fn callDone(o: *Obj, name: *Obj) bool {
    return py.consumed(py.callMethod(o, name, .{}));
}

/// What `received` did with the bytes.
pub const Outcome = enum {
    /// Not taken: the caller goes on with `buffer_updated()`.
    python,
    /// Done (an exception the TLS protocol caught went to its `_fatal_error`).
    done,
    /// An exception is pending that the protocol would not catch (not an
    /// `Exception`: KeyboardInterrupt, SystemExit), or one from its
    /// `_fatal_error`: the caller's, as from `buffer_updated()`.
    raised,
};

/// As `except Exception as ex: proto._fatal_error(ex, ...)`: `.done` once
/// it went there, `.raised` when the exception is not an `Exception` or the
/// handler raised.
fn caught(proto: *Obj) Outcome {
    if (c.PyErr_ExceptionMatches(c.PyExc_Exception) == 0) return .raised;
    const exc = py.fetchException() orelse return .raised;
    defer py.decref(exc);
    const r = py.callMethod(proto, names.fatal_error, .{ exc, names.msg_fatal }) orelse return .raised;
    py.decref(r);
    return .done;
}

/// The TLS protocol `proto` (exactly `zloop._tls._SSLProtocol`) was given
/// `data` in its buffer: `buffer_updated(len(data))` for a wrapped
/// connection whose application reads with `data_received()`, or `.python`
/// where that method must run.
pub fn received(proto: *Obj, data: []const u8) Outcome {
    const s = &(ready orelse return .python);
    const st = stateOf(proto) orelse return .python;
    // Held for the call: the application's callbacks run in between.
    const records_obj = py.newref(st.get(.records) orelse return .python);
    defer py.decref(records_obj);
    const records = Records.of(records_obj) orelse return .python;
    if (st.get(.state) != s.wrapped or st.isTrue(.app_reading_paused) or
        st.get(.app_protocol_is_buffer) != c.Py_False())
    {
        return .python;
    }
    if (field(c_int, records.incoming_obj, eof_offset) != 0 or data.len > std.math.maxInt(c_int)) return .python;

    const f = &s.fns;
    if (data.len > 0 and f.BIO_write(records.incoming, data.ptr, @intCast(data.len)) != @as(c_int, @intCast(data.len))) {
        _ = c.PyErr_NoMemory();
        return caught(proto);
    }
    // The plaintext: at most what the BIO holds (TLS adds to each record),
    // plus a partial record OpenSSL pulled in earlier; grown if need be.
    var plain = Plain.init(st, f.BIO_ctrl_pending(records.incoming) + 64) orelse return caught(proto);
    var last_error: c_int = SSL_ERROR_WANT_READ;
    while (true) {
        const room = plain.room() orelse return caught(proto);
        const n = f.SSL_read(records.ssl, room.ptr, @intCast(@min(room.len, std.math.maxInt(c_int))));
        if (n > 0) {
            plain.got += @intCast(n);
            // Drained: no ciphertext left and no plaintext held, so a read
            // could only want more (a partial record needs the rest).
            // asyncio reads until SSLWantReadError; zloop's Python path
            // stops here too.
            if (f.BIO_ctrl_pending(records.incoming) == 0 and f.SSL_pending(records.ssl) == 0) break;
            continue;
        }
        last_error = f.SSL_get_error(records.ssl, n);
        break;
    }
    if (last_error != SSL_ERROR_WANT_READ) {
        // Not a plain record: the state machine's `_do_read()` reads again
        // and meets it (OpenSSL answers the same again: a shutdown seen, a
        // fatal error with its reason still queued). A close_notify comes
        // after the data it ends, as asyncio delivers it; an error drops
        // the data of its read, as there.
        if (plain.got > 0 and (last_error == SSL_ERROR_ZERO_RETURN or last_error == SSL_ERROR_SYSCALL)) {
            switch (plain.deliver(proto, st)) {
                .done => {},
                .raised => return .raised,
                .caught => return .done,
            }
        } else plain.drop();
        if (!callDone(proto, names.do_read)) return caught(proto);
        return .done;
    }
    if (plain.got > 0) {
        switch (plain.deliver(proto, st)) {
            .done => {},
            .raised => return .raised,
            .caught => return .done,
        }
    } else plain.drop();
    return afterRead(proto, st, records) catch caught(proto);
}

const Delivered = enum { done, raised, caught };

/// The `bytes` a receive's plaintext is decrypted into: for a small
/// receive, the one this thread lends (`lent`), handed to
/// `data_received()` with its size set to what arrived and taken back when
/// the application kept no reference (no allocation and no free a record;
/// as transport/stream/read.zig's lent buffer for plain reads); else one of its
/// own. A connection whose application keeps what it is given gets its
/// own from then on (`keeps_data`), so that it never holds a lent buffer
/// for a short message more than once.
const Plain = struct {
    bytes: *Obj,
    cap: usize,
    got: usize = 0,
    lent: bool,

    fn init(st: *const ProtoState, want: usize) ?Plain {
        if (want <= lent_bytes and !st.keeps_data) {
            const b = lent orelse (c.PyBytes_FromStringAndSize(null, lent_bytes) orelse return null);
            lent = null;
            return .{ .bytes = b, .cap = lent_bytes, .lent = true };
        }
        const b = c.PyBytes_FromStringAndSize(null, @intCast(want)) orelse return null;
        return .{ .bytes = b, .cap = want, .lent = false };
    }

    /// Where the next read goes; grown (into one of its own) once full.
    fn room(p: *Plain) ?[]u8 {
        if (p.got == p.cap) {
            const cap = p.cap * 2 + 16 * 1024;
            const grown = c.PyBytes_FromStringAndSize(null, @intCast(cap)) orelse return null;
            @memcpy(bufOf(grown)[0..p.got], bufOf(p.bytes)[0..p.got]);
            p.drop();
            p.bytes = grown;
            p.cap = cap;
            p.lent = false;
        }
        return bufOf(p.bytes)[p.got..p.cap];
    }

    fn bufOf(b: *Obj) [*]u8 {
        return @ptrCast(c.PyBytes_AsString(b));
    }

    /// To `data_received()`; the lent one comes back if it was not kept.
    fn deliver(p: *Plain, proto: *Obj, st: *ProtoState) Delivered {
        py.setBytesSize(p.bytes, p.got);
        if (!p.lent) return deliverBytes(proto, st, p.bytes);
        py.incref(p.bytes);
        const r = deliverBytes(proto, st, p.bytes);
        if (c.Py_REFCNT(p.bytes) > 1) st.keeps_data = true;
        p.drop();
        return r;
    }

    fn drop(p: *Plain) void {
        if (p.lent and lent == null and c.Py_REFCNT(p.bytes) == 1) {
            lent = p.bytes;
            return;
        }
        py.decref(p.bytes);
    }
};

/// The buffer `Plain` lends: one record's plaintext at most (16 KiB), with
/// room for a second small one.
const lent_bytes = 16 * 1024 + 1024;
threadlocal var lent: ?*Obj = null;

/// `plain` (consumed) to the application's `data_received()`.
fn deliverBytes(proto: *Obj, st: *ProtoState, plain: *Obj) Delivered {
    defer py.decref(plain);
    const app = py.newref(st.get(.app_protocol) orelse {
        unset(.app_protocol);
        return fromCaught(proto);
    });
    defer py.decref(app);
    const r = py.callMethod(app, names.data_received, .{plain}) orelse return fromCaught(proto);
    py.decref(r);
    return .done;
}

/// Raises the AttributeError of an unset member.
fn unset(comptime f: Field) void {
    _ = c.PyErr_Format(c.PyExc_AttributeError, "'_SSLProtocol' object has no attribute '%s'", field_names[@backingInt(f)].ptr);
}

fn fromCaught(proto: *Obj) Delivered {
    return switch (caught(proto)) {
        .raised => .raised,
        else => .caught,
    };
}

/// `a > b` of two int members (a failed comparison raises).
fn above(st: *const ProtoState, comptime a: Field, comptime b: Field) ?bool {
    const x = st.get(a) orelse {
        unset(a);
        return null;
    };
    const y = st.get(b) orelse {
        unset(b);
        return null;
    };
    const r = c.PyObject_RichCompareBool(x, y, c.Py_GT);
    return if (r < 0) null else r == 1;
}

/// A member's truth (`bool(self._name)`); null once it raised.
fn truth(st: *const ProtoState, comptime f: Field) ?bool {
    const v = st.get(f) orelse {
        unset(f);
        return null;
    };
    if (v == c.Py_True()) return true;
    if (v == c.Py_False()) return false;
    const t = c.PyObject_IsTrue(v);
    return if (t < 0) null else t == 1;
}

/// The rest of `buffer_updated()` after the read, in its order.
fn afterRead(proto: *Obj, st: *ProtoState, records: Records) error{Raised}!Outcome {
    const f = &ready.?.fns;
    if (truth(st, .write_backlog) orelse return error.Raised) {
        if (!callDone(proto, names.do_write)) return error.Raised;
    } else if (f.BIO_ctrl_pending(records.outgoing) > 0) {
        if (!callDone(proto, names.process_outgoing)) return error.Raised;
    } else if ((truth(st, .app_writing_paused) orelse return error.Raised) or
        (above(st, .write_buffer_size, .outgoing_high_water) orelse return error.Raised))
    {
        if (!callDone(proto, names.control_app_writing)) return error.Raised;
    }
    var control = truth(st, .ssl_reading_paused) orelse return error.Raised;
    if (!control) {
        const pending = f.BIO_ctrl_pending(records.incoming);
        if (pending > 0) {
            const level = st.get(.incoming_high_water) orelse {
                unset(.incoming_high_water);
                return error.Raised;
            };
            const high = c.PyLong_AsSsize_t(level);
            if (high == -1 and c.PyErr_Occurred() != null) return error.Raised;
            control = @as(isize, @intCast(pending)) >= high;
        }
    }
    if (control and !callDone(proto, names.control_ssl_reading)) return error.Raised;
    return .done;
}

/// `_tls_write(transport, data)`: `_SSLProtocolTransport.write`. Bytes on
/// a wrapped connection with nothing queued and the socket side taking
/// data go through `SSL_write` and out here; anything else is the
/// transport's `_write_py()`.
fn writeFn(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    if (nargs < 1) return py.raise(c.PyExc_TypeError, "write() needs its transport");
    if (nargs != 2 or kwnames != null) {
        // Keywords or a wrong count: the Python method says what asyncio's does.
        return c.PyObject_VectorcallMethod(names.write_py, args, @intCast(nargs), kwnames);
    }
    const self = args[0].?;
    const data = args[1].?;
    const bytes = fastBytes(data) orelse return py.callMethod(self, names.write_py, .{data});
    const s = &(ready orelse return py.callMethod(self, names.write_py, .{data}));
    const proto = c.PyObject_GetAttr(self, names.ssl_protocol) orelse return null;
    defer py.decref(proto);
    const st = stateOf(proto) orelse return py.callMethod(self, names.write_py, .{data});
    const records = Records.of(st.get(.records) orelse return py.callMethod(self, names.write_py, .{data})) orelse
        return py.callMethod(self, names.write_py, .{data});
    if (st.get(.state) != s.wrapped or st.isTrue(.ssl_writing_paused) or
        (truth(st, .write_backlog) orelse return null))
    {
        return py.callMethod(self, names.write_py, .{data});
    }

    const f = &s.fns;
    const n = f.SSL_write(records.ssl, bytes.ptr, @intCast(bytes.len));
    if (n != @as(c_int, @intCast(bytes.len))) {
        // Not taken whole (the TLS object wants to read first, or failed):
        // the Python path writes it again and meets the same answer.
        if (n <= 0) return py.callMethod(self, names.write_py, .{data});
        const rest = c.PySequence_GetSlice(data, n, @intCast(bytes.len)) orelse return null;
        defer py.decref(rest);
        if (!sendOut(st, records)) return afterCaught(proto);
        return py.callMethod(self, names.write_py, .{rest});
    }
    if (!sendOut(st, records)) return afterCaught(proto);
    const paused = truth(st, .app_writing_paused) orelse return afterCaught(proto);
    const over = paused or (above(st, .write_buffer_size, .outgoing_high_water) orelse return afterCaught(proto));
    if (over and !callDone(proto, names.control_app_writing)) return afterCaught(proto);
    return py.newref(py.none());
}

/// Bytes a write takes on the record path: a non-empty `bytes` or
/// `bytearray` of at most INT_MAX bytes.
fn fastBytes(data: *Obj) ?[]const u8 {
    const n: usize, const p: [*]const u8 = if (c.PyBytes_CheckExact(data) != 0)
        .{ @intCast(c.PyBytes_Size(data)), @ptrCast(c.PyBytes_AsString(data)) }
    else if (c.PyByteArray_CheckExact(data) != 0)
        .{ @intCast(c.PyByteArray_Size(data)), @ptrCast(c.PyByteArray_AsString(data)) }
    else
        return null;
    if (n == 0 or n > std.math.maxInt(c_int)) return null;
    return p[0..n];
}

/// What the outgoing BIO holds, to the socket transport's `write()`.
fn sendOut(st: *ProtoState, records: Records) bool {
    const f = &ready.?.fns;
    const pending = f.BIO_ctrl_pending(records.outgoing);
    if (pending == 0) return true;
    const size: c_int = @intCast(@min(pending, std.math.maxInt(c_int)));
    const out = c.PyBytes_FromStringAndSize(null, size) orelse return false;
    defer py.decref(out);
    const n = f.BIO_read(records.outgoing, @ptrCast(c.PyBytes_AsString(out)), size);
    if (n <= 0) return true;
    if (n < size) py.setBytesSize(out, @intCast(n));
    const raw = py.newref(st.get(.transport) orelse {
        unset(.transport);
        return false;
    });
    defer py.decref(raw);
    const r = py.callMethod(raw, names.write, .{out}) orelse return false;
    py.decref(r);
    return true;
}

/// The write's `except Exception as ex: proto._fatal_error(ex, ...)`.
fn afterCaught(proto: *Obj) ?*Obj {
    return switch (caught(proto)) {
        .raised => null,
        else => py.newref(py.none()),
    };
}

var write_def = py.methodFast("write", writeFn, "Write data to the TLS transport (the record path, else asyncio's).");

/// The module's `_tls_write`: an instance method, so that
/// `_SSLProtocolTransport.write = _tls_write` binds the transport.
pub fn addTo(m: *Obj) bool {
    initNames();
    StateType = std.mem.zeroes(c.PyTypeObject);
    StateType.tp_name = "zloop._zloop.TLSProtocolState";
    StateType.tp_basicsize = @sizeOf(ProtoState);
    StateType.tp_flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC;
    StateType.tp_doc = "The attributes of a TLS protocol that its record path reads natively.";
    StateType.tp_dealloc = stateDealloc;
    StateType.tp_traverse = stateTraverse;
    StateType.tp_clear = stateClear;
    StateType.tp_members = @ptrCast(&members);
    StateType.tp_new = c.PyType_GenericNew;
    if (c.PyType_Ready(&StateType) < 0) return false;
    if (c.PyModule_AddObjectRef(m, "TLSProtocolState", py.obj(&StateType)) < 0) return false;
    const func = c.PyCFunction_NewEx(&write_def, null, null) orelse return false;
    defer py.decref(func);
    const method = c.PyInstanceMethod_New(func) orelse return false;
    defer py.decref(method);
    if (c.PyModule_AddObjectRef(m, "_tls_write", method) < 0) return false;
    const fields = comptime std.meta.fieldNames(Fns);
    const tuple = c.PyTuple_New(fields.len) orelse return false;
    defer py.decref(tuple);
    inline for (fields, 0..) |name, i| {
        const text = c.PyUnicode_FromString(name) orelse return false;
        if (c.PyTuple_SetItem(tuple, i, text) < 0) return false; // steals text
    }
    return c.PyModule_AddObjectRef(m, "_TLS_FUNCTIONS", tuple) == 0;
}
