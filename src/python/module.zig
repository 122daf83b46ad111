//! `zloop._zloop`: the extension module's entry point.
const std = @import("std");
const builtin = @import("builtin");
const options = @import("build_options");
const py = @import("capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const state = @import("capi/state.zig");
const handle = @import("loop/handle.zig");
const loop = @import("loop/loop.zig");
const transport = @import("transport/stream.zig");
const sockops = @import("sock/ready.zig");
const sockcall = @import("sock/calls.zig");
const core = @import("core");
const datagram = @import("transport/datagram.zig");
const accept = @import("transport/accept.zig");
const fileops = @import("sock/files.zig");
const server = @import("transport/connections.zig");
const borrowed = @import("transport/borrowed.zig");
const trim = @import("loop/trim.zig");
const tls = @import("transport/tls.zig");

/// `_install(handle_repr, futures, tasks)`: the Python side hands over its
/// cold-path helpers and asyncio's futures and tasks modules (whose current
/// classes the loop uses), once, at import.
fn install(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const usage = "_install(handle_repr, futures, tasks)";
    if (nargs != 3) return py.raise(c.PyExc_TypeError, usage);
    const futures_dict = c.PyModule_GetDict(args[1].?) orelse return null;
    const tasks_dict = c.PyModule_GetDict(args[2].?) orelse return null;
    const s = state.get();
    py.xdecref(s.handle_repr);
    py.xdecref(s.futures_dict);
    py.xdecref(s.tasks_dict);
    s.handle_repr = py.newref(args[0].?);
    s.futures_dict = py.newref(futures_dict);
    s.tasks_dict = py.newref(tasks_dict);
    return py.newref(py.none());
}

/// `_sock_fd(sock)`: the fd the loop works on for `sock` (`borrowed.fileno`:
/// a socket's own, whatever a subclass's `fileno()` says).
fn sockFd(_: ?*Obj, sock: ?*Obj) callconv(.c) ?*Obj {
    return borrowed.fileno(sock.?);
}

/// `_trims()`: how many times a loop gave freed memory back (loop/trim.zig).
fn trims(_: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return c.PyLong_FromUnsignedLong(trim.trims.load(.monotonic));
}

var methods = [_]c.PyMethodDef{
    py.methodFast("_install", install, null),
    py.methodNoArgs("_malloc_primed", loop.mallocPrimed, null),
    py.methodFast("_install_net", transport.installNet, null),
    py.methodNoArgs("_selected_backend", loop.selectedBackend, null),
    py.methodO("_sock_fd", sockFd, null),
    py.methodNoArgs("_trims", trims, null),
    py.methodFast("_tls_setup", tls.setupFn, null),
    py.methodFast("_tls_records", tls.recordsFn, null),
    py.sentinel_method,
};

/// What a panic does. A release build (`-Dstrip=true`) writes the message
/// to stderr and aborts: std's handler, which unwinds and prints a stack
/// trace through `std.Io.Threaded`, links that whole table of operations
/// (file I/O at offsets, process spawning) into the extension (360 KiB of
/// code), and with it libSystem functions newer than the oldest macOS the
/// x86_64 wheel supports (preadv and pwritev: macOS 11; posix_spawn's
/// chdir actions: 10.15), which scripts/check_wheels.py refuses. Its trace
/// would read debug info that a release keeps in a file of its own.
/// Development builds keep std's handler.
pub const panic = if (options.release or builtin.strip_debug_info)
    std.debug.FullPanic(writeAndAbort)
else
    std.debug.FullPanic(std.debug.defaultPanic);

fn writeAndAbort(msg: []const u8, _: ?usize) noreturn {
    @branchHint(.cold);
    const prefix = "zloop: panic: ";
    _ = std.c.write(2, prefix, prefix.len);
    _ = std.c.write(2, msg.ptr, msg.len);
    _ = std.c.write(2, "\n", 1);
    std.c.abort();
}

var def: c.PyModuleDef = undefined;

export fn PyInit__zloop() ?*Obj {
    def = std.mem.zeroes(c.PyModuleDef);
    def.m_base = std.mem.zeroes(c.PyModuleDef_Base);
    c.Py_SET_REFCNT(@ptrCast(&def.m_base.ob_base), 1);
    def.m_name = "zloop._zloop";
    def.m_doc = "zloop's native engine (Zig).";
    def.m_size = -1;
    def.m_methods = &methods;
    const m = c.PyModule_Create2(&def, c.PYTHON_API_VERSION) orelse return null;
    state.init();
    if (!borrowed.init() or !handle.initTypes(m) or !loop.initTypes(m) or !transport.initTypes(m) or
        !sockops.initFunctions(m) or !sockcall.initType(m))
    {
        py.decref(m);
        return null;
    }
    if (!datagram.initTypes(m) or !accept.initTypes(m) or !fileops.initFunctions(m) or
        !server.initTypes(m))
    {
        py.decref(m);
        return null;
    }
    if (!tls.addTo(m)) {
        py.decref(m);
        return null;
    }
    if (c.PyModule_AddStringConstant(m, "BACKEND", core.backend.name) < 0 or !addBackendNames(m)) {
        py.decref(m);
        return null;
    }
    return m;
}

/// `BACKENDS`: the tuple of backend names this build accepts, the default
/// first (from the core's `Kind`, so a platform's set is named once).
fn addBackendNames(m: *Obj) bool {
    const names = core.backend.names;
    const tuple = c.PyTuple_New(names.len) orelse return false;
    defer py.decref(tuple);
    for (names, 0..) |name, i| {
        const text = c.PyUnicode_FromStringAndSize(name.ptr, @intCast(name.len)) orelse return false;
        if (c.PyTuple_SetItem(tuple, @intCast(i), text) < 0) return false; // steals text
    }
    return c.PyModule_AddObjectRef(m, "BACKENDS", tuple) == 0;
}
