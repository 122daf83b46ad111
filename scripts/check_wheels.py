"""Checks the wheels scripts/wheels.py made: what a user's machine will meet.

    python scripts/check_wheels.py [wheelhouse]

For every wheel: `auditwheel show` finds it consistent with the
manylinux_2_17 tag it carries (no glibc symbol newer than 2.17, no library
outside the manylinux set); the extension is stripped; and, for x86_64, its
disassembly holds no instruction above x86-64-v2 (no AVX, AVX2, AVX-512, FMA,
BMI1/2, MOVBE or LZCNT/TZCNT: a CPU of the v2 level would die on them with
SIGILL). Exits 1 naming each failure. Needs auditwheel (pip) and objdump
(binutils).
"""

import os
import re
import subprocess
import sys
import tempfile
import zipfile

# Registers and mnemonics of the levels above x86-64-v2 (v3: AVX, AVX2, FMA,
# BMI1, BMI2, MOVBE, LZCNT; v4: AVX-512, whose zmm and k registers say it).
_ABOVE_V2 = re.compile(
    r"\b(?:%?[xyz]mm(?:1[6-9]|2\d|3[01])|%?ymm\d+|%?zmm\d+|%k[1-7]|"
    r"vfn?m(?:add|sub)\w*|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|"
    r"rorx|sarx|shlx|shrx|movbe|lzcnt|tzcnt|vzeroupper|vbroadcast\w*|vperm\w*|"
    r"vpgather\w*|vgather\w*|vpmaskmov\w*|vinserti128|vextracti128)\b"
)


def _so_from(wheel, into):
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".so")]
        if len(names) != 1:
            raise AssertionError(f"expected one extension, found {names}")
        return zf.extract(names[0], into)


def check_auditwheel(wheel):
    out = subprocess.run([sys.executable, "-m", "auditwheel", "show", wheel],
                         capture_output=True, text=True)
    text = " ".join(out.stdout.split())
    arch = "aarch64" if "aarch64" in os.path.basename(wheel) else "x86_64"
    if out.returncode != 0 or f'platform tag: "manylinux_2_17_{arch}"' not in text:
        return [f"auditwheel does not find it manylinux_2_17_{arch}: {text or out.stderr}"]
    return []


def check_stripped(so):
    with open(so, "rb") as f:
        data = f.read()
    if b".debug_info" in data or b".symtab" in data:
        return [f"{os.path.basename(so)} is not stripped ({len(data)} bytes)"]
    return []


def check_baseline_x86_64(so):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so],
                         capture_output=True, text=True, check=True).stdout
    hits = [line.strip() for line in out.splitlines() if "\t" in line and _ABOVE_V2.search(line.split("\t", 1)[1])]
    if hits:
        return [f"{len(hits)} instructions above x86-64-v2, e.g. {hits[:3]}"]
    if out.count("\n") < 1000:
        return ["objdump disassembled almost nothing: the check proves nothing"]
    return []


def main(argv):
    wheelhouse = argv[1] if len(argv) > 1 else "wheelhouse"
    wheels = sorted(os.path.join(wheelhouse, w) for w in os.listdir(wheelhouse) if w.endswith(".whl"))
    if not wheels:
        print(f"check_wheels: no wheels in {wheelhouse}")
        return 1
    failures = 0
    for wheel in wheels:
        with tempfile.TemporaryDirectory() as tmp:
            so = _so_from(wheel, tmp)
            problems = check_auditwheel(wheel) + check_stripped(so)
            if "x86_64" in os.path.basename(wheel):
                problems += check_baseline_x86_64(so)
            size_kb = os.path.getsize(so) // 1024
        status = "ok" if not problems else "FAIL"
        print(f"check_wheels: {status}: {os.path.basename(wheel)} ({size_kb} KiB extension)")
        for p in problems:
            print(f"    {p}")
        failures += bool(problems)
    print(f"check_wheels: {len(wheels) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
