#!/usr/bin/env python3
"""Runs a build's ctest tests on an emulated CPU (qemu-user with -cpu MODEL).

A reference that depends on the host's instruction set (ONNX Runtime's fused kernels, numpy's
dispatch) or a kernel dispatch that picks by cpuid is only tested on the hosts the suite happens
to run on. qemu's user-mode emulator reports the CPU model it is given to cpuid, so the same
binaries and the same Python see, say, a Haswell (AVX2 + FMA + F16C, no AVX-512): ONNX Runtime
and numpy pick their AVX2 kernels and llmc's dispatch picks what it would pick there.

Every test's command runs under the emulator, with its working directory, timeout (scaled:
emulation is slower) and skip rules from ctest. A process that the test starts (the Python
harnesses start llmc) runs natively: Linux starts it without the emulator. So a child's own
dispatch follows the real host; the harnesses' in-process references follow the emulated one.

gtest binaries run once each, whole (one process per test would start the emulator hundreds of
times); every other test runs alone. Before any test, a probe checks that the emulated CPU
really lacks what the model lacks (numpy's own cpuid reading, under the emulator), so that a
qemu that ignored -cpu could not pass for an AVX2-only host.

    emulated_host.py --build build [--cpu Haswell] [-R REGEX] [-E REGEX]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

# What numpy reports for the CPU under the emulator, by model: the features that must be
# present and those that must be absent. Only models listed here can be used (an unknown model
# could not be checked).
CPU_MODELS = {
    "Haswell": ({"AVX2", "FMA3", "F16C"}, {"AVX512F", "AVX512_SKX", "AVX512VNNI"}),
    "Skylake-Client": ({"AVX2", "FMA3", "F16C"}, {"AVX512F", "AVX512_SKX"}),
}
TIMEOUT_SCALE = 10  # qemu's TCG runs vector code several times slower than the host


def ctest_tests(build_dir):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def props(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def probe(qemu, python, model):
    want, lack = CPU_MODELS[model]
    code = ("import json, numpy\n"
            "try:\n from numpy._core._multiarray_umath import __cpu_features__ as f\n"
            "except ImportError:\n from numpy.core._multiarray_umath import __cpu_features__ as f\n"
            "print(json.dumps(f))")
    out = subprocess.run([qemu, "-cpu", model, python, "-c", code], check=True,
                         capture_output=True, text=True).stdout
    features = {k for k, v in json.loads(out).items() if v}
    missing = sorted(want - features)
    present = sorted(lack & features)
    if missing or present:
        sys.exit(f"emulated_host: qemu -cpu {model} does not look like {model}: missing {missing}, "
                 f"present {present}; the emulation is not trustworthy, nothing was run")
    print(f"emulated CPU {model}: has {', '.join(sorted(want))}; lacks {', '.join(sorted(lack))} "
          f"(numpy's cpuid under the emulator)")


def with_interpreter(cmd):
    """A script's command with its #! interpreter first: the emulator runs ELF files only."""
    with open(cmd[0], "rb") as f:
        head = f.readline()
    if not head.startswith(b"#!"):
        return cmd
    interpreter = head[2:].decode().split()
    if os.path.basename(interpreter[0]) == "env":
        interpreter = [shutil.which(interpreter[1])] + interpreter[2:]
    return interpreter + cmd


def quiet(output):
    """The output without qemu's notes about CPU features TCG does not model."""
    return "\n".join(line for line in output.splitlines() if "TCG doesn't support" not in line)


def run(cmd, cwd, timeout):
    start = time.time()
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr, time.time() - start
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        return None, out, time.time() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", required=True, help="a configured and built ctest tree")
    ap.add_argument("--cpu", default="Haswell", choices=sorted(CPU_MODELS))
    ap.add_argument("-R", dest="include", default="", help="only tests whose name matches")
    ap.add_argument("-E", dest="exclude", default="", help="leave out tests whose name matches")
    ap.add_argument("--qemu", default=shutil.which("qemu-x86_64") or "qemu-x86_64")
    args = ap.parse_args()
    if not shutil.which(args.qemu):
        sys.exit("emulated_host: qemu-x86_64 not found (Debian: qemu-user; scripts/setup.sh installs it)")

    build = os.path.abspath(args.build)
    tests = [t for t in ctest_tests(build)
             if (not args.include or re.search(args.include, t["name"]))
             and not (args.exclude and re.search(args.exclude, t["name"]))]
    if not tests:
        sys.exit("emulated_host: no test selected")
    probe(args.qemu, sys.executable, args.cpu)
    emu = [args.qemu, "-cpu", args.cpu]

    # gtest tests: one run of each binary, filtered to the selected names.
    gtest, single = {}, []
    for t in tests:
        cmd = t["command"]
        if len(cmd) >= 2 and cmd[1].startswith("--gtest_filter="):
            gtest.setdefault((cmd[0], props(t).get("WORKING_DIRECTORY", build)), []).append(
                cmd[1].split("=", 1)[1])
        else:
            single.append(t)

    failed, passed, skipped = [], 0, 0
    for (binary, cwd), names in gtest.items():
        rc, out, secs = run(emu + [binary, "--gtest_filter=" + ":".join(names)], cwd, 3600)
        ran = re.search(r"\[==========\] (\d+) tests? from .* ran", out)
        ok = re.search(r"\[  PASSED  \] (\d+) test", out)
        skip = re.search(r"\[  SKIPPED \] (\d+) test", out)
        bad = re.findall(r"^\[  FAILED  \] (\S+)", out, re.M)
        count = int(ran.group(1)) if ran else 0
        print(f"{os.path.basename(binary)}: {count} tests in {secs:.0f} s, "
              f"{int(ok.group(1)) if ok else 0} passed, {int(skip.group(1)) if skip else 0} skipped, "
              f"{len(set(bad))} failed (exit {rc})")
        if rc != 0 or count != len(names):
            failed.append(f"{os.path.basename(binary)} ({', '.join(sorted(set(bad))) or f'exit {rc}, {count} of {len(names)} ran'})")
            print(quiet(out)[-4000:])
        passed += int(ok.group(1)) if ok else 0
        skipped += int(skip.group(1)) if skip else 0

    for t in single:
        p = props(t)
        timeout = float(p.get("TIMEOUT", 1500)) * TIMEOUT_SCALE
        rc, out, secs = run(emu + with_interpreter(t["command"]), p.get("WORKING_DIRECTORY", build),
                            timeout)
        skip_re = p.get("SKIP_REGULAR_EXPRESSION", [])
        if rc is not None and (rc == p.get("SKIP_RETURN_CODE") or any(re.search(r, out) for r in skip_re)):
            skipped += 1
            status = "skipped"
        elif rc == 0:
            passed += 1
            status = "passed"
        else:
            failed.append(t["name"])
            status = "TIMEOUT" if rc is None else f"FAILED (exit {rc})"
            print(quiet(out)[-4000:])
        print(f"{t['name']}: {status} in {secs:.0f} s")

    print(f"\nemulated {args.cpu}: {passed} passed, {skipped} skipped, {len(failed)} failed")
    for f in failed:
        print(f"  failed: {f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
