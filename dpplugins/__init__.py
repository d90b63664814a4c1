"""dpplugins: privacy accountants and samplers for Opacus and TensorFlow Privacy.

The core (this package minus ``dpplugins.integrations``) needs only numpy and scipy.

Quick start::

    >>> import dpplugins
    >>> acc = dpplugins.accountants.create("pld")
    >>> acc.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
    >>> eps = acc.get_epsilon(delta=1e-5)          # certified upper bound
    >>> bounds = acc.get_epsilon_bounds(delta=1e-5)  # (lower, upper)
"""

from dpplugins.errors import NumericalError, ParameterError  # noqa: F401

__version__ = "0.2.0.dev0"


def __getattr__(name):  # lazy subpackages keep `import dpplugins` cheap
    import importlib

    if name in {"accountants", "pld", "mechanisms", "calibration", "errors", "fdp", "samplers",
                "amplification", "report", "events", "passes"}:
        return importlib.import_module(f"dpplugins.{name}")
    if name == "find_noise_multiplier":
        from dpplugins.calibration import find_noise_multiplier

        return find_noise_multiplier
    raise AttributeError(f"module 'dpplugins' has no attribute {name!r}")
