#!/usr/bin/env python3
"""Checks of every tracked source file that need no build: clang-format (style: .clang-format)
over C, C++ and CUDA; ruff's pyflakes rules over Python, which catch the names a module uses
but never binds (the GPU-only paths, such as the benches, run nowhere in CI)."""
import subprocess
import sys

C_EXTENSIONS = (".c", ".h", ".cc", ".cu", ".cuh")
RUFF_VERSION = "0.17.6"


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
    """python3 -m ruff at the pinned version, which pip installs (as test.sh does pytest) when
    this interpreter lacks it or has another; None when that fails. The pin keeps findings from
    changing with ruff's releases."""
    command = [sys.executable, "-m", "ruff"]

    def version():
        done = subprocess.run([*command, "--version"], capture_output=True, text=True)
        return done.stdout.split()[-1] if done.returncode == 0 and done.stdout.split() else None

    if version() != RUFF_VERSION:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"ruff=={RUFF_VERSION}"],
                       capture_output=True)
    return command if version() == RUFF_VERSION else None


def pyflakes():
    sources = tracked((".py",))
    ruff = ruff_command()
    if ruff is None:
        print(f"pyflakes: could not run ruff {RUFF_VERSION} (fix: python3 -m pip install "
              f"ruff=={RUFF_VERSION})")
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
