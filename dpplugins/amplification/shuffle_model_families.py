"""Shuffle-model bounds for local randomizers with exact parameters: unary encoding (RAPPOR-style
SUE and optimized OUE), subset selection, local hashing (OLH) and Laplace on bounded input.

n users each run the same randomizer on their own value, the server sees the shuffled reports,
neighbouring datasets differ in one user's value (replace one); ``E = e^eps0`` with eps0 the
family's exact local privacy level.

Which bounds are certified (and why)
------------------------------------
* **FMT21** (Feldman, McMillan, Talwar, FOCS 2021, arXiv:2012.12803, Thm 3.1) and FMT23's
  stronger clone (arXiv:2208.04591) at the family's eps0: valid for every eps0-DP randomizer
  (:func:`dpplugins.amplification.shuffle_model.epsilon` with ``("general", eps0)``; the
  stronger clone by the blanket argument in :mod:`dpplugins.amplification.shuffle_model`).
* **The errata's Lemma 7.3** (FMT23 errata, arXiv:2208.04591, Sec. 7.4;
  :mod:`dpplugins.amplification.shuffle_model_errata`) with the family's ``(p, q)``: valid when
  the decomposition of its eq. (9) holds with the same ``(p, q)`` for *every* pair of inputs.
  Our derivation gives ``p = beta/(E - 1)``, ``q = (1 - (E + 1) p)/E`` for any eps0-DP
  randomizer whose total variation between two distinct inputs is ``beta`` for every pair
  (module docstring there).  That holds for SUE, OUE, subset selection and OLH with a pairwise
  independent hash family (their laws are symmetric in the inputs); it does **not** hold for
  Laplace, whose total variation depends on ``|x0 - x1|``, and the errata's
  ``(p*, q*)``-monotonicity (``q >= q* + 2 (p* - p)``) would then need
  ``q* = 1/E - 2 p* >= 0``, false for Laplace (``p* = 1/(sqrt(E)(sqrt(E) + 1)) > 1/(2E)``), so
  Laplace has no Lemma 7.3 pair (its blanket, below, covers every pair of inputs).
* **The privacy blanket** (Balle, Bell, Gascon, Nissim, CRYPTO 2019, arXiv:1903.02837; the
  optimal decomposition of Su, Cheng, Wang, arXiv:2504.07414), relaxed to three categories
  (below): valid for every randomizer, tighter than Lemma 7.3 at large eps0 (OUE, eps0 = 8,
  n = 1000, delta = 1e-6: 3.34 where Lemma 7.3 and FMT21 give no amplification, with a
  certified lower bound of 2.84), looser at small eps0 (OUE, eps0 = 2: 0.284 against 0.276);
  each round takes the smaller.
* **Not used: the variation-ratio bound** of Wang et al. (VLDB 2024, arXiv:2304.05007).  Its
  reduction puts the differing user's "blank" component among the other users' (the step of the
  withdrawn FMT23 Lemma 3.5), and is false for k-RR
  (:mod:`dpplugins.amplification.shuffle_model`, module docstring).  Every family here except
  binary RR has a positive blank mass ``1 - beta (p+1)/(p-1)``, so we checked no family for which
  their theorem stands without that lemma; their parameters are listed for comparison only.
  It is in fact violated: for SUE with eps0 = 8 (d = 64), n = 100, delta = 1e-6 their pair (and
  their public code) gives epsilon = 7.24, while on the dataset where every other user holds x0
  the single event "every report has bit x0 set and bit x1 clear" has
  ``P0 = v0_A pi_A^99``, ``P1 = v1_A pi_A^99`` and ``delta(7.9) >= P0 - e^7.9 P1 = 0.0025``, so
  epsilon(1e-6) > 7.9 (likewise subset selection and OLH; a test keeps these cases).
  Lemma 7.3 differs exactly there: the differing user's blank reports are *counted* (category 2),
  never identified.

Parameter table
---------------
``beta``: total variation between the laws of two distinct inputs; ``p``: Lemma 7.3's
``beta/(E-1)`` (``q = (1 - (E+1) p)/E`` unless stated).  Every ``beta`` and ``p`` is re-derived
here from the randomizer's law (our derivation) and checked against the full output laws of
small instances in the tests.  Wang et al.'s parameters are ``(p_VR, beta, q_VR) = (E, beta, E)``
for every row (their Table and the README of their public code list the same ``beta`` for
unary encoding, local hashing, subset selection and Laplace).

=========================================  ===============================  =====================
randomizer (law; source)                   beta                             p (Lemma 7.3)
=========================================  ===============================  =====================
SUE / basic RAPPOR: bit x w.p. ``a``,      ``(h-1)/(h+1)``                  ``1/(h+1)^2``
others w.p. ``1-a``, ``a = h/(h+1)``,
``h = e^(eps0/2)`` (Erlingsson, Pihur,
Korolova, CCS 2014, arXiv:1407.6981)
OUE: bit x w.p. 1/2, others w.p.           ``(E-1)/(2(E+1))``               ``1/(2(E+1))``
``1/(E+1)`` (Wang, Blocki, Li, Jha, USENIX
Security 2017, arXiv:1705.04421, Sec. 4.4)
k-subset of [d], weight E if ``x in S``    ``(E-1) C(d-2,k-1)/Z``           ``C(d-2,k-1)/Z``
(Ye, Barg, IEEE T-IT 2018,                 ``Z = E C(d-1,k-1) + C(d-1,k)``  (k = 1: ``q =
arXiv:1702.00610; Wang et al. 2016,                                         (d-2)/Z``)
arXiv:1602.07387)
OLH: ``(h, RR_g(h(x)))``, h pairwise       ``(1-1/g)(E-1)/(E+g-1)``         ``(1-1/g)/(E+g-1)``
independent into [g] (Wang et al. 2017,    (Wang et al. list
Sec. 4.4)                                  ``(E-1)/(E+g-1)``: no
                                           collisions)
Laplace on [0, 1], scale ``1/eps0``        ``1 - e^(-eps0/2)`` at           not used
(Dwork, McSherry, Nissim, Smith, TCC       ``|x0 - x1| = 1`` (depends on
2006)                                      the pair)
=========================================  ===============================  =====================

The privacy blanket
-------------------
Decompose every input's law as ``R(z) = c + (R(z) - c)`` with one measure ``c <= R(z)`` for
every z (mass ``gamma``).  Revealing, for each other user, whether they drew from ``c /
gamma`` and the reports of those who did not is a post-processing that only helps the
adversary, so ``delta(eps) <= sum_m P(M = m) delta_m(eps)``, ``M - 1 ~ Bin(n - 1, gamma)``,
with ``delta_m`` the divergence of the differing user's report hidden among ``m - 1`` blanket
reports (Balle et al. 2019, Sec. 3); equivalently Su et al.'s ``(1/n) E[(sum_{i<=n} G_i)_+]``
with ``G = (R(x0)(y) - e^eps R(x1)(y)) / c(y)`` w.p. ``c(y)`` and 0 otherwise (the identity
``E[f(K)] / n = gamma E[f(M) / M]`` for ``K ~ Bin(n, gamma)``, ``f(0) = 0``; our derivation).
For unary encoding, subset selection and local hashing an output y either supports ``x0``
(bit x0 set, ``x0 in S``, ``y = h(x0)``) or not, likewise ``x1``, and with the blanket ``c``
below ``R(x0)(y) / c(y) = e^eps0`` where y supports x0 and 1 elsewhere (likewise ``x1``), so
the multiset's likelihood ratio depends only on the counts of the four classes 10, 01, 11, 00
(our derivation from the laws):

========================  ===================================  ============================
randomizer                blanket ``c(y)``                     class masses ``w10 = w01, w11, w00``
========================  ===================================  ============================
unary encoding (a, b)     ``base(y) (1-a)/(1-b)``, base: all   ``(1-a) b``, ``(1-a) b^2/(1-b)``,
                          bits Bern(b) (the minimum except at  ``(1-a)(1-b)``
                          the all-ones vector)
k-subset of [d]           ``1/Z`` (the minimum: some value is  ``C(d-2,k-1)/Z``,
                          outside S)                           ``C(d-2,k-2)/Z``, ``C(d-2,k)/Z``
OLH, g buckets            ``1/(|H| (E+g-1))`` (the minimum     ``(1-1/g)/(E+g-1)``,
                          unless h is constant)                ``1/(g (E+g-1))``,
                                                               ``(g-2+1/g)/(E+g-1)``
Laplace on [0, 1]         the minimum density (below); ratios  ``1/(h (h+1))``, 0,
                          spread to 1 or E, ``h = sqrt(E)``    ``(h-1)/(h (h+1))``
========================  ===================================  ============================

The exact blanket needs a four-category count.  We relax class 11, whose summand is
``e^eps0 (1 - e^eps)`` per report, to ``1 - e^eps`` (larger for eps >= 0: the bound can only
grow) and merge it into 00, which leaves the three-category count pair of
:class:`~dpplugins.amplification.shuffle_model.Blanket` (:func:`two_class_blanket`).  Lemma
7.3's pair is the other extreme of the same idea (our observation): the blanket ``c / e^eps0``
on class 00 makes both classes' ratio ``e^eps0``, with no relaxation but a smaller blanket.
The blankets in between (``t c`` on class 00, ``1/E <= t <= 1``) were never better than the
better end (numerically checked: OUE at (eps0, n) = (1, 1e4), (2, 1e3), (2, 1e5), (4, 1e4),
(8, 1e3), delta 1e-6, t = E^-s for s in {0, 1/4, 1/2, 3/4, 1}), so the two ends are computed
and the smaller is used.  Where the counts of classes 10, 01 and 11 are few (``n w10`` up to
about 20 to 80: n up to about 2000 at eps0 = 4, 1e5 at eps0 = 8 for d = 16), the exact
four-class blanket is computed too, by a direct sum over those counts
(:mod:`dpplugins.amplification.shuffle_model_four_class`); it gains most where class 11 is
heavy (OLH, g = 8, eps0 = 4, n = 1000, delta = 1e-6: 1.669 -> 1.496).  It enters single rounds
(:func:`epsilon`, :func:`delta_bounds`), not the composed rounds' profiles.

Laplace (our derivation)
~~~~~~~~~~~~~~~~~~~~~~~~
Laplace's ratios to its blanket take every value in ``[1, E]``, not only 1 and ``E``; a
*mean-preserving spread* of ``G`` brings them back to the table's classes.  Write ``b =
1/eps0``, ``L_x(y) = e^(-|y-x|/b) / (2b)`` and take the blanket ``c(y) = min_{x in [0,1]}
L_x(y) = e^(-max(|y|, |1-y|)/b) / (2b)``, of mass ``gamma = e^(-eps0/2)``.  For any inputs
``x0, x1`` the ratios ``r_i(y) = L_{x_i}(y) / c(y)`` lie in ``[1, E]`` (triangle
inequality), and ``G = r_0 - e^eps r_1`` on the blanket is linear in ``(r_0, r_1)``.

1. Replace ``r_i`` by ``E`` w.p. ``a_i = (r_i - 1)/(E - 1)`` and by 1 otherwise,
   independently for i = 0, 1 and for each report.  ``(r_0, r_1)`` keeps its conditional
   mean, so (``G`` linear) the sum of the new ``G'_i`` has, given the reports, the mean of the
   sum of the ``G_i``, and ``z -> z_+`` is convex: ``E[(sum G_i)_+] <= E[(sum G'_i)_+]``
   (Jensen, given the reports).  The four-class bound with masses ``w_st = int c a_0^s
   (1-a_0)^(1-s) a_1^t (1-a_1)^(1-t)`` is an upper bound for the pair ``(x0, x1)``.
2. ``int c a_i = (int L_{x_i} - gamma)/(E - 1) = (1 - gamma)/(E - 1) =: m`` for every input,
   so ``w10 = w01 = m - w11``, ``w00 = gamma - 2m + w11``.  Class values ``v10 = E - e^eps``,
   ``v01 = 1 - E e^eps``, ``v11 = E (1 - e^eps)``, ``v00 = 1 - e^eps`` satisfy ``v01 <= v11
   <= v00 <= v10`` (eps >= 0) and ``v10 + v01 = v11 + v00``, so equal masses ``t`` on ``v10``
   and ``v01`` are a mean-preserving spread of ``t`` on ``v11`` and ``v00`` (the same Jensen
   step, one report at a time): every pair's four-class bound is below the one with ``w11 =
   0``, which is the pair ``(x0, x1) = (1, 0)`` (there one of ``r_0, r_1`` is 1 at every y).
3. So ``w10 = w01 = m = 1/(sqrt(E)(sqrt(E) + 1))``, ``w11 = 0``, ``w00 = gamma - 2m =
   (sqrt(E) - 1)/(sqrt(E)(sqrt(E) + 1))`` bound every pair, with nothing relaxed.

Against FMT21 at the same eps0 (delta = 1e-6): eps0 = 4, n = 1e4 goes from 0.601 to 0.386;
eps0 = 1, n = 1e6 from 0.00433 to 0.00322 (the certified lower bounds: 0.206 and 0.00244 from
the three categories, 0.2437 and 0.00247 with the full likelihood ratio, "Lower bounds").
The tests check step 1-3 against the continuous ``G`` convolved numerically, and the bound
against exact enumeration of a quantised Laplace.

Laplace: the exact blanket
~~~~~~~~~~~~~~~~~~~~~~~~~~
The spread of step 1 is not needed: the blanket bound of the pair ``(0, 1)``, computed with
its continuous ``G`` (:mod:`dpplugins.amplification.blanket_lattice`), bounds every pair (our
derivation).  Write ``<=cx`` for the convex order (equal means, ``E[phi(X)] <= E[phi(Y)]`` for
convex ``phi``).

a. For a pair ``(x0, x1)``, ``G = r_0 - e^eps r_1`` is the sum of ``r_0`` and ``-e^eps r_1``
   under the blanket.  Among all couplings of two marginals the comonotone one (here:
   ``r_0`` large exactly where ``r_1`` is small) is the largest sum in convex order (Dhaene,
   Denuit, Goovaerts, Kaas, Vyncke, Insurance: Mathematics and Economics 31, 2002, Thm 7).
b. The comonotone sum grows in convex order with each marginal: its quantile function is the
   sum of the marginals' quantile functions, and ``X <=cx Y`` iff the means agree and
   ``int_p^1 Q_X <= int_p^1 Q_Y`` for every ``p`` (Shaked, Shanthikumar, Stochastic Orders,
   2007, Thm 3.A.5); ``-e^eps r`` keeps the order of ``r``.
c. Every marginal is below that of an endpoint: with ``g_x = log(r_x)/eps0`` and ``x >= 1/2``
   (``x < 1/2`` is the mirror image ``y -> 1 - y``), ``g_x(y) = clamp(2y - x, 1 - x, x)`` and
   ``g_1(y) = clamp(2y - 1, 0, 1)``.  For ``k`` in ``(1 - x, x)``, ``P(g_x < k) = c(y < (x +
   k)/2) < c(y < (1 + k)/2) = P(g_1 < k)``, and ``g_x`` stays in ``[1 - x, x]``, so the
   distribution functions of ``r_x`` and ``r_1`` cross once; both have mean ``int L_x = 1``:
   ``r_x <=cx r_1`` by the cut criterion (Karlin, Novikoff 1963; Shaked, Shanthikumar,
   Thm 3.A.44), and ``r_0`` has the law of ``r_1``.
d. The pair ``(0, 1)`` is itself comonotone in the sense of (a): at every ``y`` one of
   ``r_0, r_1`` is 1, the smallest value, and the other is above 1.

So ``G(x0, x1) <=cx G(0, 1)`` for every pair and every eps; the convex order passes to the
mixture with the blanket's complement (``G = 0``) and to sums of independent copies, and
``z -> z_+`` is convex: the pair ``(0, 1)`` has the largest ``E[(G_1 + ... + G_n)_+]``.  The
law of ``r_0`` on the half where ``r_1 = 1`` is ``(gamma/4) r^(-3/2) dr`` on ``[1, E)`` plus an
atom ``gamma^2 / 2`` at ``E`` (from ``c(y) = (eps0/2) e^(-eps0 (1 - y))`` and ``r_0 =
e^(eps0 (1 - 2y))`` on ``(0, 1/2)``, and ``y <= 0``).  Against the spread blanket (delta =
1e-6): eps0 = 8, n = 1e4 goes from 5.270 to 3.248; eps0 = 4, n = 1e4 from 0.386 to 0.328;
eps0 = 1, n = 1e4 from 0.0396 to 0.0379.  The tests check it against Monte Carlo and
importance sampling of the continuous ``G``, and against the same bound computed from
Gauss-Legendre cell means of ``G`` in ``y`` (a law below the continuous one in convex order).

Lower bounds
------------
Exact shuffled privacy on fixed datasets after a post-processing of every report into three
categories (A: evidence for x0, B: for x1, C: the rest, with equal probability under x0 and x1),
computed as a :class:`~dpplugins.amplification.shuffle_model.CountPair`: every other user holds
x0, or every other user holds a third value z.  Any post-processing of one dataset pair is a
certified lower bound on the worst case.  With the others at z, a report that also does *not*
support z is likelier the differing user's, so a third pair keeps in A and B only the reports
that do not support z (our construction): A = supports x0, not x1, not z; B = supports x1, not
x0, not z; C = the rest.  It was the best of the three pairs in 13 of our 16 checks (SUE at
eps0 = 1 prefers the others at x0): OUE, eps0 = 4, n = 1e4, delta = 1e-6 goes from 0.2006 to
0.2759 against the upper bound 0.2814.  Splitting class 11 from 00 in the z-blind pair instead
moved its bound by 0.1 % only (numerically checked, exact four-category sum, n = 1000).

For Laplace on bounded input the full likelihood ratio of the pair "every user at 0" against
"one user at 1" is also used (:mod:`~dpplugins.amplification.laplace_full_statistic`; for
that pair the categories are a post-processing of it, and the larger of all is reported; it is
computed first, and a pair is searched only where it certifies delta above the target at the
full statistic's epsilon).  On the issue grid (n from 1e3 to 1e6, eps0 from 0.5 to 8) the
widest Laplace gap between the certified bounds falls from 40.5 % to 33.2 % at delta = 1e-6 and
from 42.3 % to 31.5 % at 1e-8 with the full statistic, and to 30.1 % and 29.2 % once its
lattice cells keep their means; eps0 = 8, n = 1e5, delta = 1e-6 goes from 0.517 to 0.692
against the upper bound 0.870.  The full statistic's delta is within 0.5 % of an uncertified
estimate of the same pair's (from above) at n = 10^6, so what is left of the gap is the upper
bound's, or a worse dataset pair than this one.  The composed rounds still take a
three-category pair (:func:`lower_pair_index`).

Example::

    >>> fam = unary_encoding(4.0, 16, optimized=True)
    >>> up, low = epsilon(fam, 100_000, 1e-6), lower_bound(fam, 100_000, 1e-6)
    >>> up.method, low.epsilon <= up.epsilon < up.candidates["fmt21"]
    ('exact_blanket', True)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from dpplugins.amplification import shuffle_model as _sm
from dpplugins.amplification import laplace_full_statistic
from dpplugins.amplification import shuffle_model_heterogeneous as _het
from dpplugins.amplification.count_pair import \
    count_pair_loss_binned_pmfs as _count_pair_loss_binned_pmfs
from dpplugins.amplification.blanket_lattice import (LatticeBlanket, class_blanket_law, class_sd,
                                                     laplace_blanket_law, laplace_sd)
from dpplugins.amplification.shuffle import (ShuffleBound, check_domain_size,
                                             check_local_epsilon, check_users)
from dpplugins.amplification.shuffle_model_errata import (decomposition_for_total_variation,
                                                          errata_pair)
from dpplugins.amplification.shuffle_model_four_class import FourClassBlanket
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_nonnegative,
                              check_open_unit)
from dpplugins.pld import Bounds, PrivacyLossDistribution, certified_bounds

__all__ = ["Family", "unary_encoding", "subset_selection", "local_hashing", "laplace_bounded",
           "epsilon", "lower_bound", "epsilon_bounds", "delta_bounds", "upper_profile",
           "composed_epsilon_bounds", "composed_delta_bounds", "round_pld", "lower_pair_index",
           "lower_round_pld", "composed_rounds_epsilon_bounds", "composed_rounds_delta_bounds",
           "FAMILIES"]

#: category laws (pi, v0, v1) of one dataset pair: others' law, differing user's on X0 and X1
Laws = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]


@dataclass(frozen=True)
class Family:
    """A local randomizer with exact parameters.

    ``eps0``: its local privacy level; ``beta``: total variation between two inputs (the largest,
    for Laplace); ``lemma73``: ``(p, q)`` of the errata's eq. (9), the same for every pair of
    inputs, or None where that does not hold; ``lower_laws``: three-category laws of datasets
    used for lower bounds; ``vr``: Wang et al.'s ``(p, beta, q)`` (for comparison only);
    ``blanket``: ``(gamma, laws)`` of the relaxed privacy blanket (:func:`two_class_blanket`),
    or None where it is not derived; ``blanket_classes``: its class masses ``(w10, w11, w00)``
    for the exact four-class blanket
    (:mod:`dpplugins.amplification.shuffle_model_four_class`), or None; ``exact_blanket``:
    ``"classes"`` (the four-class blanket at every n) or ``"laplace"`` (the continuous one,
    "Laplace: the exact blanket") computed by :mod:`dpplugins.amplification.blanket_lattice`,
    or None."""

    name: str
    eps0: float
    beta: float
    lemma73: tuple[float, float] | None
    lower_laws: tuple[Laws, ...] = field(repr=False)
    vr: tuple[float, float, float] = field(repr=False)
    blanket: tuple[float, Laws] | None = field(default=None, repr=False)
    blanket_classes: tuple[float, float, float] | None = field(default=None, repr=False)
    exact_blanket: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.exact_blanket is None and self.blanket_classes is not None:
            object.__setattr__(self, "exact_blanket", "classes")


def _check_eps0(eps0) -> float:
    return check_local_epsilon(eps0, 50, zero=False)


def _complete(a: float, b: float) -> tuple[float, float, float]:
    return (a, b, max(0.0, 1.0 - a - b))


def two_class_blanket(eps0: float, w10: float, w11: float, w00: float
                      ) -> tuple[float, Laws]:
    """``(gamma, laws)`` of the relaxed privacy blanket of a randomizer whose outputs fall into
    classes by whether they "support" ``x0`` and ``x1`` (module docstring, "The privacy
    blanket"): ``w_st`` is the blanket mass of the outputs supporting ``x0`` iff ``s = 1`` and
    ``x1`` iff ``t = 1`` (``w01 = w10`` by symmetry), and the likelihood ratio of ``R(x0)``
    (``R(x1)``) to the blanket is ``e^eps0`` on outputs supporting ``x0`` (``x1``), 1 elsewhere.
    Class 11 (ratio ``e^eps0`` to both) is relaxed into the rest with ratio 1: its summand
    ``e^eps0 (1 - e^eps)`` becomes the larger ``1 - e^eps``, which can only raise the bound.

    Example::

        >>> import math
        >>> gamma, (pi, v0, v1) = two_class_blanket(1.0, 0.1, 0.0, 0.5)   # 3-RR: w = 1 / Z
        >>> round(gamma, 12), round(v0[0] / pi[0] / gamma, 12) == round(math.e, 12)
        (0.7, True)
    """
    e = math.exp(eps0)
    rest = w11 + w00
    gamma = 2 * w10 + rest
    pi = (w10 / gamma, w10 / gamma, rest / gamma)
    return gamma, (pi, (e * w10, w10, rest), (w10, e * w10, rest))


def _make(name: str, eps0: float, beta: float, symmetric: bool, laws,
          blanket: tuple[float, Laws] | None = None,
          classes: tuple[float, float, float] | None = None) -> Family:
    e = math.exp(eps0)
    lemma = decomposition_for_total_variation(eps0, beta) if symmetric else None
    return Family(name, eps0, beta, lemma, tuple(laws), (e, beta, e), blanket, classes)


def unary_encoding(eps0: float, d: int, *, optimized: bool = False) -> Family:
    """Unary encoding of a value in ``[d]``: bit ``x`` is reported 1 w.p. ``a``, every other bit
    w.p. ``b``, independently.  Symmetric (SUE, basic RAPPOR of Erlingsson et al. 2014,
    arXiv:1407.6981): ``a = e^(eps0/2)/(e^(eps0/2)+1) = 1 - b``; optimized (OUE, Wang et al.,
    USENIX Security 2017, arXiv:1705.04421, Sec. 4.4): ``a = 1/2``, ``b = 1/(e^eps0+1)``.  Both
    are eps0-DP (``a (1-b)/((1-a) b) = e^eps0``); ``beta = a - b`` for every pair (only bits x0, x1
    differ), so Lemma 7.3 applies with ``p = (1-a) b`` (our derivation).  Lower-bound categories:
    bits ``(x0, x1) = (1, 0)``, ``(0, 1)``, other; with the others at z also
    ``(x0, x1, z) = (1, 0, 0)``, ``(0, 1, 0)``, other.

    Example::

        >>> round(unary_encoding(2.0, 8, optimized=True).beta, 6)
        0.380797
    """
    eps0 = _check_eps0(eps0)
    d = check_domain_size("d", d, 3)
    # a, b and their complements na = 1 - a, nb = 1 - b each from its own closed form: 1 - a
    # by subtraction lost all but log10(h) digits (SUE at eps0 = 40: 1 - a = 2e-9 to a relative
    # 5e-8, and the blanket's class masses with it), and every category C below is a sum of
    # its outcomes, not 1 minus the others
    if optimized:
        e = math.exp(eps0)
        a, na, b, nb = 0.5, 0.5, 1.0 / (e + 1.0), e / (e + 1.0)
    else:
        h = math.exp(eps0 / 2)
        a, na, b, nb = h / (h + 1), 1 / (h + 1), 1 / (h + 1), h / (h + 1)
    v0 = (a * nb, na * b, a * b + na * nb)      # bits (x0, x1): 10, 01, 11 or 00
    v1 = (v0[1], v0[0], v0[2])
    third = (b * nb, b * nb, b * b + nb * nb)
    # others at z, A / B also without bit z (module docstring): the differing user's bit z is
    # Bern(b), the others' Bern(a); C: bit z set, or clear and (x0, x1) = 11 or 00
    z_v0 = (a * nb * nb, na * b * nb, b + nb * (a * b + na * nb))
    z_third = (b * nb * na, b * nb * na, a + na * (b * b + nb * nb))
    # blanket c_y = base(y) (1-a)/(1-b) <= R(z)(y) for every z (base: all bits Bern(b))
    classes = (na * b, na * b * b / nb, na * nb)
    blanket = two_class_blanket(eps0, *classes)
    return _make("oue" if optimized else "sue", eps0, a - b, True,
                 [(v0, v0, v1), (third, v0, v1),
                  (z_third, z_v0, (z_v0[1], z_v0[0], z_v0[2]))], blanket, classes)


def subset_selection(eps0: float, d: int, k: int) -> Family:
    """k-subset selection on ``[d]`` (Ye, Barg, IEEE T-IT 2018, arXiv:1702.00610; Wang et al.
    2016, arXiv:1602.07387): report a k-subset S w.p. proportional to ``e^eps0`` if ``x in S``,
    1 otherwise (``Z = e^eps0 C(d-1,k-1) + C(d-1,k)``).  ``beta = (E-1) C(d-2,k-1)/Z`` for every
    pair (subsets holding exactly one of x0, x1).  Lower-bound categories: S holds x0 not x1, x1
    not x0, other; with the others at z also: x0 but neither x1 nor z, x1 but neither x0 nor z,
    other.  ``k = 1`` is d-ary randomized response.

    Example::

        >>> fam = subset_selection(1.0, 10, 1)
        >>> round(fam.beta, 12) == round((math.e - 1) / (math.e + 9), 12)
        True
    """
    eps0 = _check_eps0(eps0)
    d = check_domain_size("d", d, 3)
    k = check_count("k", k, minimum=1)
    if k >= d:
        raise ParameterError("k", k, f"in [1, d - 1] = [1, {d - 1}]")
    e = math.exp(eps0)
    # subset counts relative to C(d-1, k-1) (ratios of binomials, so that d = 10^4, k = 5000
    # does not overflow a float): Z, and the subsets holding x0 not x1, both, neither
    z = e + (d - k) / k
    only = (d - k) / (d - 1)
    both = (k - 1) / (d - 1)
    neither = (d - k) * (d - k - 1) / (k * (d - 1))
    # C (S holds both x0 and x1, or neither) from its own count: for k = 1 it is (d - 2) / z,
    # about e^-eps0, which 1 - A - B lost entirely at large eps0
    v0 = (e * only / z, only / z, (e * both + neither) / z)
    v1 = (v0[1], v0[0], v0[2])
    # ... holding a third value x as well (C(d-3, k-2)), or x but neither x0 nor x1 (C(d-3, k-1))
    with_x = (k - 1) * (d - k) / ((d - 1) * (d - 2))
    third_a = (e * with_x + (d - k) * (d - k - 1) / ((d - 1) * (d - 2))) / z
    third = _complete(third_a, third_a)
    # others at z, A / B also without z (module docstring): C(d-3, k-1) subsets each, weight
    # E for the differing user's A, 1 for its B and for the others (z not in S)
    outside_z = (d - k) * (d - k - 1) / ((d - 1) * (d - 2))
    # C: C(d-1,k-1) - C(d-3,k-1) = C(d-2,k-2) + C(d-3,k-2) subsets hold x0 (weight E) but not
    # (x0 only, z outside), and C(d-1,k) - C(d-3,k-1) = C(d-2,k) + C(d-3,k-2) do not hold x0
    # (Pascal's rule twice), in units of C(d-1,k-1): both + with_x and neither + with_x
    z_v0 = (e * outside_z / z, outside_z / z, (e * (both + with_x) + neither + with_x) / z)
    z_third = _complete(outside_z / z, outside_z / z)
    classes = (only / z, both / z, neither / z)
    blanket = two_class_blanket(eps0, *classes)  # c_S = 1/Z
    fam = _make(f"subset(d={d},k={k})", eps0, (e - 1) * only / z, True,
                [(v0, v0, v1), (third, v0, v1),
                 (z_third, z_v0, (z_v0[1], z_v0[0], z_v0[2]))], blanket, classes)
    if k == 1:
        # d-ary randomized response: R(x) >= p Q0 + p Q1 + q W with W uniform on the d - 2
        # values other than x0, x1 and q = (d-2)/Z (our derivation; the privacy blanket)
        p_star = fam.lemma73[0]                      # only / z, rounded up
        q_star = max(0.0, (d - 2) / z * (1 - 1e-12) - 2 * (p_star - only / z))
        fam = Family(fam.name, eps0, fam.beta, (p_star, q_star), fam.lower_laws, fam.vr,
                     fam.blanket, fam.blanket_classes)
    return fam


def local_hashing(eps0: float, g: int) -> Family:
    """Optimized local hashing (OLH; Wang et al., USENIX Security 2017, arXiv:1705.04421,
    Sec. 4.4): report ``(h, y)`` with h drawn from a hash family into ``[g]`` and y the g-ary
    randomized response of ``h(x)`` (probability ``E/(E+g-1)`` of the truth).  With a pairwise
    independent family (h(x0), h(x1) independent uniform), ``beta = (1-1/g)(E-1)/(E+g-1)`` for
    every pair; the lower-bound dataset with the others at a third value needs 3-wise
    independence.  Categories: ``y = h(x0) != h(x1)``, ``y = h(x1) != h(x0)``, other; with the
    others at z also ``y = h(x0)`` differing from ``h(x1)`` and ``h(z)``, likewise for x1.

    Example::

        >>> round(local_hashing(1.0, 2).beta, 6)
        0.231059
    """
    eps0 = _check_eps0(eps0)
    g = check_domain_size("g", g, 2)
    e = math.exp(eps0)
    z = e + g - 1
    split = 1 - 1 / g
    v0 = _complete(split * e / z, split / z)
    v1 = (v0[1], v0[0], v0[2])
    third = _complete(split / g, split / g)
    # others at z, A / B also with y != h(z) (module docstring; 3-wise independence): the
    # report's value is h(x0) (or h(x1)) and differs from the other two hash values
    z_v0 = _complete(split * split * e / z, split * split / z)
    z_third = _complete(split * split / z, split * split / z)
    # blanket c_(h,y) = 1/(|H| Z): collisions h(x0) = h(x1) have probability 1/g
    classes = (split / z, 1 / (g * z), (g - 2 + 1 / g) / z)
    blanket = two_class_blanket(eps0, *classes)
    return _make(f"olh(g={g})", eps0, split * (e - 1) / z, True,
                 [(v0, v0, v1), (third, v0, v1),
                  (z_third, z_v0, (z_v0[1], z_v0[0], z_v0[2]))], blanket, classes)


def _laplace_sf(t: float, x: float, b: float) -> float:
    """``P(x + Lap(b) > t)``."""
    return 0.5 * math.exp(-(t - x) / b) if t >= x else 1 - 0.5 * math.exp(-(x - t) / b)


def _laplace_cdf(t: float, x: float, b: float) -> float:
    """``P(x + Lap(b) < t)`` (no cancellation in the lower tail)."""
    return 0.5 * math.exp(-(x - t) / b) if t <= x else 1 - 0.5 * math.exp(-(t - x) / b)


def laplace_bounded(eps0: float) -> Family:
    """The Laplace mechanism on input ``[0, 1]`` with scale ``1/eps0`` (Dwork et al., TCC 2006),
    eps0-DP.  Its total variation depends on ``|x0 - x1|`` (largest, ``1 - e^(-eps0/2)``, at
    distance 1), so Lemma 7.3 is not used; the privacy blanket is, spread to three classes
    (module docstring, "Laplace").  Lower-bound categories for x0 = 1, x1 = 0: ``y > 1/2 +
    s``, ``y < 1/2 - s``, other, for ``s`` in {0, 1/4, 1/2} and the others at 1 or at 1/2;
    and the full likelihood ratio of the others at 0
    (:mod:`~dpplugins.amplification.laplace_full_statistic`).

    Example::

        >>> laplace_bounded(1.0).lemma73 is None
        True
    """
    eps0 = _check_eps0(eps0)
    b = 1 / eps0
    # the blanket spread to the corners of [1, E]^2 (module docstring, "Laplace"), w11 = 0
    h = math.exp(eps0 / 2)
    blanket = two_class_blanket(eps0, 1 / (h * (h + 1)), 0.0, (h - 1) / (h * (h + 1)))
    laws = []
    for s in (0.0, 0.25, 0.5):
        hi, lo = 0.5 + s, 0.5 - s
        # C = P(lo <= Y <= hi) in closed form (1 - A - B lost its digits at large eps0): for
        # Y = 1 + Lap(b), 0.5 (e^-(1-hi)/b - e^-(1-lo)/b); for Y = 0.5 + Lap(b), 1 - e^(-s/b)
        v0 = (_laplace_sf(hi, 1.0, b), _laplace_cdf(lo, 1.0, b),
              -0.5 * math.exp(-(1.0 - hi) / b) * math.expm1(-(hi - lo) / b))
        v1 = (v0[1], v0[0], v0[2])
        half = (_laplace_sf(hi, 0.5, b), _laplace_cdf(lo, 0.5, b), -math.expm1(-s / b))
        laws += [(v0, v0, v1), (half, v0, v1)]
    fam = _make("laplace[0,1]", eps0, 1 - math.exp(-eps0 / 2), False, laws, blanket)
    return Family(fam.name, eps0, fam.beta, fam.lemma73, fam.lower_laws, fam.vr, fam.blanket,
                  None, "laplace")


#: constructors by CLI name
FAMILIES = {"sue": lambda eps0, d=None, k=None, g=None: unary_encoding(eps0, d),
            "oue": lambda eps0, d=None, k=None, g=None: unary_encoding(eps0, d, optimized=True),
            "subset": lambda eps0, d=None, k=None, g=None: subset_selection(eps0, d, k),
            "olh": lambda eps0, d=None, k=None, g=None: local_hashing(eps0, g),
            "laplace": lambda eps0, d=None, k=None, g=None: laplace_bounded(eps0)}


def _check(family, n, delta) -> tuple[Family, int, float]:
    if not isinstance(family, Family):
        raise ParameterError("family", family, "a Family (unary_encoding, subset_selection, "
                             "local_hashing, laplace_bounded)")
    return family, check_users(n, 2), check_open_unit("delta", delta)


@functools.lru_cache(maxsize=256)
def _epsilon_cached(family: Family, n: int, delta: float) -> ShuffleBound:
    general = _sm.epsilon(("general", family.eps0), n, delta)
    cands = {"fmt21": general.candidates.get("fmt21", general.epsilon)}
    for name in ("fmt23", "fmt21_closed_form", "balle2020"):
        if name in general.candidates:
            cands[name] = general.candidates[name]
    if family.lemma73 is not None:
        p, q = family.lemma73
        cands["errata_lemma73"] = min(errata_pair(family.eps0, n, p, q).epsilon(delta),
                                      family.eps0)
    if family.blanket is not None:
        cands["blanket"] = min(_blanket(family, n).epsilon(delta), family.eps0)
    four = _four_class(family, n)
    if four is not None:
        cands["four_class_blanket"] = min(four.epsilon(delta), family.eps0)
    lattice = _lattice_blanket(family, n)
    best_so_far = min(min(cands.values()), family.eps0)
    # the four-class lattice blanket is below the relaxed one by what class 11's relaxation
    # costs (10 % at most in our checks) and equals the direct four-class sum where that
    # exists: it is only computed where it can win (a saving of time, not of validity)
    useful = best_so_far > 0 and (family.exact_blanket == "laplace" or (
        four is None and cands.get("blanket", math.inf) <= 1.15 * best_so_far))
    if lattice is not None and useful:
        value = lattice.epsilon(delta, hi=best_so_far)
        if value is not None:
            cands["exact_blanket"] = value
    best = min(cands, key=cands.get)
    cands = _sm.margined_candidates(cands, upper=True, cap=family.eps0)
    return ShuffleBound(cands[best], delta, best, family.eps0, n, family.name, cands)


@functools.lru_cache(maxsize=8)
def _four_class(family: Family, n: int) -> FourClassBlanket | None:
    """The exact four-class blanket where the family has class masses and its counts are few
    (:mod:`dpplugins.amplification.shuffle_model_four_class`), else None.  Memoised for 8
    ``(family, n)``: one holds up to about 10 MB of cells."""
    if family.blanket_classes is None:
        return None
    return FourClassBlanket.for_masses(family.eps0, n, *family.blanket_classes,
                                       outside_mass=blanket_complement(family))


@functools.lru_cache(maxsize=64)
def _lattice_blanket(family: Family, n: int) -> LatticeBlanket | None:
    """The blanket bound with the exact law of ``G`` (four classes, or Laplace's continuous
    law; :mod:`dpplugins.amplification.blanket_lattice`), or None where not derived."""
    eps0 = family.eps0
    if family.exact_blanket == "classes" and family.blanket_classes is not None:
        classes = family.blanket_classes
        return LatticeBlanket(eps0, n,
                              lambda eps, spacing: class_blanket_law(eps0, *classes, eps,
                                                                     spacing),
                              lambda eps: class_sd(eps0, *classes, eps))
    if family.exact_blanket == "laplace":
        return LatticeBlanket(eps0, n, lambda eps, spacing: laplace_blanket_law(eps0, eps,
                                                                                spacing),
                              lambda eps: laplace_sd(eps0, eps))
    return None


def _blanket(family: Family, n: int, max_blocks: int | None = None) -> _sm.Blanket:
    gamma, laws = family.blanket
    return _sm.cached_blanket(family.eps0, n, gamma, laws,
                              max_blocks or _sm.MAX_BLANKET_BLOCKS,
                              blanket_complement(family))


def blanket_complement(family: Family) -> float | None:
    """``1 - gamma``, the mass outside the family's blanket, from its closed form (None where
    none is derived): ``(E - 1)(w10 + w11)`` from the class masses -- our derivation: ``R(x0) =
    c E`` on the outputs supporting ``x0`` (classes 10 and 11, blanket mass ``w10 + w11``) and
    ``c`` elsewhere, so ``1 = int R(x0) = gamma + (E - 1)(w10 + w11)`` (checked against ``1 -
    gamma`` for every family at eps0 in 0.3, 1, 4: within 1e-12 relative) -- and ``1 -
    e^(-eps0/2)`` for Laplace (``gamma = e^(-eps0/2)``, module docstring, "Laplace").  ``1 -
    gamma`` by subtraction kept no digit where it is below the
    rounding of gamma (subset selection with d = 2^53: 1.9e-16; Laplace at eps0 = 1e-12:
    5e-13 to 2e-4 relative), and the law of the blanket count with it (a helper's sweep
    against exact enumeration: upper bounds below the exact value)."""
    if family.blanket_classes is not None:
        w10, w11, _ = family.blanket_classes
        return math.expm1(family.eps0) * (w10 + w11)
    if family.exact_blanket == "laplace":
        return -math.expm1(-family.eps0 / 2)
    return None


def epsilon(family: Family, n: int, delta: float) -> ShuffleBound:
    """Certified upper bound on epsilon(delta) of one shuffled round: the smallest of FMT21 and
    the stronger clone at the family's eps0 (and the closed forms they beat) and, where they
    apply, the errata's Lemma 7.3 pair with the family's ``(p, q)``, the relaxed privacy
    blanket, the exact four-class blanket and the blanket with the exact law of its variable
    (``"exact_blanket"``: four classes at every n, Laplace's continuous law; module
    docstring).
    ``.candidates`` lists each.

    Example::

        >>> epsilon(local_hashing(2.0, 8), 10_000, 1e-6).method
        'exact_blanket'
    """
    family, n, delta = _check(family, n, delta)
    return _epsilon_cached(family, n, delta)


_ENGINE_FAILURES = _sm.ENGINE_FAILURES


def _usable(laws: Laws) -> bool:
    """The count-pair engine needs every A/B probability well inside floating point."""
    pi, v0, v1 = laws
    return min(pi[0], pi[1], v0[0], v0[1], v1[0], v1[1]) > 1e-150


@functools.lru_cache(maxsize=256)
def _lower_cached(family: Family, n: int, delta: float) -> ShuffleBound:
    if family.exact_blanket != "laplace":
        return _pairs_lower_cached(family, n, delta)
    hi = _epsilon_cached(family, n, delta).epsilon
    try:   # the full likelihood ratio of one pair (laplace_full_statistic)
        full = laplace_full_statistic.epsilon_lower(family.eps0, n, delta, hi=hi)
    except _ENGINE_FAILURES:
        full = 0.0
    # a dataset pair is searched only where it certifies delta above the target at the full
    # statistic's epsilon (elsewhere it cannot certify more; skipping a candidate only ever
    # lowers a lower bound): the pairs' searches were most of the time at n = 1e6
    cands = _pair_candidates(family, n, delta, beyond=full)
    if full > max(cands.values()):      # (listed only where it certifies more than the pairs)
        cands["full_statistic"] = full
    best = max(cands, key=cands.get)
    cands = _sm.margined_candidates(cands, upper=False)
    return ShuffleBound(cands[best], delta, best, family.eps0, n, "lower bound", cands)


def _pair_candidates(family: Family, n: int, delta: float, beyond: float = 0.0) -> dict:
    """``{"none": 0, "dataset_i": epsilon lower bound}`` of the family's exact dataset pairs;
    with ``beyond > 0`` only the pairs that certify delta above ``delta`` at ``beyond``."""
    cands = {"none": 0.0}
    for i, laws in enumerate(family.lower_laws):
        if not _usable(laws):
            continue
        pair = _sm.CountPair(n, *laws, description=f"{family.name} lower pair {i}")
        try:   # a dataset the engine cannot evaluate is skipped: a lower bound may only drop
            if beyond > 0 and not pair.delta(beyond).lower > delta:
                continue
            cands[f"dataset_{i}"] = pair.epsilon_lower(delta, family.eps0)
        except _ENGINE_FAILURES:
            continue
    return cands


@functools.lru_cache(maxsize=256)
def _pairs_lower_cached(family: Family, n: int, delta: float) -> ShuffleBound:
    cands = _pair_candidates(family, n, delta)
    best = max(cands, key=cands.get)
    cands = _sm.margined_candidates(cands, upper=False)
    return ShuffleBound(cands[best], delta, best, family.eps0, n, "lower bound", cands)


def lower_bound(family: Family, n: int, delta: float) -> ShuffleBound:
    """Certified *lower* bound on epsilon(delta): the best of the family's exact dataset pairs
    after the three-category post-processing and, for Laplace, the full likelihood ratio of one
    pair (``"full_statistic"``, :mod:`~dpplugins.amplification.laplace_full_statistic`; module
    docstring, "Lower bounds").  For Laplace a pair is only searched where it certifies delta
    above the target at the full statistic's epsilon, so ``.candidates`` lists those pairs only.

    Example::

        >>> fam = subset_selection(2.0, 8, 2)
        >>> lower_bound(fam, 10_000, 1e-6).epsilon <= epsilon(fam, 10_000, 1e-6).epsilon
        True
    """
    family, n, delta = _check(family, n, delta)
    return _lower_cached(family, n, delta)


def delta_bounds(family: Family, n: int, epsilon_: float) -> Bounds:
    """Certified ``(lower, upper)`` bounds on delta(epsilon) of one round: upper the smallest
    of the stronger clone pair at the family's eps0, the Lemma 7.3 pair, the relaxed blanket
    and the four-class blanket (where they apply), lower the best dataset pair of
    :func:`lower_bound` (and, for Laplace, its full likelihood ratio).

    Example::

        >>> b = delta_bounds(unary_encoding(1.0, 4), 5, 0.5)
        >>> 0 <= b.lower <= b.upper <= 1
        True
    """
    if not isinstance(family, Family):
        raise ParameterError("family", family, "a Family")
    n = check_users(n, 2)
    eps = check_nonnegative("epsilon", epsilon_)
    if eps >= family.eps0:
        return Bounds(0.0, 0.0)
    # the upper bounds at eps less the rounding margin, the lower ones at eps plus it
    # (shuffle_model.EPS_ROUNDING_MARGIN)
    up, low = float(_sm.below_by_margin(eps)), eps + _sm.EPS_ROUNDING_MARGIN
    upper = _sm._strong_clone(family.eps0, n).delta(up).upper   # every eps0-DP randomizer
    if family.lemma73 is not None:
        upper = min(upper, errata_pair(family.eps0, n, *family.lemma73).delta(up))
    if family.blanket is not None:
        upper = min(upper, _blanket(family, n).delta(up))
    four = _four_class(family, n)
    if four is not None:
        upper = min(upper, four.delta(up))
    lattice = _lattice_blanket(family, n)
    if lattice is not None and upper > 0:
        exact = lattice.delta(up)
        if exact is not None:
            upper = min(upper, exact)
    lower = 0.0
    if family.exact_blanket == "laplace":
        lower = laplace_full_statistic.delta_lower(family.eps0, n, low)
    for laws in family.lower_laws:
        if _usable(laws):
            try:
                lower = max(lower, _sm.CountPair(n, *laws).delta(low).lower)
            except _ENGINE_FAILURES:
                continue
    upper = _sm.upper_at_zero(upper, eps, family.eps0)
    return certified_bounds(lower, upper, f"delta at epsilon={eps!r}")


def epsilon_bounds(family: Family, n: int, delta: float) -> Bounds:
    """``(lower_bound, epsilon)`` of one round."""
    up = epsilon(family, n, delta).epsilon
    return certified_bounds(lower_bound(family, n, delta).epsilon, up, f"epsilon at delta={delta!r}")


# --------------------------------------------------------------------------------------------
# rounds composed by PLD
# --------------------------------------------------------------------------------------------
def upper_profile(family: Family, n: int):
    """Vectorised certified upper bound on one round's privacy profile ``delta(eps)``, eps >= 0,
    valid in both directions: the smallest of the stronger clone pair (below FMT21's) and (where
    they apply) the
    Lemma 7.3 pair and the relaxed blanket (48 blocks of M), all symmetric bounds; between
    probe points only the bounds that were (nearly) the smallest at a probe are evaluated
    (:func:`~dpplugins.amplification.shuffle_model.smallest_bound`; valid for any subset)."""
    family, n, _ = _check(family, n, 0.5)
    strong = _sm._strong_clone(family.eps0, n)   # every eps0-DP randomizer (shuffle_model)
    bounds = [lambda e: strong.delta(e).upper]
    if family.lemma73 is not None:
        bounds.append(errata_pair(family.eps0, n, *family.lemma73).delta)
    if family.blanket is not None:
        bounds.append(_blanket(family, n, 48).delta)

    memo = _profile_memo(family, n)   # values per eps (every PLD of (family, n) reuses them)

    def fn(eps):
        eps = np.asarray(eps, dtype=float)
        missing = sorted({float(e) for e in eps.ravel()} - memo.keys())
        # delta(eps) = 0 at eps >= eps0 (the round is eps0-DP)
        below = [e for e in missing if e < family.eps0]
        memo.update((e, 0.0) for e in missing if e >= family.eps0)
        memo.update(zip(below, _sm.smallest_bound(bounds, _sm.below_by_margin(below).tolist()
                                                  ).tolist()))
        return np.array([memo[float(e)] for e in eps.ravel()]).reshape(eps.shape)
    return fn


@functools.lru_cache(maxsize=64)
def _profile_memo(family: Family, n: int) -> dict:
    return {}


def _grid_step(family: Family, n: int) -> float:
    """1/400 of the round's epsilon at delta = 1e-6, in [1e-6, 1e-2], and no finer than
    :func:`~dpplugins.amplification.shuffle_model.profile_grid_floor`."""
    return max(float(np.clip(epsilon(family, n, 1e-6).epsilon / 400, 1e-6, 1e-2)),
               _sm.profile_grid_floor(family.eps0))


def round_pld(family: Family, n: int, *, value_discretization_interval: float | None = None
              ) -> PrivacyLossDistribution:
    """Dominating PLD of one shuffled round of ``family``: :func:`upper_profile` turned into a
    PLD by pessimistic connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, PETS 2022,
    arXiv:2207.04380; :meth:`PrivacyLossDistribution.from_privacy_profile`), sampled at 80
    points up to where FMT21's clone pair falls below 1e-16.  Every epsilon of it, and of its
    compositions by FFT, is an upper bound.

    Example::

        >>> pld = round_pld(unary_encoding(2.0, 8), 1000)
        >>> pld.epsilon_for_delta(1e-6, lower=False).upper <= 2.0
        True
    """
    family, n, _ = _check(family, n, 0.5)
    h = value_discretization_interval or _grid_step(family, n)
    eps_hi = max(_sm._fmt21_clone(family.eps0, n).epsilon(1e-16, family.eps0), 1e-6)
    return PrivacyLossDistribution.from_privacy_profile(
        upper_profile(family, n), epsilon_max=eps_hi, symmetric=True,
        value_discretization_interval=h, profile_step=max(h, eps_hi / 80),
        description=f"shuffle model, {family.name} (eps0={family.eps0:g}, n={n})")


def lower_pair_index(family: Family, n: int, *, delta: float | None = None,
                     epsilon_: float | None = None) -> int | None:
    """Index (into ``family.lower_laws``) of the lower-bound dataset pair to compose: the best
    one-round pair at ``delta`` (:func:`lower_bound`), or at ``epsilon_`` (largest one-round
    lower delta; ties, e.g. all 0, fall back to delta = 1e-6); None if no pair is usable.  Any
    choice gives a certified lower bound: this only picks a good one."""
    family, n, _ = _check(family, n, 0.5)
    if epsilon_ is not None:
        best, index = 0.0, None
        for i, laws in enumerate(family.lower_laws):
            if not _usable(laws):
                continue
            try:
                value = _sm.CountPair(n, *laws).delta(float(epsilon_)).lower
            except _ENGINE_FAILURES:
                continue
            if value > best:
                best, index = value, i
        if index is not None:
            return index
        delta = 1e-6
    family, n, delta = _check(family, n, 1e-6 if delta is None else delta)
    method = _pairs_lower_cached(family, n, delta).method
    return int(method.split("_")[1]) if method.startswith("dataset_") else None


def lower_round_pld(family: Family, n: int, index: int, *,
                    value_discretization_interval: float | None = None):
    """PLD of the exact lower-bound dataset pair ``family.lower_laws[index]`` of one round (the
    three-category count pair, :class:`~dpplugins.amplification.shuffle_model.CountPair`, on a
    window, its outcomes merged by privacy loss into the cells of the grid, and the mass
    outside the window merged into one atom: post-processings,
    :func:`~dpplugins.amplification.count_pair.count_pair_loss_binned_pmfs`), as a
    :class:`~dpplugins.amplification.shuffle_model.LowerPLD`: use its *lower* bounds, and charge
    ``count rho (1 + e^eps)`` for ``count`` rounds.

    When that window has more than 80,000,000 outcomes (n above about 1.3e6; a few seconds
    below it), the pair is post-processed further to the count of one category, A or B,
    whichever gives the larger one-round lower bound at delta = 1e-6 (our construction): with
    the other users iid with law ``pi`` and the differing user with law ``v_b``, the count of
    category c is ``Bin(n - 1, pi_c) + Bern(v_b,c)`` exactly, on a window of about ``sqrt(n)``
    values.  Dropping the other counts is a post-processing, so its PLD is dominated by the
    shuffled round's and composes into certified lower bounds; it gives up about a third of the
    one-round epsilon (numerically checked against the three-category pair at n = 1e4 and
    1e5: 0.64-0.97 of it)."""
    family, n, _ = _check(family, n, 0.5)
    h = value_discretization_interval or _grid_step(family, n)
    laws = family.lower_laws[index]
    binned = _count_pair_loss_binned_pmfs(_sm.CountPair(n, *laws), h)
    if binned is not None:   # its bound on the mass outside the window is not needed here
        p0, p1, relative, _ = binned
        return _sm.LowerPLD.of_pmfs(p0, p1, relative, h, f"exact lower-bound pair {index} of "
                                                         f"{family.name} (n={n})")
    best = None
    for c, name in ((0, "A"), (1, "B")):
        pi, v0, v1 = (law[c] for law in laws)
        lp = _sm.LowerPLD.of_pmfs(*_sm._binary_like_pmfs(n - 1, pi, v0, v1), h,
                                  f"lower-bound pair {index} of {family.name} (n={n}), count "
                                  f"of category {name}")
        value = lp.pld.epsilon_for_delta(1e-6).lower
        if best is None or value > best[0]:
            best = (value, lp)
    return best[1]


def composed_epsilon_bounds(family: Family, n: int, count: int, delta: float, *,
                            value_discretization_interval: float | None = None,
                            lower: bool = True) -> Bounds:
    """Certified ``(lower, upper)`` epsilon at ``delta`` for ``count`` adaptive rounds of the
    shuffled family (fresh randomness each).  Upper: :func:`upper_profile` as a dominating PLD
    (:func:`round_pld`; pessimistic connect-the-dots, Doroshenko, Ghazi, Kamath, Kumar,
    Manurangsi, PETS 2022, arXiv:2207.04380) composed by FFT, at most ``count eps0``.  Lower: the
    exact pmfs of the best lower-bound dataset pair (:func:`lower_bound`; every round on the same
    datasets; one category's count of it above about 1.3e6 users, :func:`lower_round_pld`)
    composed the same way, their relative error ``rho`` charged as ``count rho (1 + e^eps)``
    (as in :func:`dpplugins.amplification.shuffle_model.composed_epsilon_bounds`), and at least
    the one-round lower bound; ``lower=False`` reports 0 for it.

    Example::

        >>> b = composed_epsilon_bounds(local_hashing(2.0, 8), 2000, 4, 1e-6)
        >>> 0 < b.lower <= b.upper <= 8.0
        True
    """
    family, n, delta = _check(family, n, delta)
    count = check_count("count", count, minimum=0)
    if count == 0:
        return Bounds(0.0, 0.0)
    return composed_rounds_epsilon_bounds([(family, n, count)], delta,
                                          value_discretization_interval=
                                          value_discretization_interval, lower=lower)


def composed_delta_bounds(family: Family, n: int, count: int, epsilon_: float, *,
                          value_discretization_interval: float | None = None,
                          lower: bool = True) -> Bounds:
    """Certified ``(lower, upper)`` delta at ``epsilon_`` for ``count`` adaptive rounds of the
    shuffled family: the counterpart of :func:`composed_epsilon_bounds`, built and certified the
    same way (upper: the composed :func:`round_pld`, 0 at ``epsilon_ >= count eps0``; lower: the
    composed exact pair of :func:`lower_pair_index` at ``epsilon_``, minus its error charge).

    Example::

        >>> b = composed_delta_bounds(unary_encoding(2.0, 8), 2000, 3, 2.0)
        >>> 0 <= b.lower <= b.upper < 1
        True
    """
    if not isinstance(family, Family):
        raise ParameterError("family", family, "a Family")
    n = check_users(n, 2)
    count = check_count("count", count, minimum=0)
    eps = check_nonnegative("epsilon", epsilon_)
    if count == 0:
        return Bounds(0.0, 0.0)
    return composed_rounds_delta_bounds([(family, n, count)], eps,
                                        value_discretization_interval=
                                        value_discretization_interval, lower=lower)


# --------------------------------------------------------------------------------------------
# rounds of several randomizers (families, k-RR, (eps0, delta0) randomizers) composed by PLD
# --------------------------------------------------------------------------------------------
def _as_rounds(rounds) -> list[tuple[object, int, int]]:
    out = []
    for i, item in enumerate(rounds):
        if isinstance(item, _sm.Round):
            spec, n, count = item.randomizer, item.n, item.count
        else:
            try:
                spec, n, count = item
            except (TypeError, ValueError):
                raise ParameterError(f"rounds[{i}]", item, "a Round or a (randomizer or Family, "
                                     "n, count) triple") from None
        spec = spec if isinstance(spec, (Family, _het.GroupedKRR)) else _sm.randomizer(spec)
        n = check_users(n, 2 if isinstance(spec, Family) else 1)
        if isinstance(spec, _het.GroupedKRR) and n != spec.users:
            raise ParameterError(f"rounds[{i}].n", n, f"{spec.users:,}, the users of the "
                                 "randomizer's groups")
        count = check_count("count", count, minimum=0)
        if count:
            out.append((spec, n, count))
    return out


def _eps0_sum(rs) -> float | None:
    """``sum count eps0`` of the rounds, rounded up, when every round is pure eps0-DP (else
    None; :func:`dpplugins.amplification.shuffle_model.pure_composition_epsilon`)."""
    return _sm.pure_composition_epsilon((spec, count) for spec, _, count in rs)


def _grid(rs, h: float | None) -> float:
    if h is not None:
        return h
    return _sm.composition_grid_step([_round_grid_step(spec, n) for spec, n, _ in rs],
                                     [spec.eps0 for spec, _, _ in rs])


def _round_grid_step(spec, n: int) -> float:
    if isinstance(spec, Family):
        return _grid_step(spec, n)
    if isinstance(spec, _het.GroupedKRR):
        return _het.grid_step(spec)
    return _sm.default_grid_step(spec, n)


def _upper_pld(rs, h: float) -> PrivacyLossDistribution:
    total = None
    for spec, n, count in rs:
        if isinstance(spec, Family):
            one = round_pld(spec, n, value_discretization_interval=h)
        elif isinstance(spec, _het.GroupedKRR):
            one = _het.round_pld(spec, h)
        else:
            one = _sm.round_pld(spec, n, value_discretization_interval=h)
        part = one.self_compose(count)
        total = part if total is None else total.compose(part)
    return total


def _lower_pld(rs, h: float, *, delta=None, epsilon_=None):
    """The composed exact lower-bound pairs (one per round kind, every round on its datasets)
    and the total relative error ``sum count rho``; None if a family's pair is unavailable."""
    total, rho = None, 0.0
    for spec, n, count in rs:
        if isinstance(spec, Family):
            index = lower_pair_index(spec, n, delta=delta, epsilon_=epsilon_)
            if index is None:
                return None, 0.0
            lp = lower_round_pld(spec, n, index, value_discretization_interval=h)
        elif isinstance(spec, _het.GroupedKRR):
            lp = _het.lower_round_pld(spec, h)
        else:
            lp = _sm.lower_round_pld(spec, n, value_discretization_interval=h)
        part = lp.pld.self_compose(count)
        total = part if total is None else total.compose(part)
        rho += count * lp.rho
    return total, rho


def composed_rounds_epsilon_bounds(rounds, delta: float, *,
                                   value_discretization_interval: float | None = None,
                                   lower: bool = True) -> Bounds:
    """Certified ``(lower, upper)`` epsilon at ``delta`` for adaptive rounds of several shuffled
    randomizers; ``rounds``: :class:`~dpplugins.amplification.shuffle_model.Round` or
    ``(spec, n, count)`` triples, ``spec`` a :class:`Family`, a randomizer of
    :func:`dpplugins.amplification.shuffle_model.randomizer` (k-RR, general (eps0, delta0)) or a
    :class:`~dpplugins.amplification.shuffle_model_heterogeneous.GroupedKRR` (k-RR with a local
    epsilon per group; ``n`` its users).

    Upper: every round's dominating PLD -- :func:`round_pld` for a family (its own profile:
    the stronger clone, Lemma 7.3 and the relaxed blanket),
    :func:`dpplugins.amplification.shuffle_model.round_pld` otherwise --
    composed by FFT on one grid (adaptive composition of dominating pairs; Doroshenko et al.
    2022), at most the sum of the eps0 when every round is pure.  A family round may equally be
    accounted as a general eps0-LDP randomizer (each family is exactly eps0-LDP), but its own
    profile is never larger.  Lower: the rounds' exact lower-bound pairs (a family's best
    dataset pair, :func:`lower_pair_index`; :func:`dpplugins.amplification.shuffle_model.
    lower_round_pld` otherwise -- *not* the general randomizer's binary-RR pair, which is not
    this family; above about 1.3e6 users a family's pair is reduced to one category's count,
    :func:`lower_round_pld`) composed the same way, the error charged ``sum count rho (1 +
    e^eps)``, and at least the best one-round lower bound (any round is a post-processing of
    the composition).  Where delta is below what the composition can certify, pure rounds
    answer with the sum of the eps0 (a NumericalError only when some round has delta0 > 0).

    Example::

        >>> from dpplugins.amplification.shuffle_model import Randomizer
        >>> b = composed_rounds_epsilon_bounds([(unary_encoding(1.0, 8), 1000, 2),
        ...                                     (Randomizer("krr", 1.0, 2), 1000, 1)], 1e-6)
        >>> 0 <= b.lower <= b.upper <= 3.0
        True
    """
    delta = check_open_unit("delta", delta)
    rs = _as_rounds(rounds)
    if not rs:
        return Bounds(0.0, 0.0)
    h = _grid(rs, value_discretization_interval)
    up = _sm.composed_upper_or_cap(_upper_pld(rs, h), delta, _eps0_sum(rs))
    low = 0.0
    if lower:
        low_pld, rho = _lower_pld(rs, h, delta=delta)
        margin = rho * (1 + math.exp(min(up, 700.0)))
        if low_pld is not None and delta + margin < 1:
            try:
                low = low_pld.epsilon_for_delta(min(delta + margin, 0.999999)).lower
            except NumericalError:
                low = 0.0
        # a round's own (three-category) bound can beat a composition of count pairs
        low = max(low, single_round_epsilon_lower(rs, delta),
                  _sm.event_epsilon_lower(rs, delta))
    return certified_bounds(max(low, 0.0), up, f"epsilon at delta={delta!r}")


def single_round_epsilon_lower(rounds, delta: float) -> float:
    """The best one-round certified lower bound on epsilon(delta) among ``rounds`` (families and
    randomizers; :func:`~dpplugins.amplification.shuffle_model.best_single_round_lower`): a
    family's :func:`lower_bound`, a randomizer's fixed datasets (no search).  A lower bound for
    any adaptive composition of the rounds."""
    def one(spec, n):
        if isinstance(spec, Family):
            return lower_bound(spec, n, delta).epsilon
        if isinstance(spec, _het.GroupedKRR):
            return _het.epsilon_bounds(spec.groups, spec.k, delta).lower
        return _sm.fixed_dataset_epsilon_lower(spec, n, delta)
    return _sm.best_single_round_lower(rounds, one)


def single_round_delta_lower(rounds, epsilon_: float) -> float:
    """The best one-round certified lower bound on delta(epsilon_) among ``rounds`` (see
    :func:`single_round_epsilon_lower`)."""
    def one(spec, n):
        if isinstance(spec, Family):
            return delta_bounds(spec, n, epsilon_).lower
        if isinstance(spec, _het.GroupedKRR):
            return _het.delta_bounds(spec.groups, spec.k, epsilon_).lower
        return _sm.fixed_dataset_delta_lower(spec, n, epsilon_)
    return _sm.best_single_round_lower(rounds, one)


def composed_rounds_delta_bounds(rounds, epsilon_: float, *,
                                 value_discretization_interval: float | None = None,
                                 lower: bool = True) -> Bounds:
    """Certified ``(lower, upper)`` delta at ``epsilon_`` for adaptive rounds of several shuffled
    randomizers: the counterpart of :func:`composed_rounds_epsilon_bounds`, built and certified
    the same way (upper 0 at ``epsilon_ >=`` the sum of the eps0 when every round is pure).

    Example::

        >>> from dpplugins.amplification.shuffle_model import Randomizer
        >>> b = composed_rounds_delta_bounds([(local_hashing(1.0, 3), 500, 2),
        ...                                   (Randomizer("general", 1.0), 500, 1)], 1.0)
        >>> 0 <= b.lower <= b.upper < 1
        True
    """
    eps = check_nonnegative("epsilon", epsilon_)
    rs = _as_rounds(rounds)
    if not rs:
        return Bounds(0.0, 0.0)
    cap = _eps0_sum(rs)
    if cap is not None and eps >= cap:
        return Bounds(0.0, 0.0)
    h = _grid(rs, value_discretization_interval)
    try:
        up = min(_upper_pld(rs, h).delta_for_epsilon(eps, lower=False).upper, 1.0)
    except NumericalError:   # the composition is out of reach: delta is at most 1
        up = 1.0
    low = 0.0
    if lower and up > 0:
        low_pld, rho = _lower_pld(rs, h, epsilon_=eps)
        if low_pld is not None:
            try:
                low = max(0.0, low_pld.delta_for_epsilon(eps).lower
                          - rho * (1 + math.exp(min(eps, 700.0))))
            except NumericalError:
                low = 0.0
        low = max(low, single_round_delta_lower(rs, eps), _sm.event_delta_lower(rs, eps))
    return certified_bounds(low, up, f"delta at epsilon={eps!r}")
