"""examples/tf_privacy_digits.py runs (two epochs) and prints consistent numbers.

Independent references: TF-Privacy 0.9.0's own statement printed by the example (the Poisson
lines of our statement with ``--accountant rdp`` must equal its RDP lines, example and user
level), and the closed-form Gaussian profile (Balle & Wang 2018, Thm 8, ``conftest``) for shuffled
epochs with batches of 64 (no amplification: E epochs of a sensitivity-1 Gaussian, mu =
sqrt(E) / sigma; k examples per user: k mu, Dong, Roth, Su 2022, Thm 2.14).
"""

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import epsilon_from_delta_curve, gaussian_delta_exact

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("tensorflow_privacy") is None:   # pragma: no cover
    pytest.skip("the example needs tensorflow-privacy", allow_module_level=True)


def _float_after(label, text):
    match = re.search(re.escape(label) + r"\s+([0-9.]+|inf)", text)
    assert match, f"{label!r} not in\n{text}"
    return float(match.group(1))


def _gaussian_epsilon(mu, delta=1e-5):
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


@pytest.fixture(scope="module")
def output():
    result = subprocess.run(
        [sys.executable, "examples/tf_privacy_digits.py", "--epochs", "2", "--accountant", "rdp",
         "--max-examples-per-user", "2", "--seed", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return result.stdout


def test_example_trains_above_chance_and_logs_epsilon_per_epoch(output):
    epochs = re.findall(r"epoch (\d+): loss [0-9.]+, epsilon\[shuffle\] ([0-9.]+) "
                        r"\(certified upper bound\)", output)
    assert [int(e) for e, _ in epochs] == [1, 2]
    logged = [float(eps) for _, eps in epochs]
    assert 0 < logged[0] < logged[1]
    # batches of 64 from 1437 examples: no amplification, mu = sqrt(E) / 1.0 after E epochs
    for epoch, eps in enumerate(logged, start=1):
        assert eps == pytest.approx(_gaussian_epsilon(math.sqrt(epoch)), abs=1.5e-3)
    assert float(re.search(r"test accuracy ([0-9.]+)", output).group(1)) > 0.3   # chance: 0.1


def test_example_prints_our_statement_beside_tf_privacys(output):
    ours, _, theirs = output.partition("== TF-Privacy: compute_dp_sgd_privacy_statement")
    assert "== dpplugins: compute_dp_sgd_privacy_statement" in ours and theirs
    ours_example, _, ours_user = ours.partition("User-level DP")
    theirs_example, _, theirs_user = theirs.partition("User-level DP")
    assert ours_user and theirs_user
    # the shuffled line is the training's guarantee: marked, certified, equal to the callback's
    assert "<= Epsilon with each example occurring once per epoch" in ours_example
    assert "shuffle accountant (dpplugins), certified upper bound" in ours_example
    last_logged = float(re.findall(r"epsilon\[shuffle\] ([0-9.]+)", output)[-1])
    assert _float_after("once per epoch:", ours_example) == last_logged
    # TF-Privacy's once-per-epoch line converts RDP of the same Gaussian: not below the exact one
    assert _float_after("once per epoch:", theirs_example) >= last_logged
    # Poisson lines: both RDP, computed the same way (example level, and group privacy for 2)
    for mine, reference in ((ours_example, theirs_example), (ours_user, theirs_user)):
        # (ours printed rounded up, theirs to nearest)
        theirs = _float_after("Poisson sampling (*):", reference)
        assert theirs <= _float_after("Poisson sampling (*):", mine) <= theirs + 0.001 + 1e-12
    # user level, shuffled: group privacy of Gaussian DP, mu = 2 sqrt(2)
    assert _float_after("once per epoch:", ours_user) == pytest.approx(
        _gaussian_epsilon(2 * math.sqrt(2)), abs=1.5e-3)
