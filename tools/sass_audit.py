#!/usr/bin/env python3
"""Audits the SASS a CUDA binary carries against what a V100 can run well.

For every kernel of every architecture in the binary it prints registers, static shared memory,
local memory (stack frame: spills or local arrays) and the count of HMMA tensor-core
instructions, and fails the kernel when it
  - uses more than 255 registers or 96 KB of static shared memory (V100 limits),
  - has any local memory (a spill or a local array: both cost DRAM traffic per thread),
  - is declared tensor-core (its name contains "wmma", the convention of kernels/) but has no HMMA.

Usage: sass_audit.py [--cuobjdump PATH] BINARY...   (exit 1 if any kernel fails)
"""
import argparse
import re
import subprocess
import sys

MAX_REGISTERS = 255
MAX_SHARED_BYTES = 96 * 1024
TENSOR_CORE_MARK = "wmma"

ARCH_RE = re.compile(r"^arch = (sm_\d+)")
RES_FUNC_RE = re.compile(r"^\s*Function (\S+):$")
RES_USAGE_RE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
SASS_ARCH_RE = re.compile(r"code for (sm_\d+)")
SASS_FUNC_RE = re.compile(r"^\s*Function : (\S+)")


def run(cuobjdump, flag, binary):
    done = subprocess.run([cuobjdump, flag, binary], capture_output=True, text=True)
    if done.returncode != 0 and "does not contain device code" not in done.stderr:
        sys.exit(f"sass_audit: {cuobjdump} {flag} {binary} failed: {done.stderr.strip()}")
    return done.stdout


def resource_usage(text):
    """{(arch, mangled name): (registers, stack, shared, local)} from --dump-resource-usage."""
    usage, arch, func = {}, None, None
    for line in text.splitlines():
        if m := ARCH_RE.match(line):
            arch = m.group(1)
        elif m := RES_FUNC_RE.match(line):
            func = m.group(1)
        elif func and (m := RES_USAGE_RE.search(line)):
            usage[(arch, func)] = tuple(int(v) for v in m.groups())
            func = None
    return usage


def hmma_counts(text):
    """{(arch, mangled name): number of HMMA instructions} from --dump-sass."""
    counts, arch, func = {}, None, None
    for line in text.splitlines():
        if m := SASS_ARCH_RE.search(line):
            arch = m.group(1)
        elif m := SASS_FUNC_RE.match(line):
            func = m.group(1)
            counts[(arch, func)] = 0
        elif func and "HMMA" in line:
            counts[(arch, func)] += 1
    return counts


def demangle(names):
    done = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, done.stdout.splitlines())) if done.returncode == 0 else {}


def problems(name, regs, stack, shared, local, hmma):
    found = []
    if regs > MAX_REGISTERS:
        found.append(f"{regs} registers > {MAX_REGISTERS}")
    if shared > MAX_SHARED_BYTES:
        found.append(f"{shared} B static shared memory > {MAX_SHARED_BYTES}")
    if stack or local:
        found.append(f"local memory (stack {stack} B, local {local} B): spills or a local array")
    if TENSOR_CORE_MARK in name.lower() and hmma == 0:
        found.append("declared tensor-core (name has 'wmma') but no HMMA in its SASS")
    return found


def audit(cuobjdump, binary):
    usage = resource_usage(run(cuobjdump, "--dump-resource-usage", binary))
    hmma = hmma_counts(run(cuobjdump, "--dump-sass", binary))
    names = demangle(sorted({func for _, func in usage}))
    failures = 0
    print(f"{binary}:")
    print(f"  {'arch':<6} {'regs':>4} {'shared':>7} {'local':>6} {'HMMA':>5}  kernel")
    for (arch, func), (regs, stack, shared, local) in sorted(usage.items()):
        pretty = names.get(func, func)
        count = hmma.get((arch, func), 0)
        print(f"  {arch:<6} {regs:>4} {shared:>7} {stack + local:>6} {count:>5}  {pretty}")
        for problem in problems(pretty, regs, stack, shared, local, count):
            print(f"    FAIL: {problem}")
            failures += 1
    print(f"  {len(usage)} kernels, {failures} problems")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuobjdump", default="cuobjdump")
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    failures = sum(audit(args.cuobjdump, binary) for binary in args.binaries)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
