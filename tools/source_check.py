#!/usr/bin/env python3
"""Checks of every tracked source file that need no build: clang-format (style: .clang-format)
over C, C++ and CUDA; ruff's pyflakes rules over Python, which catch the names a module uses
but never binds (the GPU-only paths, such as the benches, run nowhere in CI)."""
import shutil
import subprocess
import sys

C_EXTENSIONS = (".c", ".h", ".cc", ".cu", ".cuh")
RUFF = "ruff==0.17.6"


def tracked(extensions):
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True)
    return [f for f in files.stdout.split() if f.endswith(extensions)]


def clang_format():
    sources = tracked(C_EXTENSIONS)
    done = subprocess.run(["clang-format", "--dry-run", "--Werror", *sources],
                          capture_output=True, text=True)
    unformatted = sorted({line.split(":")[0] for line in done.stderr.splitlines()
                          if ": error:" in line})
    for path in unformatted:
        print(f"  not clang-formatted: {path} (fix: clang-format -i {path})")
    print(f"format: {len(sources)} files, {len(unformatted)} not formatted")
    return not unformatted


def ruff_command():
    """ruff on PATH, else the pinned one installed for this user; None when neither is there."""
    if shutil.which("ruff"):
        return ["ruff"]
    installed = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True)
    if installed.returncode != 0:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", RUFF], capture_output=True)
    if subprocess.run([sys.executable, "-m", "ruff", "--version"],
                      capture_output=True).returncode != 0:
        return None
    return [sys.executable, "-m", "ruff"]


def pyflakes():
    sources = tracked((".py",))
    ruff = ruff_command()
    if ruff is None:
        print(f"pyflakes: could not run ruff (fix: python3 -m pip install {RUFF})")
        return False
    done = subprocess.run([*ruff, "check", "--no-cache", "--select", "F", "--output-format",
                           "concise", *sources], capture_output=True, text=True)
    findings = [line for line in done.stdout.splitlines() if line.count(":") >= 3]
    for line in findings:
        print(f"  {line}")
    if done.returncode not in (0, 1) or (done.returncode == 1 and not findings):
        print(f"pyflakes: ruff exited {done.returncode}: {done.stderr.strip()}")
        return False
    print(f"pyflakes: {len(sources)} files, {len(findings)} findings")
    return not findings


def main():
    results = [clang_format(), pyflakes()]
    print(f"source checks: {sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
