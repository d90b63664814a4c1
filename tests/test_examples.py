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


def test_opacus_digits_example_runs_for_each_sampler():
    """The README's main example: Opacus on digits; the accountant picked from those that
    support the Poisson sampler is pld (certified, below Opacus' RDP); our Poisson accountant on
    a shuffled loader is refused by make_private, Opacus' rdp is labelled not valid."""
    import pytest
    pytest.importorskip("opacus")
    out = subprocess.run([sys.executable, "examples/opacus_digits.py", "--epochs", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True).stdout
    assert re.search(r"accountants that support it: .*\bpld\b", out)
    assert re.search(r"accountant pld \(smallest certified epsilon.*\): certified upper bound; "
                     r"valid for the poisson sampler", out)
    last = [l for l in out.splitlines() if l.startswith("epoch")][-1]
    ours = float(re.search(r"epsilon\[pld\] ([0-9.]+) \(valid\) at delta=1e-05 "
                           r"\(certified upper bound; valid for the poisson sampler\)",
                           last).group(1))
    rdp = float(re.search(r"epsilon\[opacus rdp\] ([0-9.]+)", last).group(1))
    assert ours < rdp
    assert float(re.search(r"accuracy ([0-9.]+)", last).group(1)) > 0.6
    refused = subprocess.run([sys.executable, "examples/opacus_digits.py", "--epochs", "1",
                              "--accountant", "pld", "--sampler", "shuffle"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert "refused: accountant 'pld'" in refused.stdout
    assert "support it: shuffle" in refused.stdout
    assert not any(l.startswith("epoch") for l in refused.stdout.splitlines())  # no training
    out = subprocess.run([sys.executable, "examples/opacus_digits.py", "--epochs", "1",
                          "--accountant", "rdp", "--sampler", "shuffle"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True).stdout
    assert "not valid for this sampler" in out and "warning: accountant 'rdp'" in out
    assert "Valid: shuffle" in out


def test_opacus_digits_example_with_balls_and_bins_on_the_checkin_sampler():
    """--accountant balls_and_bins --sampler checkin: random allocation, accounted as valid,
    printed beside Opacus' RDP (which assumes Poisson and is higher)."""
    import pytest
    pytest.importorskip("opacus")
    out = subprocess.run([sys.executable, "examples/opacus_digits.py", "--epochs", "1",
                          "--accountant", "balls_and_bins", "--sampler", "checkin"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True).stdout
    assert "warning" not in out
    line = [l for l in out.splitlines() if l.startswith("epoch")][-1]
    ours = float(re.search(r"epsilon\[balls_and_bins\] ([0-9.]+) \(valid\)", line).group(1))
    assert "valid for the checkin sampler" in line
    rdp = float(re.search(r"epsilon\[opacus rdp\] ([0-9.]+)", line).group(1))
    assert 0 < ours < rdp
    assert float(re.search(r"accuracy ([0-9.]+)", line).group(1)) > 0.4
