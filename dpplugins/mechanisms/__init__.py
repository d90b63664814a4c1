"""Single mechanisms described as pairs of distributions.

Every constructor returns a :class:`MechanismPairs`: the worst-case pair of output distributions in
each direction of the neighbouring relation (``"remove"``: P is the output on the larger dataset;
``"add"``: the reverse).  Symmetric mechanisms give one pair used for both directions.
:mod:`dpplugins.pld` turns them into privacy loss distributions.
"""

from __future__ import annotations

from dpplugins.mechanisms.binomial import binomial
from dpplugins.mechanisms.discrete import discrete_pair
from dpplugins.mechanisms.gaussian import gaussian
from dpplugins.mechanisms.laplace import laplace
from dpplugins.mechanisms.randomized_response import k_randomized_response, randomized_response
from dpplugins.mechanisms.subsampled import poisson_subsampled_gaussian, poisson_subsampled_laplace
from dpplugins.mechanisms.types import MechanismPairs

__all__ = ["MechanismPairs", "gaussian", "laplace", "randomized_response",
           "k_randomized_response", "binomial", "poisson_subsampled_gaussian", "poisson_subsampled_laplace",
           "discrete_pair"]
