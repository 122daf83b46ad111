/* The one C header zloop translates (per interpreter) with Zig's translate-c. */
#define PY_SSIZE_T_CLEAN
#if !defined(__linux__) && !defined(_Py_USE_GCC_BUILTIN_ATOMICS)
/* Python 3.13+ picks its atomics (cpython/pyatomic.h) from the compiler:
   translate-c passes for neither GCC nor a clang with __atomic_load, so it
   takes the <stdatomic.h> ones, and the BSDs' and macOS's <stdatomic.h>
   are beyond it. The GCC builtins are what a real build of CPython there
   uses (clang has them). Linux builds keep what they always took. */
#define _Py_USE_GCC_BUILTIN_ATOMICS 1
#endif
#include <Python.h>
