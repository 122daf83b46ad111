//! Builds zloop's CPython extension (`zloop/_zloop.so`) for one interpreter,
//! and runs the core's unit tests with no interpreter at all.
//!
//!   zig build -Dpython-include=DIR [-Doptimize=ReleaseFast] [-Dstrip=true]
//!             [-Dtarget=x86_64-linux-gnu.2.17 -Dcpu=x86_64_v2]
//!   zig build test [-Dportable=true]   (and the post-link tool's, src/link/)
//!   zig build test-portable    (the core's tests on the portable path)
//!   zig build check-kqueue     (compile-only, for macOS and FreeBSD)
//!   zig build check-abi        (check-kqueue, and Linux x86_64 and aarch64)
//!
//! `-Dportable=true` makes a Linux build take the portable path of the OS
//! layer (libc, a pipe for eventfd, accept + fcntl, ...) and offer the
//! backends epoll and kqueue, the latter over a test-only emulation of
//! kqueue(2) on epoll (`src/core/os/kqueue_emu.zig`): a test build, never
//! a release or a wheel (`scripts/wheels` never passes it, this build
//! refuses it with `-Dstrip=true`, and `scripts/check_wheels.py` finds no
//! kqueue backend in a Linux wheel). macOS and the BSDs always take the
//! portable path, with their real kqueue.
const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});
    const portable = b.option(bool, "portable", "Linux: run the portable OS layer and the emulated kqueue (tests only)") orelse false;
    // A release build has no debug info in it; on ELF targets it keeps its
    // symbol table, and the debug info goes to a file of its own.
    const release = b.option(bool, "strip", "A release build: debug info out of the extension " ++
        "(ELF: into _zloop.so.debug, the symbol table kept)") orelse false;
    // One module for both: the adapter and the core it imports see the same.
    const options = buildOptions(b, portable, release).createModule();

    const core = b.createModule(.{
        .root_source_file = b.path("src/core/root.zig"),
        .target = target,
        .optimize = optimize,
    });
    core.addImport("build_options", options);

    const test_step = b.step("test", "Run the core's unit tests (no Python needed)");
    test_step.dependOn(&b.addRunArtifact(coreTests(b, target, optimize, portable)).step);
    const elf_tests = b.addTest(.{ .root_module = elfTool(b), .name = "elf" });
    test_step.dependOn(&b.addRunArtifact(elf_tests).step);
    const portable_step = b.step("test-portable", "Run the core's unit tests on the portable path (epoll and the emulated kqueue)");
    portable_step.dependOn(&b.addRunArtifact(coreTests(b, target, optimize, true)).step);

    // Real kqueue cannot run on these Linux machines; compiling and linking
    // the core and its tests for macOS and FreeBSD against their libc at
    // least proves that it builds (the emulation on Linux runs the same
    // backend), and its OS constants and layouts are those of the target's
    // headers (`src/core/os/abi.zig`: a difference fails the compile).
    const cross_step = b.step("check-kqueue", "Compile and link the core's tests for macOS " ++
        "and FreeBSD, their OS constants checked against the target's headers (no run)");
    // Every release target, Linux's included (aarch64's numbers are not
    // all x86_64's), in both OS layers where it has two.
    const abi_step = b.step("check-abi", "check-kqueue, and the same for Linux x86_64 and " ++
        "aarch64, default and portable (no run)");
    abi_step.dependOn(cross_step);
    const checks = [_]struct { triple: []const u8, portable: bool, step: *std.Build.Step }{
        .{ .triple = "aarch64-macos", .portable = true, .step = cross_step },
        .{ .triple = "x86_64-macos", .portable = true, .step = cross_step },
        .{ .triple = "x86_64-freebsd", .portable = true, .step = cross_step },
        .{ .triple = "x86_64-linux-gnu", .portable = false, .step = abi_step },
        .{ .triple = "x86_64-linux-gnu", .portable = true, .step = abi_step },
        .{ .triple = "aarch64-linux-gnu", .portable = false, .step = abi_step },
        .{ .triple = "aarch64-linux-gnu", .portable = true, .step = abi_step },
    };
    for (checks) |check| {
        const query = std.Target.Query.parse(.{ .arch_os_abi = check.triple }) catch unreachable;
        const cross = coreTests(b, b.resolveTargetQuery(query), optimize, check.portable);
        // Linked too, against the target's libc stubs: a symbol the target
        // lacks fails here, not on the first Mac.
        _ = cross.getEmittedBin();
        check.step.dependOn(&cross.step);
    }

    const python_include = b.option([]const u8, "python-include", "Python.h directory") orelse return;
    // Zig 0.17 has no @cImport: Python.h is translated by the build system,
    // once per interpreter (its include directory decides the ABI).
    const translate = b.addTranslateC(.{
        .root_source_file = b.path("src/python/capi/python.h"),
        .target = target,
        .optimize = optimize,
    });
    translate.addSystemIncludePath(.{ .cwd_relative = python_include });
    // CPython 3.13+ pick their atomics in cpython/pyatomic.h by compiler:
    // translate-c's C front end claims to be neither GCC nor clang, so they
    // would take pyatomic_std.h and the target's <stdatomic.h>, which
    // crashes translate-c for macOS and fails for FreeBSD (its libc's
    // fallback atomics are structs). The GCC builtins serve every target;
    // the C API's functions that use them are static inline, which zloop
    // does not call (translate-c declares any it cannot translate extern,
    // and scripts/check_wheels.py finds such a name among the extension's
    // undefined symbols).
    translate.defineCMacro("_Py_USE_GCC_BUILTIN_ATOMICS", "1");

    if (portable and release and target.result.os.tag == .linux) {
        // A stripped build is a release's; a portable Linux one carries the
        // test-only kqueue emulation, which must never ship.
        const fail = b.addFail("-Dportable=true is a test build (the emulated kqueue): " ++
            "never a stripped release build");
        b.getInstallStep().dependOn(&fail.step);
        return;
    }
    // An ELF release is built with its debug info, which src/link/elf.zig
    // then moves out (4.5 MB of the 4.8 MB), keeping the symbol table: so
    // profilers and debuggers name zloop's functions. Zig's own strip would
    // drop the symbol table with it. A Mach-O release is stripped by Zig:
    // its debug info would be a map to object files that do not ship.
    const elf = target.result.ofmt == .elf;
    const ext = b.createModule(.{
        .root_source_file = b.path("src/python/module.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .strip = release and !elf,
    });
    ext.addImport("c", translate.createModule());
    ext.addImport("core", core);
    ext.addImport("build_options", options);

    const lib = b.addLibrary(.{ .name = "_zloop", .root_module = ext, .linkage = .dynamic });
    // Symbols of libpython resolve against the interpreter at import time.
    lib.linker_allow_shlib_undefined = true;
    if (!elf) {
        const install = b.addInstallFileWithDir(lib.getEmittedBin(), .lib, "_zloop.so");
        b.getInstallStep().dependOn(&install.step);
        return;
    }
    // The build id ties a release file to its debug file (gdb, perf).
    lib.build_id = .sha1;
    // Every ELF build goes through the post-link edits (src/link/elf.zig):
    // native unwinders (py-spy's libunwind) read its code segment's header.
    const edit = b.addRunArtifact(b.addExecutable(.{ .name = "elf", .root_module = elfTool(b) }));
    edit.addFileArg(lib.getEmittedBin());
    const so = edit.addOutputFileArg("_zloop.so");
    b.getInstallStep().dependOn(&b.addInstallFileWithDir(so, .lib, "_zloop.so").step);
    if (release) {
        edit.addArg("--strip-debug");
        edit.addArg("--debug-file");
        const debug = edit.addOutputFileArg("_zloop.so.debug");
        b.getInstallStep().dependOn(&b.addInstallFileWithDir(debug, .lib, "_zloop.so.debug").step);
    }
}

/// The post-link tool (`src/link/elf.zig`), for the machine that builds.
fn elfTool(b: *std.Build) *std.Build.Module {
    return b.createModule(.{
        .root_source_file = b.path("src/link/elf.zig"),
        .target = b.graph.host,
        .optimize = .Debug,
    });
}

/// The options the core and the adapter see as `@import("build_options")`.
fn buildOptions(b: *std.Build, portable: bool, release: bool) *std.Build.Step.Options {
    const options = b.addOptions();
    options.addOption(bool, "portable", portable);
    options.addOption(bool, "release", release);
    return options;
}

/// The target's own C headers (`src/core/os/abi.h`) as a Zig module, for
/// `src/core/os/abi.zig`'s check of every OS constant and layout the code
/// uses. Constants and types only: the module links nothing.
fn osHeaders(b: *std.Build, target: std.Build.ResolvedTarget) *std.Build.Module {
    const translate = b.addTranslateC(.{
        .root_source_file = b.path("src/core/os/abi.h"),
        .target = target,
        .optimize = .Debug,
    });
    return b.createModule(.{ .root_source_file = translate.getOutput(), .target = target });
}

/// The core's unit tests for `target`; the portable path links libc, as
/// it runs through it.
fn coreTests(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.builtin.OptimizeMode, portable: bool) *std.Build.Step.Compile {
    const module = b.createModule(.{
        .root_source_file = b.path("src/core/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = portable or target.result.os.tag != .linux,
    });
    module.addOptions("build_options", buildOptions(b, portable, false));
    module.addImport("os_headers", osHeaders(b, target));
    return b.addTest(.{ .root_module = module, .name = if (portable) "core-portable" else "core" });
}
