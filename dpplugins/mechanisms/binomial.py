"""The binomial mechanism."""

from __future__ import annotations

import numpy as np
from scipy import stats

from dpplugins.errors import ParameterError, check_count, check_real
from dpplugins.mechanisms.discrete import discrete_pair
from dpplugins.mechanisms.types import MechanismPairs


def binomial(trials: int, p: float = 0.5, sensitivity: int = 1) -> MechanismPairs:
    """Binomial mechanism ``f(D) + Bin(trials, p)`` with integer sensitivity ``sensitivity``.

    As in the proof of Agarwal et al. (2018, Thm 1), used by Koskela et al. (2021, Sec. 6.2 and
    App. 2), the analysis needs only the two binomial distributions shifted by the sensitivity:
    ``P = sensitivity + Bin(trials, p)``, ``Q = Bin(trials, p)``.  Outcomes where only one of them has
    mass have infinite privacy loss (they go to ``delta(inf)``).  Symmetric when ``p = 1/2``.
    """
    n = check_count("trials", trials, minimum=1)
    p = check_real("p", p)
    if not 0 < p < 1:
        raise ParameterError("p", p, "in the open interval (0, 1)")
    d = check_count("sensitivity", sensitivity, minimum=1)
    support = np.arange(n + d + 1)
    q_pmf = stats.binom.pmf(support, n, p)
    p_pmf = stats.binom.pmf(support - d, n, p)
    return discrete_pair(p_pmf / p_pmf.sum(), q_pmf / q_pmf.sum(), symmetric=(p == 0.5),
                         description=f"Binomial(trials={n}, p={p:g}, sensitivity={d})")
