"""From a privacy profile ``delta(eps)`` to a dominating privacy loss distribution.

A mechanism known only through an upper bound on its privacy profile (a theorem that holds for
every delta, such as the random check-in or shuffling bounds) becomes a dominating PLD by
pessimistic connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
arXiv:2207.04380), so repeated runs compose by FFT (Koskela, Jalko, Honkela 2020,
arXiv:1906.03049).  :func:`profile_grid` chooses the grid for a set of runs and
:func:`pld_from_profile` builds one run's PLD on it; every choice of grid gives certified upper
bounds, the choice only trades accuracy for time.

Example::

    >>> import numpy as np
    >>> profile = lambda eps: np.minimum(np.exp(-np.asarray(eps, dtype=float) ** 2), 1.0)
    >>> h, eps_max = profile_grid([profile])
    >>> pld = pld_from_profile(profile, h, eps_max)
    >>> bool(pld.epsilon_for_delta(1e-3, lower=False).upper >= np.sqrt(np.log(1e3)))
    True
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dpplugins.errors import ParameterError, check_positive
from dpplugins.numerics import smallest_epsilon
from dpplugins.pld import PrivacyLossDistribution

__all__ = ["Profile", "profile_grid", "pld_from_profile"]

Profile = Callable[[np.ndarray], np.ndarray]

_MIN_H, _MAX_H = 2e-5, 1e-3
_MAX_EPS, _MAX_GRID_POINTS = 2.0 ** 14, 200_000
#: profile evaluations per run (the PLD module's convex hull slows down on much longer inputs)
_MAX_PROFILE_POINTS = 4000


def _checked(profile: Profile) -> Profile:
    """``profile`` with its answers checked: an array of the argument's shape, no NaN, no
    negative value (a scalar answer raised TypeError deep inside, NaN a plain ValueError, and
    a negative profile was clipped to 0 and certified epsilon 0)."""
    if not callable(profile):
        raise ParameterError("profile", type(profile).__name__, "a callable eps -> delta")

    def evaluate(eps):
        eps = np.asarray(eps, dtype=float)
        try:
            values = np.asarray(profile(eps), dtype=float)
        except (TypeError, ValueError) as error:
            raise ParameterError("profile", getattr(profile, "__name__", profile),
                                 "a callable taking an array of epsilons and returning an "
                                 f"array of deltas (it raised {error!r})") from None
        if values.shape != eps.shape:
            raise ParameterError("profile", getattr(profile, "__name__", profile),
                                 f"a callable returning one delta per epsilon (shape "
                                 f"{eps.shape}, got {values.shape})")
        bad = np.isnan(values) | (values < 0)
        if np.any(bad):
            where = int(np.argmax(bad))
            raise ParameterError("profile", getattr(profile, "__name__", profile),
                                 f"a privacy profile with deltas in [0, 1] (at eps = "
                                 f"{float(eps.flat[where])!r} it returned "
                                 f"{float(values.flat[where])!r})")
        return values
    return evaluate


def _profile_epsilon_max(profile: Profile) -> float:
    """First power of two (>= 1) where the profile is below 1e-16 or has reached a floor below
    1e-3 (such as delta0)."""
    eps_max = 1.0
    while eps_max < _MAX_EPS:
        now, later = profile(np.array([eps_max, 2 * eps_max]))
        if now <= 1e-16 or (now < 1e-3 and later >= now * (1 - 1e-12)):
            break
        eps_max *= 2
    return eps_max


def _profile_epsilon(profile: Profile, delta: float, eps_max: float) -> float:
    """Smallest eps with profile(eps) <= delta (:func:`dpplugins.numerics.smallest_epsilon`,
    bisection), or ``eps_max`` when it is not met below ``eps_max``; used only to scale the
    grid."""
    eps = smallest_epsilon(lambda e: float(profile(np.array([e]))[0]), delta,
                           epsilon_max=eps_max, rtol=1e-12)
    return min(eps, eps_max)


def profile_grid(profiles, value_discretization_interval: float | None = None
                 ) -> tuple[float, float]:
    """Grid ``(h, epsilon_max)`` for the PLDs of runs known by their privacy profiles.

    ``epsilon_max``: the first power of two where every profile is below 1e-16 or at a floor
    (what is left there goes to ``delta(inf)``, so this only decides accuracy).  ``h``: the given
    ``value_discretization_interval``, else a 200th of the smallest single-run epsilon at
    ``delta = 1e-5``, clipped to ``[2e-5, 1e-3]`` and coarse enough for at most 200 000 grid
    points.  Every choice gives certified upper bounds; this one balances accuracy and time.

    Example::

        >>> from dpplugins.amplification.checkin import single_participation_profile
        >>> h, eps_max = profile_grid([single_participation_profile(1.0)])
        >>> h, eps_max
        (0.001, 1.0)
    """
    profiles = [_checked(p) for p in profiles]
    if not profiles:
        raise ParameterError("profiles", [], "at least one privacy profile")
    eps_max = max(_profile_epsilon_max(p) for p in profiles)
    if value_discretization_interval is not None:
        return check_positive("value_discretization_interval", value_discretization_interval), \
            eps_max
    scale = min(_profile_epsilon(p, 1e-5, eps_max) for p in profiles)
    h = max(float(np.clip(scale / 200.0, _MIN_H, _MAX_H)), eps_max / _MAX_GRID_POINTS)
    return h, eps_max


def pld_from_profile(profile: Profile, h: float, epsilon_max: float, *,
                     description: str = "random check-in run"):
    """Dominating PLD of one run (connect-the-dots on the profile, Doroshenko, Ghazi, Kamath,
    Kumar, Manurangsi 2022, arXiv:2207.04380, Sec. 3; via
    :meth:`PrivacyLossDistribution.from_privacy_profile`), with the profile evaluated on at most
    4000 points.

    Example::

        >>> from dpplugins.amplification.checkin import single_participation_profile
        >>> pld = pld_from_profile(single_participation_profile(1.0), 1e-3, 1.0)
        >>> round(pld.epsilon_for_delta(1e-9, lower=False).upper, 3)
        1.0
    """
    return PrivacyLossDistribution.from_privacy_profile(
        _checked(profile), epsilon_max=epsilon_max, value_discretization_interval=h,
        profile_step=max(h, epsilon_max / _MAX_PROFILE_POINTS), description=description)
