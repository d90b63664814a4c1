"""Every example in the library's docstrings runs and prints what it says.

The examples were never executed by the suite: one written this round (``zero_out_rr_pair``:
``log(q / p)`` overflowed to inf) and two older ones (a missing import in
``registry.supporting_configurations``; ``composed_local_epsilon`` printed as 299.0 what is
298.999999) were wrong.  The checker is Python's own :mod:`doctest`; ``dpplugins.plots`` needs
matplotlib (an optional extra) and is skipped without it.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import dpplugins

# (``dpplugins.__main__`` runs the command line when imported; it has no examples)
MODULES = sorted(info.name for info in pkgutil.walk_packages(dpplugins.__path__, "dpplugins.")
                 if info.name != "dpplugins.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name == "dpplugins.plots" and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is an optional extra")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
