"""Run every benchmark script of the project and print one summary of the ratio lines.

Each script in this folder prints its own table; this runner executes them one after another in
fresh processes (so no cache or warm-up leaks between them), keeps their full output, and then
prints a summary: every output line that reports a ratio against an anchor or a target.

    python benchmarks/run_all.py            # every script, full runs (several minutes)
    python benchmarks/run_all.py --quick    # scripts that support --quick run that way

Use before a release; timed assertions do not belong in the test suite.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUMMARY = re.compile(r"(ratio|/dp|t/|time ours|target|x faster|x slower|->)", re.IGNORECASE)


def scripts() -> list[Path]:
    return sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name)


def supports_quick(path: Path) -> bool:
    return "--quick" in path.read_text()


def run(path: Path, quick: bool) -> tuple[int, str, float]:
    argv = [sys.executable, str(path)] + (["--quick"] if quick and supports_quick(path) else [])
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=HERE.parent)
    return result.returncode, result.stdout + result.stderr, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick where supported")
    args = parser.parse_args()
    summary: list[str] = []
    failed = 0
    for path in scripts():
        print(f"===== {path.name} =====", flush=True)
        code, output, seconds = run(path, args.quick)
        print(output, flush=True)
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        failed += code != 0
        summary.append(f"{path.name}: {status} in {seconds:.1f}s")
        summary += [f"    {line.strip()}" for line in output.splitlines() if SUMMARY.search(line)]
    print("===== summary =====")
    print("\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
