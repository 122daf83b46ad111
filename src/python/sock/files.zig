//! The file-system and sendfile(2) calls the Python layer makes while a
//! loop runs: `loop.sendfile`/`sock_sendfile` on a non-blocking socket and
//! `create_unix_server`'s stale-socket check and the server's socket-file
//! cleanup. Made here rather than through `os`, they are the loop's own
//! work, as asyncio's are: tools that patch `os` to find blocking calls in
//! user code (blockbuster) allow asyncio's by naming its files, and would
//! otherwise flag zloop's. Each releases the GIL around its syscall and
//! fails with the OSError the `os` function would raise.
const std = @import("std");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const sys = @import("core").sys;

/// `_sendfile(out_fd, in_fd, offset, count)`: one sendfile(2) of up to
/// `count` bytes of `in_fd` from `offset` (the file position stays), as
/// `os.sendfile`; returns the bytes sent (0 at end of file). EAGAIN is
/// BlockingIOError; EINTR runs the signal handlers and retries (PEP 475).
/// The OS layer's `sendfile`: Linux's, the BSDs' and macOS's own (what a
/// call sent before it failed with EAGAIN counts as sent), or a copy
/// through a buffer where there is none.
fn sendfile(_: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    if (nargs != 4) return py.raise(c.PyExc_TypeError, "_sendfile(out_fd, in_fd, offset, count)");
    const out_fd = cInt(args[0]) orelse return null;
    const in_fd = cInt(args[1]) orelse return null;
    var offset: i64 = c.PyLong_AsLongLong(args[2]);
    if (offset == -1 and c.PyErr_Occurred() != null) return null;
    const count = c.PyLong_AsSize_t(args[3]);
    if (count == std.math.maxInt(usize) and c.PyErr_Occurred() != null) return null;
    // The socket is the loop's or asyncio-checked user code's; before the
    // first send on it (macOS: SO_NOSIGPIPE; nothing elsewhere).
    sys.noSigpipe(out_fd);
    while (true) {
        const ts = c.PyEval_SaveThread();
        const r = sys.sendfile(out_fd, in_fd, &offset, count);
        c.PyEval_RestoreThread(ts);
        switch (r) {
            .ok => |n| return c.PyLong_FromSize_t(n),
            .err => |e| switch (e) {
                .INTR => if (c.PyErr_CheckSignals() < 0) return null,
                else => return py.raiseErrno(@backingInt(e)),
            },
        }
    }
}

/// An fd as `os.sendfile` takes it: any C int, a bad one (a closed
/// socket's -1) left to the kernel's EBADF; OverflowError out of range.
fn cInt(o: ?*Obj) ?i32 {
    const v = c.PyLong_AsLong(o);
    if (v == -1 and c.PyErr_Occurred() != null) return null;
    if (v < std.math.minInt(i32) or v > std.math.maxInt(i32)) {
        _ = py.raise(c.PyExc_OverflowError, "fd is out of range");
        return null;
    }
    return @intCast(v);
}

/// A path argument as `os` takes it (str, bytes or os.PathLike), encoded
/// for the file system; null with os's error set (TypeError, or
/// ValueError for an embedded NUL).
fn fsPath(o: ?*Obj) ?*Obj {
    var bytes: ?*Obj = null;
    if (c.PyUnicode_FSConverter(o, @ptrCast(&bytes)) == 0) return null;
    return bytes;
}

/// `_path_stat(path)`: `(st_mode, st_ino)` of what `path` names, symbolic
/// links followed, as `os.stat(path)`; its OSError (with the file name)
/// when it fails.
fn pathStat(_: ?*Obj, path: ?*Obj) callconv(.c) ?*Obj {
    const encoded = fsPath(path) orelse return null;
    defer py.decref(encoded);
    const name: [*:0]const u8 = @ptrCast(c.PyBytes_AsString(encoded));
    // statx on Linux, fstatat elsewhere (the OS layer's `statPath`).
    const ts = c.PyEval_SaveThread();
    const r = sys.statPath(name);
    c.PyEval_RestoreThread(ts);
    const st = switch (r) {
        .ok => |st| st,
        .err => |e| return py.raiseErrnoPath(@backingInt(e), path.?),
    };
    return c.Py_BuildValue("(IK)", @as(c_uint, st.mode), @as(c_ulonglong, st.ino));
}

/// `_unlink(path)`: removes the file `path` names, as `os.unlink(path)`
/// (a symbolic link itself, not its target); its OSError when it fails.
fn unlink(_: ?*Obj, path: ?*Obj) callconv(.c) ?*Obj {
    const encoded = fsPath(path) orelse return null;
    defer py.decref(encoded);
    const name: [*:0]const u8 = @ptrCast(c.PyBytes_AsString(encoded));
    const ts = c.PyEval_SaveThread();
    const r = sys.unlink(name);
    c.PyEval_RestoreThread(ts);
    switch (r) {
        .ok => return py.newref(py.none()),
        .err => |e| return py.raiseErrnoPath(@backingInt(e), path.?),
    }
}

var functions = [_]c.PyMethodDef{
    py.methodFast("_sendfile", sendfile, null),
    py.methodO("_path_stat", pathStat, null),
    py.methodO("_unlink", unlink, null),
    py.sentinel_method,
};

/// Adds the functions to the extension module.
pub fn initFunctions(module: *Obj) bool {
    return c.PyModule_AddFunctions(module, &functions) >= 0;
}
