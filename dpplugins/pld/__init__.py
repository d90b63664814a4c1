"""Privacy loss distributions on a grid with certified lower and upper bounds.

See :class:`PrivacyLossDistribution`; the constructions are in :mod:`dpplugins.pld.grid` and the
FFT composition with its error terms in :mod:`dpplugins.pld.compose`.
"""

from dpplugins.pld.distribution import (DIRECTIONS, AccuracyWarning, Bounds, PrivacyLossDistribution,
                                        certified_bounds)

__all__ = ["Bounds", "PrivacyLossDistribution", "DIRECTIONS", "AccuracyWarning", "certified_bounds"]
