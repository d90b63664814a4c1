"""The README's main example runs as written (with fewer epochs) and meets its target."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_digits_runs_and_stays_within_target():
    result = subprocess.run(
        [sys.executable, "examples/quickstart_digits.py", "--epochs", "2", "--target-epsilon", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    lines = [l for l in result.stdout.splitlines() if l.startswith("epoch")]
    assert len(lines) == 2
    upper = float(re.search(r"epsilon in \[[0-9.]+, ([0-9.]+)\]", lines[-1]).group(1))
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", lines[-1]).group(1))
    assert upper <= 2.0
    assert accuracy > 0.5
