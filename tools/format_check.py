#!/usr/bin/env python3
"""clang-format check of every tracked C, C++ and CUDA file (style: .clang-format)."""
import subprocess
import sys

EXTENSIONS = (".c", ".h", ".cc", ".cu", ".cuh")


def main():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True)
    sources = [f for f in files.stdout.split() if f.endswith(EXTENSIONS)]
    done = subprocess.run(["clang-format", "--dry-run", "--Werror", *sources],
                          capture_output=True, text=True)
    unformatted = sorted({line.split(":")[0] for line in done.stderr.splitlines()
                          if ": error:" in line})
    for path in unformatted:
        print(f"  not clang-formatted: {path} (fix: clang-format -i {path})")
    print(f"format: {len(sources)} files, {len(unformatted)} not formatted")
    return 1 if unformatted else 0


if __name__ == "__main__":
    sys.exit(main())
