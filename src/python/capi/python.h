/* The one C header zloop translates (per interpreter) with Zig's translate-c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
