#!/usr/bin/env python3
"""Every program's --help lists its own flags (CTest: programs_help_test).

  programs_help_test.py BINARY=SOURCE.cc ...

For each pair: `BINARY --help` exits 0 or 1 (Abseil exits 1 after printing help), does not say "No flags matched", and shows every flag
that SOURCE.cc defines with ABSL_FLAG as `--name`. Exit 1 on any failure.
"""
import re
import subprocess
import sys


def main():
    failures = 0
    for pair in sys.argv[1:]:
        binary, source = pair.split("=", 1)
        with open(source) as f:
            flags = re.findall(r"ABSL_FLAG\(\s*[\w:<>, ]+?,\s*(\w+)\s*,", f.read())
        r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
        text = r.stdout + r.stderr
        missing = [f for f in flags if not re.search(rf"--{f}\b", text)]
        ok = r.returncode in (0, 1) and "No flags matched" not in text and flags and not missing
        print(f"{'ok' if ok else 'FAIL'}: {binary} --help: exit {r.returncode}, "
              f"{len(flags) - len(missing)}/{len(flags)} flags of {source}"
              + (f"; missing {', '.join(missing)}" if missing else ""))
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
