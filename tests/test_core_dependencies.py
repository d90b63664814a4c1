"""The core needs numpy and scipy only: with every optional or test-only package made
unimportable, every module of ``dpplugins`` imports and the core computations answer.  The
Laplace shuffle family computed its lattice cells in mpmath (a test dependency, not a core
one) and failed with ModuleNotFoundError on a numpy + scipy install."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = r"""
import importlib, importlib.abc, json, pkgutil, sys
BLOCKED = {"mpmath", "torch", "tensorflow", "tensorflow_privacy", "opacus", "matplotlib",
           "dp_accounting", "prv_accountant", "flwr", "tqdm", "sympy", "pandas", "jax",
           "hypothesis", "pytest"}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, Block())
import dpplugins
failed = []
for info in pkgutil.walk_packages(dpplugins.__path__, "dpplugins."):
    if info.name != "dpplugins.__main__":
        try:
            importlib.import_module(info.name)
        except ImportError as error:
            failed.append(f"{info.name}: {error}")
from dpplugins.accountants import create
from dpplugins.amplification import shuffle_model_families as fam
from dpplugins.events import (GaussianEvent, LaplaceEvent, PoissonSampledEvent,
                              RandomizedResponseEvent, ShuffleEvent)
laplace = fam.laplace_bounded(1.0)
pld = create("pld")
pld.compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 100)
shuffle = create("shuffle")
shuffle.compose(ShuffleEvent(1000, RandomizedResponseEvent(1.0)))
print(json.dumps({
    "failed": failed,
    "laplace": [fam.lower_bound(laplace, 1000, 1e-6).epsilon,
                fam.epsilon(laplace, 1000, 1e-6).epsilon],
    "pld": pld.get_epsilon(1e-5),
    "shuffle": shuffle.get_epsilon(1e-6),
}))
"""


def test_the_core_imports_and_answers_with_numpy_and_scipy_alone():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == []
    lower, upper = result["laplace"]
    # eps0 = 1 local randomizer: shuffling 1000 reports amplifies it, and the bounds bracket
    assert 0 < lower <= upper < 1.0
    assert 0 < result["pld"] < 10 and 0 < result["shuffle"] < 1.0
