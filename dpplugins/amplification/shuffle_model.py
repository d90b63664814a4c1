"""The shuffle model with a known local randomizer: certified bounds that use its structure.

Setting.  ``n`` users each apply the *same* local randomizer to their own value and the server
sees the multiset of reports (a uniformly random permutation); neighbouring datasets differ in
one user's value (*replace one*, which covers zero-out).  Rounds are composed adaptively, each
with fresh randomness.  For adaptive sequences of arbitrary eps0-DP randomizers see
:mod:`dpplugins.amplification.shuffle` (FMT21), which this module uses for general randomizers
beside the stronger clone (below: valid when every user runs the same randomizer).
``log`` is natural, ``E = e^eps0``.

Validity verdict: the variation-ratio bound (Wang et al., VLDB 2024)
---------------------------------------------------------------------
*What we relied on.*  We could not read the papers from here.  We used (i) the pair that the
authors' public code evaluates (github.com/wangsw/PrivacyAmplification, ``unifiedamplification.py``,
read through a code index; no code copied): for parameters ``(p, beta, q)`` the differing user
reports 0 w.p. ``p beta/(p-1)``, 1 w.p. ``beta/(p-1)`` and *blank* otherwise (0 and 1 swapped on
X1), every other user reports 0 and 1 w.p. ``r = p beta/((p-1) q)`` each and blank otherwise, and
the bound is the divergence of the counts ``(n0, n1)``; (ii) the parameter table of that
repository's README; (iii) for Su, Cheng, Wang (arXiv:2504.07414), only the abstract: a "general
clone" framework whose optimal decomposition is the privacy blanket of Balle, Bell, Gascon,
Nissim (CRYPTO 2019).  Our own derivation of the decomposition behind (i): with
``P = R(x1^0)``, ``Q = R(x1^1)``, ``beta = TV(P, Q)``, ``C0 = (P - Q)_+/beta``,
``C1 = (Q - P)_+/beta``, one has ``P = p beta/(p-1) C0 + beta/(p-1) C1 + (1 - beta (p+1)/(p-1)) W``
(``W >= 0`` because ``P <= p Q``) and ``R(x) >= r/2 (C0 + C1)`` (because ``P <= q R(x)``); this
reproduces (i) exactly.

*The gap.*  Whenever ``beta < (p-1)/(p+1)`` the differing user reports blank with probability
``1 - beta (p+1)/(p-1) > 0``, and its blank component ``W`` differs from the other users'.  That is
FMT23's Lemma 3.5 at ``p < 1/(e^eps0 + 1)``: to turn the counts back into the shuffled output a
post-processing must decide whether user 1 is among the blank reporters, and the posterior of
that event given ``(n0, n1)`` depends on whether the data is X0 or X1 (errata, Sec. 7).  The
reduction is not only unproven there, it is **false**: for 3-RR with eps0 = 1 and n = 2,
X0 = (a, a), X1 = (b, a), the event "both report a" has ``P0 = (e/(e+2))^2``,
``P1 = e/(e+2)^2``, so ``delta(0.825) >= 0.05329`` while the pair gives 0.01960; for 4-RR,
eps0 = 2, n = 2, ``delta(1.8) >= 0.09170`` against 0.02294.  Our exhaustive enumeration finds
such violations for k = 3..6 at every n <= 6 (the tests keep the two n = 2 cases and the next
one), and with every other user holding a they last:
4-RR, eps0 = 2, n = 100 has ``delta(1.45) = 9.3e-9`` against the pair's 5.2e-9.  The same pair
is FMT23's original k-RR Theorem 5.2, which the errata withdrew.

*The general-randomizer claim.*  For "general mechanisms" the table sets
``beta = (E-1)/(E+1)``, ``p = q = E``: the blank mass is 0 and the pair is exactly FMT23's
stronger-clone pair (hence the 0.007 % agreement).  Their reduction does not justify it for a
randomizer with a smaller beta (if ``P(y) = Q(y) = E R(x)(y)`` for some output y, no component
``r/2 (C0 + C1)`` with ``r = 2/(E+1)`` fits under ``R(x)``, and "a smaller beta is no worse"
would need the reduction at the smaller beta, the false case above).  **The bound itself
holds, by a different argument (our derivation)**, for every eps0-DP randomizer ``R`` that all
n users run (one randomizer; per-user randomizers keep FMT21):

1. *Blanket* (Balle, Bell, Gascon, Nissim, CRYPTO 2019, arXiv:1903.02837, Sec. 3):
   ``c(y) = min_x R(x)(y)``, mass ``gamma``; every other user draws from ``c / gamma`` w.p.
   ``gamma`` whatever its value, and revealing who did not, and their reports, is a
   post-processing that helps the adversary.  With ``r_i = R(x_i) / c`` for the differing
   user's two values, ``delta(eps) <= (1/n) E[(G_1 + ... + G_n)_+]``, ``G_i`` i.i.d., ``G =
   r_0(y) - e^eps r_1(y)`` with ``y ~ c`` (mass ``gamma``), 0 otherwise (the identity ``E[f(K)] /
   n = gamma E[f(M) / M]``, ``K ~ Bin(n, gamma)``, ``M - 1 ~ Bin(n - 1, gamma)``, ``f(0) = 0``).
2. *Spread* (Jensen): eps0-DP gives ``1 <= r_i <= E``.  Replacing each ``r_i(y)`` by ``E`` w.p.
   ``(r_i - 1)/(E - 1)`` and by 1 otherwise, independently, keeps the conditional mean of the
   sum of the ``G``, so ``E[(sum)_+]`` can only grow (``z -> z_+`` is convex).  The new ``G``
   takes ``v10 = E - e^eps``, ``v01 = 1 - E e^eps``, ``v11 = E (1 - e^eps)``, ``v00 = 1 - e^eps``
   with masses ``w10 = w01 = m - t``, ``w11 = t``, ``w00 = gamma - 2m + t``, where ``m = int c
   (r_i - 1)/(E - 1) = (1 - gamma)/(E - 1)`` for both values (``int c r_i = 1``) and ``t = int
   c (r_0 - 1)(r_1 - 1)/(E - 1)^2``, and 0 w.p. ``1 - gamma``; ``gamma >= 1/E`` because ``c >=
   R(x_0)/E``.
3. *Extremes*: ``v01 <= v11 <= v00 <= v10`` and ``v10 + v01 = v11 + v00``, so mass ``t`` on
   ``v10`` and ``v01`` is a mean-preserving spread of ``t`` on ``v11`` and ``v00``: the smallest
   admissible ``t``, ``max(0, 2m - gamma)`` (``w00 >= 0``), is the worst.  Along that worst
   case, over ``gamma`` in ``[1/E, 1]``, lowering ``gamma`` above ``2/(E+1)`` moves mass from ``v00`` to ``v10``, ``v01`` and 0 (a spread:
   ``v00`` is their barycentre), and below ``2/(E+1)`` moves mass from ``v10``, ``v01`` to ``v11``
   and 0 (a contraction; 0 lies in ``[v01, v10]`` for eps <= eps0).  Every ``E[(sum)_+]`` is
   therefore at most its value at ``gamma = 2/(E+1)``, ``t = 0``: ``G = v10`` or ``v01`` w.p.
   ``1/(E+1)`` each, which is the stronger clone pair (binary RR's blanket), ``_strong_clone``.

Checked: exact enumeration of the shuffled output over every dataset for about 400
randomizers (k-RR, randomizers with ``gamma < 2/(E+1)``, extreme points of the LDP polytope,
random ones; eps0 in {0.5, 1, 2, 3}, n <= 5) never exceeds it; 36 of them, and each step of
the argument, are checked by the project's test suite.  So general eps0-DP
randomizers get the stronger clone (``"fmt23"``) beside FMT21; Wang et al.'s general number is
the same pair, ours certified.

*Related facts.*  (a) For k-RR, Wang et al.'s pair is a post-processing of the exact
shuffled k-RR on the dataset where every other user holds a third value c (merge every value
but a, b into "blank": the differing user then reports a, b, blank w.p. ``E/Z, 1/Z, (k-2)/Z``
and the others ``1/Z, 1/Z, (E+k-3)/Z``, ``Z = E + k - 1``), so their k-RR numbers are certified
**lower** bounds (:func:`krr_lower_pairs`).  (b) A randomizer that decomposes with *no* blank --
``P = E/(E+1) C0 + 1/(E+1) C1``, ``Q`` the same with C0 and C1 swapped, and
``R(x) >= r/2 (C0 + C1)`` for every input x -- is covered by FMT21's proof verbatim with clone
probability ``r``, because user 1 is then never among the non-clones; binary and k-ary RR
qualify with ``r = 2/(E+1)`` (the errata's class E_eps0, Thm 7.1; the k-RR derivation is in
:mod:`dpplugins.amplification.shuffle`).  (c) The privacy blanket (below) is valid for every
randomizer and, for k-RR, within 0.62 % of the exact shuffled k-RR on the dataset of (a) with
all four counts kept (:mod:`dpplugins.amplification.krr_third_value`; the pooled pair (a) left
up to 8.7 % at eps0 = 8 and 1000 users) on the grid n = 1e3 to 1e6, eps0 = 0.5 to 8, k = 4,
16, 64, delta = 1e-6 and 1e-8 (benchmark ``benchmarks/shuffle_model_vs_vldb.py``).

Binary randomized response: the exact worst case
------------------------------------------------
The output is the number S of reported 1s.  A dataset is ``j``, the number of other users holding
1; with ``alpha = E/(E+1)``, ``beta = 1 - alpha``: ``S = W_j + victim``,
``W_j = Bin(j, alpha) + Bin(n-1-j, beta)``, ``P0(s) = beta W(s-1) + alpha W(s)``,
``P1(s) = alpha W(s-1) + beta W(s)``.  Flipping every bit maps j to ``n-1-j`` and swaps the
directions, so ``j <= (n-1)/2`` with both directions covers every pair of neighbours.  For a
block ``j in [a, b]`` each dataset is the *core* (a users holding 1, ``n-1-b`` holding 0) plus
``b - a`` independent reports; each of those is ``(1 - 2 beta)`` times its own bit plus
``2 beta Bern(1/2)``, so revealing which of them flipped a fair coin (``F ~ Bin(b-a, 2 beta)``,
the same for every j in the block) and the others' bits leaves "core + F fair coins", whose
divergence decreases in F.  Hence every dataset of the block is bounded by the core with
``F0`` fair coins plus ``P(F < F0)`` (``F0`` an e^-75 quantile).  Branch and bound
(:class:`BinaryRRWorstCase`) splits the blocks whose bound exceeds ``(1 + tol)`` times the best
exact singleton value (tol = 0.4 %), which is itself a certified lower bound -- so the reported
upper bound is within tol of the truth for every (eps0, n, delta).  Our construction.

k-ary randomized response: the blanket
--------------------------------------
``R(x) = gamma U + (1 - gamma) delta_x`` with ``U`` uniform on the k values and
``gamma = k/Z``.  Reveal which of the other users drew from U and the values of the rest: their
reports do not depend on X0/X1, so the view is ``M - 1 ~ Bin(n - 1, gamma)`` and the multiset of
the differing user's report with ``M - 1`` uniform reports, whose sufficient statistic is the
counts of a, b and the rest; the divergence is ``sum_m P(M = m) delta_m`` exactly, and
``delta_m`` does not increase with m (adding a uniform report is a post-processing), which
:class:`KRRBlanket` uses to sum over blocks of m.  The decomposition is Balle et al.'s (2019);
the exact pair, its monotone block sum and this proof are ours.  Every k-RR bound is the minimum
of the blanket and FMT23's stronger clone (never above FMT21: fewer clones is a
post-processing).

Lower bounds
------------
Exact shuffled k-RR on fixed datasets (:func:`krr_lower_pairs`), all :class:`CountPair` s:
"others at a" (exact, every k) and "others at c" (Wang et al.'s pair, exact for k = 3); for
binary RR the best singleton of the branch and bound.  A general randomizer may be binary or
ternary RR, so those bound every valid general upper bound from below.

Parameter table (variation-ratio parametrisation; ``q`` bounds ``P / R(x)``)
---------------------------------------------------------------------------
=========================  ==========  =============================================  =====
randomizer                 p           beta                                           q
=========================  ==========  =============================================  =====
general eps0-LDP           E           (E-1)/(E+1)                                    E
binary RR                  E           (E-1)/(E+1)                                    E
k-RR                       E           (E-1)/(E+k-1)                                  E
local hashing, g buckets   E           (E-1)/(E+g-1)                                  E
unary encoding (RAPPOR)    E           (e^(eps0/2)-1)/(e^(eps0/2)+1)                  E
Laplace on [0, 1]          E           1 - e^(-eps0/2)                                E
k-subset of d              E           (E-1)(C(d-1,k-1)-C(d-2,k-2))/(E C(d-1,k-1)+C(d-1,k))  E
=========================  ==========  =============================================  =====

Sources: Wang et al.'s README (all rows); rows 1-3 re-derived here (beta is the total variation
``(E-1)/(E+k-1)`` of k-RR between two inputs; p, q its likelihood-ratio bounds).  Use: rows 1-2
have ``beta = (p-1)/(p+1)`` (no blank); binary RR is in E_eps0, row 1 holds by the blanket
argument above.  Every other row has a positive blank mass, where the reduction is false
(above), so none of them is used as an upper bound; k-RR uses the blanket instead.  Unary
encoding, subset selection and local hashing get a valid family-specific bound from the FMT23
errata's Lemma 7.3 instead (:mod:`dpplugins.amplification.shuffle_model_families`,
:mod:`dpplugins.amplification.shuffle_model_errata`; for k-RR that pair *is* the blanket);
Laplace has no Lemma 7.3 pair.  Those families also get a relaxed privacy blanket
(:class:`Blanket`; the module there says how) and, where the counts are few, the exact
four-class blanket (:mod:`dpplugins.amplification.shuffle_model_four_class`).

Numerics (what is certified)
----------------------------
:class:`CountPair` (:mod:`dpplugins.amplification.count_pair`, the one implementation, also
of FMT21's clone pair in :mod:`dpplugins.amplification.shuffle`): one closed-form binomial-tail
sum per value of ``T = N_A + N_B`` on a window holding all but e^-75 of T (the rest charged in
full); tails by Boost's incomplete beta (SciPy >= 1.12; checked at import, else
``scipy.stats``), assumed accurate to ``1e-12 + 64 u n`` relative (cephes' ``bdtrc`` is off by
~1e-9 and is not used); long windows walk the exact recurrences of
:func:`~dpplugins.amplification.count_pair._binom_path` with running absolute error bounds.
:class:`_BinaryCore`: exact convolutions of binomial pmfs on e^-50 windows, the relative error
of every entry bounded, the dropped mass charged ``(1 + e^eps)`` times; windows
longer than 2048 are convolved by FFT (:func:`_fft_convolve`, Higham's error bound for the FFT,
its l1 absolute error charged ``2 (1 + e^eps)`` times), which makes n = 1e8 take seconds.  Where
that charge (about 1e-11 at n = 1e8 in double) would move a block's answer by more than a tenth
of the search's tolerance, the core is convolved again in long double (a charge about 2000 times
smaller), then directly if that is short enough
(:meth:`BinaryRRWorstCase._accurate_core`): the exact worst case then answers down to delta =
1e-12 or 1e-13 at n = 1e8 (1e-15 at n = 1e6 for some eps0); below, the search stops at the
charge and FMT23's stronger clone answers (:func:`_binary_exact`).  Every
epsilon is a checked point of a safeguarded Newton iteration.

Approximate-DP randomizers
--------------------------
``("general", eps0, delta0)`` uses Balle, Bell, Gascon, Nissim (2020), Thm 5.1, through
:mod:`dpplugins.amplification.shuffle`.  FMT21's own extension to (eps0, delta0)-DP randomizers
(Feldman, McMillan, Talwar, FOCS 2021, arXiv:2012.12803, Sec. 3) was not readable through our
tools (only the opening of the paper was reachable), so it is not implemented.  A local epsilon
per group of users is bounded for k-RR only
(:mod:`dpplugins.amplification.shuffle_model_heterogeneous`).

Composition
-----------
One round's upper profile (:func:`upper_profile`; binary RR: the exact worst case for
n <= 1e6, above it the blanket and stronger clone -- a profile needs every core at every grid
point, which costs minutes beyond that) becomes a dominating PLD
(:func:`round_pld`, pessimistic connect-the-dots); rounds compose by FFT.  The lower bound
composes, the same way, the PLD of an exact pair dominated by one round
(:func:`lower_round_pld`; k-RR: the 2-D "others at c" pair when its support is small, else its
count of b); its pmfs are within l1 ``rho`` of the exact ones, charged as
``count rho (1 + e^eps)`` (:func:`composed_epsilon_bounds`), and for binary RR and the count
of b every stored mass is also within a relative bound of the exact one, which gives a second
lower bound shifted by about 1e-10 in epsilon instead (:class:`RelativeCorrection`); the larger
is reported.

Example::

    >>> from dpplugins.amplification import shuffle_model as sm
    >>> up = sm.epsilon(("binary_rr", 2.0), 10_000, 1e-6)
    >>> low = sm.lower_bound(("binary_rr", 2.0), 10_000, 1e-6)
    >>> up.method, (up.epsilon - low.epsilon) / up.epsilon < 0.01
    ('binary_rr_exact', True)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import fft as sp_fft
from scipy import special, stats

from dpplugins.amplification import shuffle as _shuffle
# the count-pair engine (re-exported here: this module's bounds are count pairs)
from dpplugins.amplification.count_pair import (_REL_SF, UNIT_ROUNDOFF, CountPair,
                                                _lower_epsilon, binomial_window, binomial_pmf_error,
                                                clone_pair, count_threshold, krr_lower_pairs,
                                                loss_scale_guess, newton_smallest_epsilon)
from dpplugins.amplification.count_pair import (  # noqa: F401  (re-exported: the margin)
    EPS_ROUNDING_MARGIN, below_by_margin, eps_less_margin, eps_rounding_margin,
    margined_candidates, upper_at_zero)
from dpplugins.amplification.count_pair import krr_laws as _krr_laws
from dpplugins.amplification.count_pair import binomial_pmf as _pmf
from dpplugins.amplification.count_pair import binomial_sf as _sf
from dpplugins.amplification.count_pair import \
    count_pair_loss_binned_pmfs as _count_pair_loss_binned_pmfs
from dpplugins.amplification.krr_third_value import third_value_pair
from dpplugins.amplification.shuffle import ShuffleBound
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_nonnegative,
                              check_open_unit, check_positive)
from dpplugins.pld import Bounds, PrivacyLossDistribution, certified_bounds

#: category laws ``(pi, v0, v1)`` of a count pair: the others' law, the differing user's on X0
#: and on X1, each over the categories (A, B, C)
Laws = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]

_U = UNIT_ROUNDOFF
#: what the count-pair engine raises at extreme laws (probabilities near the underflow range)
ENGINE_FAILURES = (NumericalError, ZeroDivisionError, FloatingPointError, OverflowError)


# --------------------------------------------------------------------------------------------
# randomizer specifications
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Randomizer:
    """What each user runs before the shuffler.

    ``kind``: ``"krr"`` (k-ary randomized response with ``k`` outputs, ``k = 2`` is binary RR) or
    ``"general"`` (any ``(eps0, delta0)``-DP local randomizer; ``k`` is unused).
    """

    kind: str
    eps0: float
    k: int = 2
    delta0: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("krr", "general"):
            raise ParameterError("randomizer.kind", self.kind, "'krr' or 'general'")
        eps0 = _shuffle.check_local_epsilon(self.eps0, 300)
        object.__setattr__(self, "eps0", eps0)
        object.__setattr__(self, "k", _shuffle.check_domain_size("k", self.k, 2))
        d0 = check_nonnegative("delta0", self.delta0)
        if d0 >= 1:
            raise ParameterError("delta0", d0, "in [0, 1)")
        if d0 > 0 and self.kind != "general":
            raise ParameterError("delta0", d0, f"0 for randomizer kind {self.kind!r}",
                                 hint="randomized response is pure eps0-DP")
        object.__setattr__(self, "delta0", d0)

    @property
    def name(self) -> str:
        if self.kind == "general":
            return "general" if self.delta0 == 0 else "general (eps0, delta0)"
        return "binary_rr" if self.k == 2 else f"{self.k}-rr"


def randomizer(spec) -> Randomizer:
    """Normalise a randomizer description: a :class:`Randomizer`; ``("krr", eps0, k)``;
    ``("binary_rr", eps0)``; ``("general", eps0)`` or ``("general", eps0, delta0)``."""
    if isinstance(spec, Randomizer):
        return spec
    if isinstance(spec, (tuple, list)) and spec:
        head, rest = spec[0], tuple(spec[1:])
        if head == "binary_rr" and len(rest) == 1:
            return Randomizer("krr", rest[0], 2)
        if head == "krr" and len(rest) == 2:
            return Randomizer(head, rest[0], rest[1])
        if head == "general" and len(rest) in (1, 2):
            return Randomizer("general", rest[0], 2, rest[1] if len(rest) == 2 else 0.0)
    raise ParameterError("randomizer", spec, "a Randomizer, ('krr', eps0, k), ('binary_rr', eps0) "
                         "or ('general', eps0[, delta0])")


# --------------------------------------------------------------------------------------------
# the three-category count pair (one exact closed-form sum)
# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------
# shuffled binary randomized response: exact pairs and the certified worst case over datasets
# --------------------------------------------------------------------------------------------
class _BinaryCore:
    """Shuffled binary RR where the others are ``n_alpha`` users holding 1 (each reports 1 with
    probability ``alpha = e^eps0/(e^eps0+1)``) and ``n_beta`` users holding 0 (probability
    ``beta = 1 - alpha``); the differing user holds 0 (X0) or 1 (X1).  The output is the number
    of reported 1s, ``S = W + victim`` with ``W = Bin(n_alpha, alpha) + Bin(n_beta, beta)``, so
    ``P0(s) = beta W(s-1) + alpha W(s)`` and ``P1(s) = alpha W(s-1) + beta W(s)``.

    ``W`` is the exact convolution of the two binomial pmfs on windows holding all but ``e^-50``
    of each (:func:`~dpplugins.amplification.count_pair.binomial_window`); the dropped mass moves
    every hockey-stick sum by at most ``(1 + e^eps)`` times it.  ``convolution``: windows
    longer than ``_FFT_MIN_LENGTH`` are convolved by FFT in double (``"fft"``) or long double
    (``"extended"``), or all directly (``"direct"``; ``direct_terms`` products).
    Every entry of ``P0, P1`` carries a relative error of at most ``rho = 2 * 1e-12 (the pmf
    values) + (L + 4) u`` (``L`` terms in each convolution sum, all non-negative), so the computed
    ``sum (P0 - x P1)_+`` is within ``rho * sum (P0 + x P1)`` over the entries that can be positive
    (those with computed ``P0 - x P1 > -2 rho (P0 + x P1)``).
    """

    def __init__(self, eps0: float, n_alpha: int, n_beta: int, n_fair: int = 0,
                 extra: float = 0.0, convolution: str = "fft") -> None:
        self.eps0 = eps0
        self.n_alpha, self.n_beta, self.n_fair = n_alpha, n_beta, n_fair
        self.extra = extra
        alpha, beta = float(special.expit(eps0)), float(special.expit(-eps0))
        self.alpha, self.beta = alpha, beta
        parts, dropped, start, pmf_error = [], 0.0, 0, _REL_SF
        for count, prob in ((n_alpha, alpha), (n_beta, beta), (n_fair, 0.5)):
            if count == 0:
                continue
            lo, hi, out = binomial_window(count, prob, log_cut=-50.0)
            parts.append(_pmf(np.arange(lo, hi + 1), count, prob))
            pmf_error += binomial_pmf_error(count)
            start += lo
            dropped += out
        parts.sort(key=len)
        w, terms = (parts[0], 1) if parts else (np.ones(1), 1)
        fft_error, self.direct_terms = 0.0, 0
        for part in parts[1:]:
            self.direct_terms += len(w) * len(part)
            if convolution != "direct" and min(len(w), len(part)) > _FFT_MIN_LENGTH:
                w, err = _fft_convolve(w, part, extended=convolution == "extended")
                fft_error = fft_error * float(np.sum(part)) + err
            else:
                terms = min(len(w), len(part)) + terms
                w = np.convolve(w, part)
        self.start = start
        w = np.concatenate([[0.0], w, [0.0]])
        self.p0 = beta * w[:-1] + alpha * w[1:]   # P(S = start + i), victim holds 0
        self.p1 = alpha * w[:-1] + beta * w[1:]
        # an l1 error e of W moves each of p0, p1 by at most e in l1, so every hockey-stick sum
        # by (1 + x) e -- and entries the positivity mask may miss by at most as much again
        self.fft_error = fft_error
        self.dropped = dropped + 2 * fft_error
        self.rho = pmf_error + (terms + 4) * _U

    @property
    def users(self) -> int:
        return self.n_alpha + self.n_beta + self.n_fair + 1

    def evaluate(self, epsilon: float) -> tuple[Bounds, float]:
        if epsilon >= self.eps0 or self.eps0 == 0:
            return Bounds(0.0, 0.0), 0.0
        x = math.exp(epsilon)
        best = None
        for p, q in ((self.p0, self.p1), (self.p1, self.p0)):
            d = p - x * q
            value = float(np.sum(np.maximum(d, 0.0)))
            scale = p + x * q
            err = 2 * self.rho * float(np.sum(scale[d > -2 * self.rho * scale]))
            tail = float(np.sum(q[d > 0]))
            if best is None or value > best[0]:
                best = (value, err, tail)
        value, err, tail = best
        slack = err + (1 + x) * self.dropped
        return (Bounds(max(value - slack, 0.0), min(value + slack + self.extra, 1.0)),
                -x * tail)

    def delta(self, epsilon: float) -> Bounds:
        return self.evaluate(epsilon)[0]

    def delta_upper_many(self, epsilons: np.ndarray) -> np.ndarray:
        """Upper bounds at many eps at once, from the entries sorted by likelihood ratio.

        Our derivation (the terms of :meth:`evaluate`, computed in another way).  In each
        direction ``(p, q)`` the entries are sorted by their computed ratio ``p / q`` (``inf``
        where ``q = 0``; entries with ``p = q = 0`` dropped) and summed from the largest ratio in
        long double (``P_k``, ``Q_k``).  At ``x = e^eps`` the entries with computed ratio above
        ``x`` give ``V = P_k - x Q_k``.  That set differs from ``{p - x q > 0}`` only by entries
        whose ratio is within a rounding of ``x``, each with ``|p - x q| <= 2 u (p + x q)``;
        so ``V`` is within ``2 u`` times the sum of ``p + x q`` over the entries with ``p - x q
        > -2 rho (p + x q)`` of the stored hockey-stick sum, and the stored sum within ``2 rho``
        times the same sum of the exact one (:meth:`evaluate`).  That set is covered by the
        entries of computed ratio above ``x (1 - 3 rho) / (1 + 3 rho)`` (``rho`` is far above
        the ratio's rounding), whose sum is ``P_k' + x Q_k'``: the bound is ``V + (2 rho + 4 u)
        (P_k' + x Q_k')``, plus the rounding of the long-double sums (``(n + 4) u_ld (P_k + x
        Q_k) + u_ld |V|``, prefix sums of ``n`` non-negative terms; Higham 2002, Sec. 4.2),
        rounded up by ``8 u`` in double, plus ``(1 + x)`` times the dropped mass and ``extra``
        as in :meth:`evaluate`.  One sort per call instead of a pass over every entry at every
        eps (600 cores at 80 eps took 7 s at n = 10^6, eps0 = 0.031; now about 1 s); never
        below the bound of :meth:`evaluate` (checked numerically) and within about 1e-15 of it.
        """
        eps = np.asarray(epsilons, dtype=float).ravel()
        out = np.zeros(eps.shape)
        live = (eps < self.eps0) & (self.eps0 > 0)
        if not np.any(live):
            return out.reshape(np.shape(epsilons))
        ld = np.longdouble
        u_ld = float(np.finfo(ld).eps) / 2
        x = np.exp(eps[live])
        x_ld = x.astype(ld)
        threshold = x * (1 - 3 * self.rho) / (1 + 3 * self.rho)
        best = np.zeros(len(x))
        for p, q in ((self.p0, self.p1), (self.p1, self.p0)):
            keep = (p > 0) | (q > 0)
            p, q = p[keep], q[keep]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
            order = np.argsort(-ratio, kind="stable")
            descending = -ratio[order]  # ascending: searchsorted counts ratios above a value
            sum_p = np.concatenate([[ld(0)], np.cumsum(p[order].astype(ld))])
            sum_q = np.concatenate([[ld(0)], np.cumsum(q[order].astype(ld))])
            k = np.searchsorted(descending, -x, side="left")
            near = np.searchsorted(descending, -threshold, side="left")
            value = sum_p[k] - x_ld * sum_q[k]
            err = (2 * self.rho + 4 * _U) * (sum_p[near] + x_ld * sum_q[near])
            rounding = (len(p) + 4) * u_ld * (sum_p[k] + x_ld * sum_q[k]) + u_ld * np.abs(value)
            best = np.maximum(best, np.asarray(value + err + rounding, dtype=float))
        out[live] = np.minimum(best * (1 + 8 * _U) + (1 + x) * self.dropped + self.extra, 1.0)
        return out.reshape(np.shape(epsilons))

    def epsilon(self, delta: float) -> float:
        def upper(e):
            b, slope = self.evaluate(e)
            return b.upper, slope
        users = self.users
        guess = -math.expm1(-self.eps0) * math.sqrt(
            2 * math.exp(self.eps0) * math.log(1 / delta) / max(users, 1))
        return newton_smallest_epsilon(upper, delta, self.eps0, guess)

    def epsilon_lower(self, delta: float, near: float | None = None) -> float:
        return _lower_epsilon(lambda e: self.delta(e).lower, delta, self.eps0, near)


#: shortest pair of pmfs convolved by FFT in :class:`_BinaryCore` (shorter ones: directly)
_FFT_MIN_LENGTH = 2048


def fft_relative_error(size: int, unit_roundoff: float = _U) -> float:
    """``kappa``: a bound on ``||fl(F x) - F x||_2 / ||F x||_2`` for an FFT of ``size`` points
    (forward or unnormalised inverse; Higham, *Accuracy and Stability of Numerical Algorithms*,
    2nd ed. 2002, Thm 24.2, for a power of two: ``kappa = log2(N) eta / (1 - log2(N) eta)``,
    ``eta = mu + gamma_4 (sqrt(2) + mu)``, with twiddle factors accurate to ``mu = 4u`` and a
    safety factor 10 on ``log2 N`` for the real transform's packing -- an assumption about
    pocketfft, the FFT of numpy and of scipy; see :func:`_fft_convolve`).  For the sizes ``m
    2^j`` of :func:`~dpplugins.pld.spectra.transform_size` (radix-3, -5 and -7 passes, at most
    ``log2 N`` passes in all) the same formula is assumed, as the PLD engine assumes ``c u log2
    N`` with ``c = 10`` there (:mod:`dpplugins.pld.compose`); numerically checked against direct
    convolution at every mantissa (measured errors 10^4 times below the bound).
    ``unit_roundoff``: that of the transform's precision (long double's for
    :func:`_fft_convolve` with ``extended=True``)."""
    u = unit_roundoff
    gamma4 = 4 * u / (1 - 4 * u)
    mu = 4 * u
    eta = mu + gamma4 * (math.sqrt(2) + mu)
    lg = 10 * math.log2(max(int(size), 2))
    return lg * eta / (1 - lg * eta)


def _fft_convolve(a: np.ndarray, b: np.ndarray, extended: bool = False
                  ) -> tuple[np.ndarray, float]:
    """Linear convolution of two non-negative vectors by a power-of-two real FFT, clipped at 0,
    and a bound on the l1 norm of its absolute error.

    Bound (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed. 2002, Thm 24.2, for
    the radix-2 FFT: ``||fl(F x) - F x||_2 <= kappa ||F x||_2`` with
    ``kappa = log2(N) eta / (1 - log2(N) eta)``, ``eta = mu + gamma_4 (sqrt(2) + mu)``; we take
    twiddle factors accurate to ``mu = 4u`` and a safety factor 10 on ``log2 N`` for the real
    transform's packing -- an assumption about numpy's pocketfft, like the accuracy we assume of
    Boost's binomial functions).  Propagation, our derivation: with ``A = F a``, ``B = F b``,
    ``||A||_inf <= ||a||_1``, ``||A||_2 = sqrt(N) ||a||_2``, the computed product differs from
    ``A B`` by ``dP <= kappa sqrt(N) (||a||_2 ||b||_1 + ||a||_1 ||b||_2) + kappa^2 N ||a||_2
    ||b||_2 + gamma_c (||a||_1 + kappa sqrt(N) ||a||_2)(1 + kappa) sqrt(N) ||b||_2`` in l2
    (``gamma_c = sqrt(2) gamma_2``, complex multiplication); the inverse transform (``F^*/N``)
    adds ``kappa ||P||_2 / sqrt(N)``; l1 <= sqrt(N) l2.  Clipping at 0 only moves entries toward
    the (non-negative) truth.

    ``extended=True``: the transforms and the product in long double (SciPy's pocketfft, the
    same assumption as above with long double's unit roundoff ``u_ld``; where long double is
    no wider than double, ``u`` is used), about 5 times slower and a bound about 2000 times
    smaller on x86.  Rounding the clipped result to double moves each entry by at most ``u``
    of itself, at most ``u (||a||_1 ||b||_1 + e)`` in l1 with ``e`` the bound above (our
    derivation), which is added."""
    la, lb = len(a), len(b)
    length = la + lb - 1
    N = 1 << (length - 1).bit_length()
    if extended:
        ld = np.longdouble
        u = min(float(np.finfo(ld).eps) / 2, _U)
        spectrum = sp_fft.rfft(a.astype(ld), N) * sp_fft.rfft(b.astype(ld), N)
        c = np.maximum(sp_fft.irfft(spectrum, N)[:length], ld(0)).astype(float)
    else:
        u = _U
        c = np.fft.irfft(np.fft.rfft(a, N) * np.fft.rfft(b, N), N)[:length]
        c = np.maximum(c, 0.0)
    gamma = lambda k: k * u / (1 - k * u)  # noqa: E731
    kappa = fft_relative_error(N, u)
    na, nb = float(np.linalg.norm(a)) * (1 + 1e-12), float(np.linalg.norm(b)) * (1 + 1e-12)
    sa, sb = float(np.sum(a)) * (1 + 1e-12), float(np.sum(b)) * (1 + 1e-12)
    rn = math.sqrt(N)
    gc = math.sqrt(2) * gamma(2)
    dp = (kappa * rn * (na * sb + sa * nb) + kappa ** 2 * N * na * nb
          + gc * (sa + kappa * rn * na) * (1 + kappa) * rn * nb)
    p2 = rn * min(sa * nb, sb * na) + dp
    err2 = (dp + kappa * p2) / rn
    error = rn * err2 * (1 + 1e-6) + 1e-300
    if extended:
        error += _U * (sa * sb + error) * (1 + 1e-6)
    return c, error


@functools.lru_cache(maxsize=1024)
def _binary_core(eps0: float, n_alpha: int, n_beta: int, n_fair: int = 0,
                 extra: float = 0.0, convolution: str = "fft") -> _BinaryCore:
    return _BinaryCore(eps0, n_alpha, n_beta, n_fair, extra, convolution)


@dataclass
class _Block:
    lo: int        # number of other users holding 1: j in [lo, hi]
    hi: int
    upper: float   # certified bound for every dataset in the block
    lower: float   # certified lower bound (singletons only; -inf otherwise)
    #: the block's core's own certified lower bound (its upper minus its numerical gap; inf
    #: where not computed, and the block is split as before): a lower bound on the core, not on
    #: any dataset of the block
    core_lower: float = math.inf
    #: how the block's core was convolved (:class:`_BinaryCore`, :meth:`BinaryRRWorstCase._core`)
    convolution: str = "fft"


class BinaryRRWorstCase:
    """Certified privacy of n users running binary randomized response before a shuffler, taken
    over *every* pair of neighbouring datasets (our construction; see the module docstring,
    "Binary randomized response: the exact worst case").

    A dataset is described by ``j``, the number of the other ``n - 1`` users holding 1 (the
    differing user holds 0 on X0, 1 on X1); ``j`` and ``n - 1 - j`` are mirror images (flip every
    bit), so ``j <= (n-1)/2`` with both directions covers all.  For a block ``j in [a, b]`` every
    dataset's output is the *core* (``a`` users holding 1, ``n - 1 - b`` holding 0, and the
    differing user) plus independent reports of the remaining ``b - a`` users -- a
    post-processing -- so the core's divergence bounds the whole block.  Branch and bound splits
    the blocks whose bound exceeds ``(1 + tol)`` times the best exact (singleton) value found,
    which is itself a certified *lower* bound.
    """

    def __init__(self, eps0: float, n: int, *, tol: float = 4e-3, max_blocks: int = 600) -> None:
        self.eps0, self.n = eps0, n
        self.tol, self.max_blocks = tol, max_blocks
        self.J = (n - 1) // 2

    def _core(self, lo: int, hi: int, convolution: str = "fft") -> _BinaryCore:
        """The dominating pair of the block ``[lo, hi]``.  Each of the ``w = hi - lo`` users not
        in the core reports ``Bern(alpha)`` or ``Bern(beta)``, and both are
        ``(1 - 2 beta) * (its own bit) + 2 beta * Bern(1/2)``; revealing which of them flipped a
        fair coin (``F ~ Bin(w, 2 beta)``, the same law for every dataset of the block) and the
        others' bits is more information, and given F the view is the core plus F fair coins,
        whose divergence decreases in F.  So the block is bounded by the core with ``F0`` fair
        coins plus ``P(F < F0)``, F0 the e^-75 lower quantile.  ``convolution``: as in
        :class:`_BinaryCore`."""
        w = hi - lo
        if w == 0:
            return _binary_core(self.eps0, lo, self.n - 1 - hi, convolution=convolution)
        two_beta = 2 * float(special.expit(-self.eps0))
        f0, _, _ = binomial_window(w, two_beta)
        extra = float(stats.binom.cdf(f0 - 1, w, two_beta)) * (1 + 1e-9) if f0 > 0 else 0.0
        return _binary_core(self.eps0, lo, self.n - 1 - hi, f0, extra, convolution)

    def _accurate_core(self, lo: int, hi: int, charge_matters: Callable[[_BinaryCore], bool],
                       ways: tuple[str, ...] = ("extended", "direct")
                       ) -> tuple[_BinaryCore, str, bool]:
        """The block's core, how it was convolved, and whether its FFT charge still matters
        (then splitting the block hardly helps: its halves' cores carry nearly the same
        charge).  By FFT in double; while
        ``charge_matters(core)`` (its FFT charge moves the answer by more than a tenth of the
        search's tolerance), again in each of ``ways`` in turn: ``"extended"`` (long double),
        ``"direct"`` (if that takes at most ``_DIRECT_CONVOLUTION_TERMS`` products).  In double
        the charge (about 1e-11 at n = 1e8) decided every block of a small delta: binary RR
        with eps0 = 2.16, n = 1e8 and delta = 6e-11 ran the search to its 600 blocks, 30-90 s,
        for a certified gap of 1.6 %, and at n = 1e6, delta = 1e-15 or n = 1e7, delta = 1e-12
        no block was certified below eps0.  Every way gives a certified bound."""
        core, convolution = self._core(lo, hi), "fft"
        for better in (*ways, None):
            if core.fft_error == 0 or not charge_matters(core):
                return core, convolution, False
            if better is None or (better == "direct"
                                  and core.direct_terms > _DIRECT_CONVOLUTION_TERMS):
                return core, convolution, True
            core, convolution = self._core(lo, hi, better), better
        raise AssertionError("unreachable")

    def _initial(self) -> list[tuple[int, int]]:
        """Geometric blocks from j = 0 until they reach the width a block can have and still
        be within ``tol`` of the j = 0 value (a core misses ``1 - 1/(2 alpha)`` of the variance of
        each of its ``w`` extra users, which moves epsilon by about that times ``w / (2n)``),
        then blocks of that width.  Branch and bound refines them where needed."""
        alpha = float(special.expit(self.eps0))
        loss = max(1 - 1 / (2 * alpha), 1e-3)
        width = max(1, int(0.8 * 2 * self.n * self.tol / loss))
        out, lo = [], 0
        while lo <= self.J:
            hi = min(self.J, lo + width - 1, max(lo, 2 * lo - 1) if lo > 0 else 0)
            out.append((lo, hi))
            lo = hi + 1
        return out

    def _search(self, score: Callable[[int, int], tuple[float, ...]], cap: float = math.inf
                ) -> tuple[float, float, list[_Block]]:
        """Maximise ``score`` over datasets: returns (upper, lower, final blocks).  ``score(lo,
        hi)`` is ``(upper, lower)``, ``(upper, lower, core_lower)`` or ``(upper, lower,
        core_lower, convolution)`` (:class:`_Block`).

        ``cap``: a certified upper bound from elsewhere, which the caller takes the minimum
        with.  Once a *singleton* is certified at or above it, the maximum over datasets is
        too, so no refinement can beat the cap and the search stops (the minimum is the same;
        at delta = 1e-15 every singleton's bound is eps0 -- its FFT rounding charge is about
        1e-11 -- and the search used to run to max_blocks: 87 s at n = 1e8)."""
        blocks = [_Block(lo, hi, *score(lo, hi)) for lo, hi in self._initial()]
        while not any(b.lo == b.hi and b.upper >= cap for b in blocks):
            best_lower = max(b.lower for b in blocks)
            target = (1 + self.tol) * best_lower
            # a block is split while its bound is above the target -- unless even its core's own
            # certified lower bound is not: then the excess is the core's numerical gap (FFT
            # rounding charges, truncated windows), which the halves' cores carry nearly whole
            # (their windows are hardly shorter), so splitting brings it down only slowly (at
            # n = 1e7, delta(0.1) ~ 1e-27 under an FFT charge of 1.5e-11, every block stayed open
            # until max_blocks: 17 s, 78 s at n = 1e8; stopping there leaves an upper bound of
            # 2.0e-11 instead of 1.5e-11).  Any partition is valid, so this changes only how far
            # the search refines.  (Epsilon searches give core_lower only to blocks stuck at
            # the cap; elsewhere they refine as before.)
            open_ = [b for b in blocks if b.lo < b.hi and b.upper > target + 1e-300
                     and b.core_lower > target]
            if not open_ or len(blocks) >= self.max_blocks:
                break
            worst = max(open_, key=lambda b: b.upper)
            blocks.remove(worst)
            mid = (worst.lo + worst.hi) // 2
            blocks += [_Block(lo, hi, *score(lo, hi)) for lo, hi in ((worst.lo, mid),
                                                                      (mid + 1, worst.hi))]
        upper, lower = max(b.upper for b in blocks), max(b.lower for b in blocks)
        if upper > (1 + self.tol) * lower and len(blocks) >= self.max_blocks:
            # stopped with the maximum inside wide blocks (a flat curve over datasets: binary
            # RR, eps0 = 20, n = 1e8, delta at eps 0 had blocks of 10^4 datasets and a lower
            # bound from the first singletons, 1 % below): the datasets in the middle of the
            # highest blocks are lower bounds too
            for b in sorted(blocks, key=lambda b: b.upper)[-4:]:
                if b.lo < b.hi:
                    mid = (b.lo + b.hi) // 2
                    lower = max(lower, score(mid, mid)[1])
        return upper, lower, blocks

    def epsilon(self, delta: float, cap: float = math.inf) -> tuple[Bounds, list[_Block]]:
        """Certified bounds on epsilon(delta) over all neighbouring datasets (memoised; ``cap``
        as in :meth:`_search`: where it stops the search, the upper bound is at least ``cap``).
        """
        memo = self.__dict__.setdefault("_memo", {})
        if (delta, cap) not in memo:
            memo[(delta, cap)] = self._epsilon(delta, cap)
        return memo[(delta, cap)]

    def _epsilon(self, delta: float, cap: float) -> tuple[Bounds, list[_Block]]:
        if self.eps0 == 0:
            return Bounds(0.0, 0.0), []

        last: list = [None, 0.0]  # the core charge_matters saw last and its epsilon

        def epsilon_of(core):
            if last[0] is not core:
                last[:] = [core, core.epsilon(delta)]
            return last[1]

        def charge_matters(core):
            # the charge 2 (1 + x) e moves epsilon by about e / |slope of delta| there
            up = epsilon_of(core)
            if not up < self.eps0:
                return True
            _, slope = core.evaluate(up)
            return 2 * (1 + math.exp(up)) * core.fft_error > 0.1 * self.tol * up * abs(slope)

        def score(lo, hi):
            core, convolution, stuck = self._accurate_core(lo, hi, charge_matters)
            up = epsilon_of(core)
            if lo == hi:
                low = core.epsilon_lower(delta, up)
                return up, low, low, convolution
            # a block stuck at or above the cap, or at its core's FFT charge: is its excess
            # only its core's numerical gap?  (then _search leaves it; at delta = 1e-15 the
            # FFT-convolved cores are all there)
            return (up, -math.inf,
                    core.epsilon_lower(delta, up) if up >= cap or stuck else math.inf,
                    convolution)
        up, low, blocks = self._search(score, cap)
        return certified_bounds(max(low, 0.0), up, f"epsilon at delta={delta!r}"), blocks

    def delta(self, epsilon: float) -> tuple[Bounds, list[_Block]]:
        """Certified bounds on delta(epsilon) over all neighbouring datasets (memoised)."""
        memo = self.__dict__.setdefault("_delta_memo", {})
        if epsilon not in memo:
            memo[epsilon] = self._delta(epsilon)
        return memo[epsilon]

    def _delta(self, epsilon: float) -> tuple[Bounds, list[_Block]]:
        if self.eps0 == 0 or epsilon >= self.eps0:
            return Bounds(0.0, 0.0), []

        last: list = [None, None]  # the core charge_matters saw last and its bounds

        def bounds_of(core):
            if last[0] is not core:
                last[:] = [core, core.delta(epsilon)]
            return last[1]

        def charge_matters(core):
            charge = 2 * (1 + math.exp(epsilon)) * core.fft_error
            return charge > 0.1 * self.tol * bounds_of(core).upper

        def score(lo, hi):
            # long double only: a delta search refines to its tolerance in delta, hundreds of
            # blocks at tiny deltas, and direct cores made those 10-20 s (n = 1e6, delta near
            # 1e-12; 3.7 s in long double, within 1.4 % instead of 0.4 %)
            core, convolution, _ = self._accurate_core(lo, hi, charge_matters, ("extended",))
            b = bounds_of(core)
            return b.upper, (b.lower if lo == hi else -math.inf), b.lower, convolution
        up, low, blocks = self._search(score)
        return certified_bounds(max(low, 0.0), up, f"delta at epsilon={epsilon!r}"), blocks

    def profile(self, blocks: Sequence[_Block]) -> Callable[[np.ndarray], np.ndarray]:
        """Upper privacy profile ``max over blocks of the core's delta(eps)`` for a partition of
        the datasets (any partition is valid; a finer one is tighter)."""
        cores = [self._core(b.lo, b.hi, b.convolution) for b in blocks]

        def fn(eps):
            eps = np.asarray(eps, dtype=float)
            flat = [max(c.delta(float(e)).upper for c in cores) for e in eps.ravel()]
            return np.array(flat).reshape(eps.shape)
        return fn


# --------------------------------------------------------------------------------------------
# the privacy blanket of k-ary randomized response
# --------------------------------------------------------------------------------------------
def krr_blanket_laws(eps0: float, k: int) -> Laws:
    """Blanket laws ``(pi, v0, v1)`` of k-RR over the categories a, b, rest: blanket reports
    are uniform on the k values, the differing user reports a, b, rest w.p. ``(E, 1, k-2)/Z``
    on X0 (a and b swapped on X1)."""
    e, z, _ = _krr_laws(eps0, k)
    return ((1.0 / k, 1.0 / k, (k - 2) / k), (e / z, 1 / z, (k - 2) / z),
            (1 / z, e / z, (k - 2) / z))


@functools.lru_cache(maxsize=512)
def _conditional_pair(laws: Laws, m: int) -> CountPair:
    """The blanket pair given ``m`` reports from the blanket (the differing user's and ``m - 1``
    blanket users'), over the categories of ``laws``."""
    return CountPair(m, *laws, description=f"blanket pair, m={m}")


class StackedBlanket:
    """The blanket's conditional pairs for many (small) values of m, evaluated in one vectorised
    pass: the same closed form as :class:`_Direction` (these pairs are symmetric, one direction
    suffices), every entry a (block, T) with weight ``P(M in block) Bin(m, 2/k)(T)``; tails by
    Boost directly (relative ``1e-12 + 64 u m``)."""

    def __init__(self, eps0: float, k: int, blocks: Sequence[tuple[int, float]],
                 laws: tuple | None = None) -> None:
        if laws is None:
            laws = krr_blanket_laws(eps0, k)
        # ``laws = (pi, v0, v1)`` with ``pi_A = pi_B`` (so theta = 1/2) and the pair symmetric
        self.pi, self.v0, self.v1 = (tuple(float(v) for v in law) for law in laws)
        pab = self.pi[0] + self.pi[1]
        Ms, Ts, Ws = [], [], []
        outside = 0.0
        for m, weight in blocks:
            lo, hi, out = binomial_window(m - 1, min(pab, 1.0), log_cut=-75.0)
            T = np.arange(lo, min(hi + 1, m) + 1)
            Ts.append(T)
            Ms.append(np.full(len(T), m))
            Ws.append(weight * _pmf(T, m, min(pab, 1.0)))
            outside += weight * out
        self.M = np.concatenate(Ms).astype(np.int64)
        self.T = np.concatenate(Ts).astype(np.int64)
        self.W = np.concatenate(Ws)
        self.outside = outside
        self.theta = 0.5
        self.rho = _REL_SF + 64 * _U * self.M.astype(float)

    def evaluate(self, x: float) -> tuple[float, float]:
        """(certified upper bound on ``sum_blocks P(block) delta_m(log x)``, its derivative)."""
        pa, pb, pc = self.pi
        ca = (self.v0[0] - x * self.v1[0]) / pa
        cb = (self.v0[1] - x * self.v1[1]) / pb
        cc = (self.v0[2] - x * self.v1[2]) / pc if pc > 0 else 0.0
        d = ca - cb
        M, T, theta = self.M, self.T, self.theta
        k = cb * T + cc * (M - T)
        with np.errstate(over="ignore", invalid="ignore"):
            jr = np.floor(-k / d)
        jmin = (np.clip(np.nan_to_num(jr, nan=0.0, posinf=1e18, neginf=-1e18), -1, T) + 1
                ).astype(np.int64)
        inv = self.W / M
        # the threshold corrected where floor(-k / d) loses it, and the summands whose computed
        # sign may be wrong charged (count_threshold; without it k-RR at eps0 = 40 dropped the
        # one positive summand: epsilon 37.02 certified where the exact value is 39.999)
        jmin, boundary = count_threshold(jmin, ca, cb, cc, T, M, inv, theta)
        s1 = np.zeros(len(T))
        pm = np.zeros(len(T))
        pos = T >= 1
        i, u = jmin[pos] - 1, T[pos] - 1
        s1[pos] = _sf(i - 1, u, theta)
        pm[pos] = _pmf(i, u, theta)
        s2 = np.where(pos, np.maximum(s1 - (1 - theta) * pm, 0.0), np.where(jmin <= 0, 1.0, 0.0))
        e1 = self.rho * s1
        e2 = e1 + (1 - theta) * self.rho * pm + 2 * _U * s2
        mean = T * theta
        t1 = d * mean * s1
        t2 = k * s2
        value = float(np.dot(inv, np.maximum(t1 + t2, 0.0)))
        # (the weights W are binomial_pmf of at most m trials: within binomial_pmf_error(m))
        rounding = (4 * _U + binomial_pmf_error(M)) * (np.abs(t1) + np.abs(t2))
        error = float(np.dot(inv, abs(d) * mean * e1 + np.abs(k) * e2 + rounding)) + boundary
        da, db = self.v1[0] / pa, self.v1[1] / pb
        dc = self.v1[2] / pc if pc > 0 else 0.0
        tail = float(np.dot(inv, (da - db) * mean * s1 + (db * T + dc * (M - T)) * s2))
        return value + error * (1 + 1e-12) + self.outside, -x * max(tail, 0.0)


#: the largest convolution :meth:`CountLaw.poisson_binomial` computes directly (beyond, FFT)
_DIRECT_CONVOLUTION_TERMS = 1 << 26


@dataclass(frozen=True)
class CountLaw:
    """The law of a count on a window: ``pmf[i] = P(count = lo + i)`` to within relative
    ``relative_error`` each, and ``outside`` (at least the mass off the window, plus any
    absolute error of the entries) charged in full wherever it is used."""

    lo: int
    pmf: np.ndarray
    outside: float
    relative_error: float

    @classmethod
    def binomial(cls, trials: int, prob: float) -> "CountLaw":
        """``Bin(trials, prob)`` on its e^-75 window (its pmf within relative
        :func:`~dpplugins.amplification.count_pair.binomial_pmf_error`)."""
        lo, hi, out = binomial_window(trials, prob)
        return cls(lo, _pmf(np.arange(lo, hi + 1), trials, prob), out,
                   binomial_pmf_error(trials))

    @classmethod
    def binomial_complement(cls, trials: int, complement: float) -> "CountLaw":
        """``Bin(trials, 1 - complement)``, built from ``trials - Bin(trials, complement)`` so
        that a ``complement`` far below 1 keeps its relative accuracy (``1 - prob`` computed
        from a rounded ``prob`` near 1 loses it: k-RR with k = 2^53)."""
        lo, hi, out = binomial_window(trials, complement)
        pmf = _pmf(np.arange(lo, hi + 1), trials, complement)[::-1].copy()
        return cls(trials - hi, pmf, out, binomial_pmf_error(trials))

    @classmethod
    def poisson_binomial(cls, groups: Sequence[tuple[int, float]]) -> "CountLaw":
        """The sum of independent ``Bin(n_g, p_g)`` over ``groups`` (each a group of users with
        one probability): their windows convolved.  The product of the windows holds all but
        the sum of their outside masses (union bound).  Direct convolution sums non-negative
        products, so each entry keeps relative accuracy (Boost's error per factor plus ``u`` per
        addition); windows whose product exceeds 2^26 terms are convolved by FFT and its l1
        error bound (:func:`_fft_convolve`) is added to ``outside``."""
        lo, pmf, outside, relative = 0, np.ones(1), 0.0, 0.0
        for trials, prob in groups:
            if trials == 0:
                continue
            part = cls.binomial(trials, prob)
            outside += part.outside
            if len(pmf) * len(part.pmf) <= _DIRECT_CONVOLUTION_TERMS:
                pmf = np.convolve(pmf, part.pmf)
                relative += part.relative_error + (min(len(pmf), len(part.pmf)) + 2) * _U
            else:
                pmf, error = _fft_convolve(pmf, part.pmf)
                outside += error * (1 + relative)
            lo += part.lo
        return cls(lo, pmf, outside, relative + 4 * _U)


class Blanket:
    """Certified upper bound for a shuffled randomizer from a blanket decomposition (module
    docstring, "k-ary randomized response: the blanket", which holds verbatim for any laws).

    ``delta(eps) <= sum_m P(M = m) delta_m(eps)`` with ``M - 1 ~ Bin(n - 1, gamma)`` (``gamma``
    the blanket's total mass) and ``delta_m`` the divergence of the count pair of ``laws =
    (pi, v0, v1)`` with ``m`` users (:func:`_conditional_pair`; ``pi`` the blanket's law on the
    categories A, B, C, ``v0``/``v1`` the differing user's on X0/X1, possibly sub-probability
    after a relaxation, see :mod:`dpplugins.amplification.shuffle_model_families`).  ``delta_m``
    does not increase with m: adding a blanket report is a post-processing, and for any iid
    summands ``E[(T_(m+1))_+]/(m+1) <= E[(T_m)_+]/m`` (``T_(m+1)/(m+1)`` is the mean of the
    ``m + 1`` leave-one-out means, and ``(.)_+`` is convex; our derivation), so a block
    ``[m1, m2]`` of values of M is bounded by ``P(M in block) delta_{m1}``.  Blocks have relative
    width ``eta`` within 4 standard deviations of the mean of M and ``10 eta`` outside (a
    lower-tail block stops where the centre begins); M outside the e^-75 window is charged in
    full.  Needs ``pi_A = pi_B`` and a pair symmetric under swapping A and B."""

    def __init__(self, eps0: float, n: int, gamma: float, laws: Laws, *,
                 eta: float = 1e-3, count_law: CountLaw | None = None,
                 gamma_complement: float | None = None) -> None:
        self.eps0, self.n, self.gamma = eps0, n, gamma
        self.laws = tuple(tuple(float(v) for v in law) for law in laws)
        # ``count_law``: the law of M - 1 when the other users' blanket masses differ
        # (:mod:`dpplugins.amplification.shuffle_model_heterogeneous`)
        if count_law is not None:
            law = count_law
        elif gamma_complement is not None:   # 1 - gamma from its own closed form
            law = CountLaw.binomial_complement(n - 1, gamma_complement)
        else:
            law = CountLaw.binomial(n - 1, gamma)
        lo, pmf = law.lo, law.pmf
        hi = lo + len(pmf) - 1
        self.outside = law.outside
        if count_law is None:
            mean, sd = (n - 1) * gamma, math.sqrt(max((n - 1) * gamma * (1 - gamma), 1.0))
        else:   # (they only place the blocks: any partition is valid)
            counts = np.arange(lo, hi + 1)
            mean = float(np.dot(counts, pmf))
            sd = math.sqrt(max(float(np.dot((counts - mean) ** 2, pmf)), 1.0))
        edges = [lo]
        centre_lo = mean - 4 * sd
        while edges[-1] <= hi:
            c = edges[-1]
            if c < centre_lo:      # lower tail: coarse, but never reaching into the centre
                width = min(int(10 * eta * (c + 1)), math.ceil(centre_lo - c))
            else:
                width = int((eta if c <= mean + 4 * sd else 10 * eta) * (c + 1))
            edges.append(min(hi + 1, c + max(1, width)))
        self.blocks = []
        for a, b in zip(edges[:-1], edges[1:]):
            weight = float(np.sum(pmf[a - lo:b - lo])) * (1 + law.relative_error
                                                          + 2 * (b - a) * _U)
            self.blocks.append((a + 1, weight))       # m = M + 1 users in the blanket pair
        self.blocks = [(m, w) for m, w in self.blocks if w > 0]
        small = [(m, w) for m, w in self.blocks if m < 20_000]
        self.large = [(m, w) for m, w in self.blocks if m >= 20_000]
        self.stack = StackedBlanket(eps0, 2, small, laws=self.laws) if small else None

    def _pair(self, m: int) -> CountPair:
        return _conditional_pair(self.laws, m)

    def evaluate(self, epsilon: float) -> tuple[Bounds, float]:
        if epsilon >= self.eps0 or self.eps0 == 0:
            return Bounds(0.0, 0.0), 0.0
        total, slope = self.outside, 0.0
        if self.stack is not None:
            value, s = self.stack.evaluate(math.exp(epsilon))
            total += value
            slope += s
        for m, weight in self.large:
            b, s = self._pair(m).evaluate(epsilon)
            total += weight * b.upper
            slope += weight * s
        return Bounds(0.0, min(total, 1.0)), slope

    def delta(self, epsilon: float) -> float:
        return self.evaluate(epsilon)[0].upper

    def epsilon(self, delta: float) -> float:
        def upper(e):
            b, s = self.evaluate(e)
            return b.upper, s
        # the k-RR scale sqrt(2 log(1/delta) 2 (E + k - 1) / n), with k / Z = gamma pi_A, or
        # the loss scale of the pair of the mean blanket count if smaller (where the search
        # starts, never what it returns: for unary encoding, subset selection, local hashing
        # and Laplace the k-RR scale was 1.3-31 times the answer, this one 0.6-2.7 times;
        # 13 % fewer evaluations over n in 1e3, 1e4, 1e6, eps0 in 0.5, 2, 8)
        guess = math.sqrt(2 * math.log(1 / delta) * 2 / (self.gamma * self.laws[0][0] * self.n)
                          ) * math.tanh(self.eps0 / 2) * 2
        mean_count = max(2, round(1 + (self.n - 1) * self.gamma))
        guess = min(guess, loss_scale_guess(mean_count, *self.laws, delta))
        return newton_smallest_epsilon(upper, delta, self.eps0, min(guess, 0.5 * self.eps0))

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        """The upper bound at each of ``epsilons`` (vectorised over blocks, not over eps)."""
        return np.array([self.delta(float(e)) for e in np.ravel(epsilons)]).reshape(
            np.shape(epsilons))


class KRRBlanket(Blanket):
    """The privacy blanket of k-RR (module docstring): ``gamma = k/(e^eps0 + k - 1)``, blanket
    reports uniform (:func:`krr_blanket_laws`)."""

    def __init__(self, eps0: float, n: int, k: int, *, eta: float = 1e-3) -> None:
        self.k = k
        super().__init__(eps0, n, _krr_laws(eps0, k)[2], krr_blanket_laws(eps0, k), eta=eta,
                         gamma_complement=_krr_blanket_complement(eps0, k))


# --------------------------------------------------------------------------------------------
# the count pairs used below (all certified through CountPair)
# --------------------------------------------------------------------------------------------
def variation_ratio_pair(p: float, beta: float, q: float, n: int) -> CountPair:
    """The pair of Wang et al. (VLDB 2024) for parameters ``(p, beta, q)``, as we read it from
    their public code (module docstring): the differing user reports 0 w.p. ``p beta/(p-1)``,
    1 w.p. ``beta/(p-1)`` and "blank" otherwise (roles of 0 and 1 swapped on X1); every other
    user reports 0 and 1 w.p. ``r = p beta/((p-1) q)`` each, blank otherwise.

    **Not an upper bound in general** (see the module docstring: it fails for k-RR, k >= 3, at
    n = 2); it is FMT23's stronger-clone pair when ``beta = (p-1)/(p+1)`` and ``p = q``, and for
    k-RR it is a certified *lower* bound (:func:`krr_lower_pairs`)."""
    p = check_positive("p", p)
    if p <= 1:
        raise ParameterError("p", p, "> 1")
    beta = check_nonnegative("beta", beta)
    top = (p - 1) / (p + 1)
    # p = e^eps0 is rounded, so p - 1 carries a relative error u p / (p - 1): at eps0 = 1e-9
    # that is 2e-7, and Laplace's exact beta = 1 - e^(-eps0/2) < tanh(eps0/2) came out above it
    if beta > top * (1 + 1e-12 + 4 * UNIT_ROUNDOFF * p / (p - 1)):
        raise ParameterError("beta", beta, f"<= (p-1)/(p+1) = {top:.6g}")
    beta = min(beta, top)
    q = check_positive("q", q)
    alpha = beta / (p - 1)
    r = alpha * p / q
    if 2 * r > 1:
        raise ParameterError("q", q, f">= 2 p beta / (p - 1) = {2 * alpha * p:.6g}")
    blank = max(0.0, 1 - alpha - p * alpha)
    return CountPair(n, (r, r, 1 - 2 * r), (p * alpha, alpha, blank), (alpha, p * alpha, blank),
                     description=f"variation-ratio pair (p={p:.4g}, beta={beta:.4g}, q={q:.4g})")


def variation_ratio_parameters(spec) -> tuple[float, float, float]:
    """``(p, beta, q)`` of a randomizer in Wang et al.'s parametrisation (their Table, also in
    the README of github.com/wangsw/PrivacyAmplification; k-RR and general re-derived here):
    general eps0-LDP ``(e^eps0, (e^eps0-1)/(e^eps0+1), e^eps0)``, k-RR
    ``(e^eps0, (e^eps0-1)/(e^eps0+k-1), e^eps0)``; the other rows of the module docstring's
    table are not computed."""
    r = randomizer(spec)
    e = math.exp(r.eps0)
    if r.kind == "general":
        return e, (e - 1) / (e + 1), e
    return e, (e - 1) / (e + r.k - 1), e


# --------------------------------------------------------------------------------------------
# one round: certified upper and lower bounds
# --------------------------------------------------------------------------------------------
#: largest number of M-blocks of a blanket; beyond it the blocks widen (still valid)
MAX_BLANKET_BLOCKS = _MAX_BLANKET_BLOCKS = 4000
#: above this n the binary-RR worst case falls back to the clone pair (time)
_MAX_EXACT_BINARY_N = 1_000_000_000
#: above this n the binary-RR privacy *profile* (for composition: many cores at many eps) uses
#: the blanket / stronger clone instead of the exact worst case (time and memory)
_MAX_EXACT_BINARY_PROFILE_N = 1_000_000


def _check_n_delta(n, delta) -> tuple[int, float]:
    return _shuffle.check_users(n, 2), check_open_unit("delta", delta)


def _blanket(eps0: float, n: int, k: int) -> Blanket:
    return _cached_blanket(eps0, n, k)


@functools.lru_cache(maxsize=64)
def cached_blanket(eps0: float, n: int, gamma: float, laws: Laws,
                   max_blocks: int = MAX_BLANKET_BLOCKS,
                   gamma_complement: float | None = None) -> Blanket:
    """:func:`fitted_blanket`, memoised."""
    return fitted_blanket(eps0, n, gamma, laws, max_blocks, gamma_complement=gamma_complement)


def fitted_blanket(eps0: float, n: int, gamma: float, laws: Laws,
                   max_blocks: int = MAX_BLANKET_BLOCKS, *,
                   count_law: CountLaw | None = None,
                   gamma_complement: float | None = None) -> Blanket:
    """:class:`Blanket` with at most ``max_blocks`` blocks of M (their width doubles until it
    fits; wider blocks are still valid, only looser)."""
    eta = 2.5e-3
    blanket = Blanket(eps0, n, gamma, laws, eta=eta, count_law=count_law,
                      gamma_complement=gamma_complement)
    while len(blanket.blocks) > max_blocks:
        eta *= 2
        blanket = Blanket(eps0, n, gamma, laws, eta=eta, count_law=count_law,
                          gamma_complement=gamma_complement)
    return blanket


def _krr_blanket_complement(eps0: float, k: int) -> float:
    """``1 - gamma = (e^eps0 - 1) / (e^eps0 + k - 1)`` of the k-RR blanket, not by subtraction."""
    return math.expm1(eps0) / _krr_laws(eps0, k)[1]


def _cached_blanket(eps0: float, n: int, k: int) -> Blanket:
    """The k-RR blanket with at most ``MAX_BLANKET_BLOCKS`` blocks (cached)."""
    return cached_blanket(eps0, n, _krr_laws(eps0, k)[2], krr_blanket_laws(eps0, k),
                          MAX_BLANKET_BLOCKS, _krr_blanket_complement(eps0, k))


def _coarse_blanket(eps0: float, n: int, k: int, max_blocks: int = 48) -> Blanket:
    """The blanket with at most ``max_blocks`` blocks (for privacy profiles: many evaluations)."""
    return cached_blanket(eps0, n, _krr_laws(eps0, k)[2], krr_blanket_laws(eps0, k), max_blocks,
                          _krr_blanket_complement(eps0, k))


@functools.lru_cache(maxsize=64)
def _binary_worst_case(eps0: float, n: int) -> BinaryRRWorstCase:
    return BinaryRRWorstCase(eps0, n)


@functools.lru_cache(maxsize=256)
def _binary_exact(eps0: float, n: int, delta: float) -> tuple[Bounds, float]:
    """``(bounds, strong)``: FMT23's stronger clone at ``delta`` (binary RR is in the errata's
    class E_eps0) and the binary-RR branch and bound capped by it (:meth:`BinaryRRWorstCase._search`;
    the upper bound is the smaller of the two).  At delta = 1e-15 the exact search was at its
    FFT rounding floor and answered eps0 (no amplification) after 8 s at n = 1e6 and 87 s at
    n = 1e8; the stronger clone answers 0.0086 and 0.00082 in under half a second.  With the
    cores convolved in long double where that floor matters, the exact search answers down to
    about delta = 1e-13 at n = 1e8 and the clone takes over below."""
    strong = _strong_clone(eps0, n).epsilon(delta, eps0)
    if n > _MAX_EXACT_BINARY_N:
        return Bounds(0.0, strong), strong
    return _binary_worst_case(eps0, n).epsilon(delta, cap=strong)[0], strong


@functools.lru_cache(maxsize=256)
def _strong_clone(eps0: float, n: int) -> CountPair:
    return clone_pair(eps0, n, 2.0 / (math.exp(eps0) + 1.0))


@functools.lru_cache(maxsize=256)
def _fmt21_clone(eps0: float, n: int) -> CountPair:
    return clone_pair(eps0, n, math.exp(-eps0))


@functools.lru_cache(maxsize=256)
def _lower_pairs(eps0: float, n: int, k: int) -> dict[str, CountPair]:
    return krr_lower_pairs(eps0, n, k)


def fixed_dataset_pairs(r: Randomizer, n: int) -> dict[str, CountPair]:
    """The exact pairs of :func:`krr_lower_pairs` for one round of ``r`` (n >= 2 users, eps0 >
    0): k-RR's own; binary and ternary RR's for a general randomizer (both are in its class).
    Each gives certified lower bounds at any n without a search (binary RR's branch and bound
    finds better datasets, at a cost of seconds to a minute at n = 1e8)."""
    ks = (r.k,) if r.kind == "krr" else (2, 3)
    return {f"{k}rr_{name}": pair for k in ks
            for name, pair in _lower_pairs(r.eps0, n, k).items()}


def _third_value(r: Randomizer, n: int):
    """k-RR's exact pair with the others at a third value, all four counts kept
    (:mod:`dpplugins.amplification.krr_third_value`), or None (k < 4, or too many outcomes)."""
    return third_value_pair(r.eps0, n, r.k) if r.kind == "krr" and r.delta0 == 0 else None


def fixed_dataset_epsilon_lower(r: Randomizer, n: int, delta: float) -> float:
    """The largest certified lower bound on epsilon(delta) of :func:`fixed_dataset_pairs` and,
    for k-RR, of the exact third-value pair where it is computed."""
    exact = _third_value(r, n)
    return max([pair.epsilon_lower(delta, r.eps0) for pair in fixed_dataset_pairs(r, n).values()]
               + ([exact.epsilon_lower(delta)] if exact is not None else []))


def fixed_dataset_delta_lower(r: Randomizer, n: int, epsilon_: float) -> float:
    """The largest certified lower bound on delta(epsilon_) of :func:`fixed_dataset_pairs` and
    the exact third-value pair, and at least ``delta0`` (:func:`lower_bound`)."""
    if epsilon_ >= r.eps0:
        return r.delta0
    exact = _third_value(r, n)
    return max([pair.delta(epsilon_).lower for pair in fixed_dataset_pairs(r, n).values()]
               + ([exact.delta_lower(epsilon_)] if exact is not None else []) + [r.delta0])


def _bound(eps: float, delta: float, method: str, r: Randomizer, n: int,
           candidates: Mapping[str, float]) -> ShuffleBound:
    return ShuffleBound(float(eps), float(delta), method, r.eps0, n, r.name, dict(candidates))


@functools.lru_cache(maxsize=512)
def _epsilon_cached(r: Randomizer, n: int, delta: float) -> ShuffleBound:
    eps0 = r.eps0
    if eps0 == 0 and r.delta0 == 0:
        return _bound(0.0, delta, "none", r, n, {"none": 0.0})
    cands: dict[str, float] = {}
    if r.kind == "krr" and r.k == 2:
        cands["fmt23"] = _binary_exact(eps0, n, delta)[1]
        if n <= _MAX_EXACT_BINARY_N:
            cands["binary_rr_exact"] = _binary_exact(eps0, n, delta)[0].upper
    elif r.kind == "krr":
        low = _lower_pairs(eps0, n, r.k)["others_at_c"].epsilon_lower(delta, eps0)
        blanket = _blanket(eps0, n, r.k)

        def upper(e):
            b, s = blanket.evaluate(e)
            return b.upper, s
        cands["krr_blanket"] = newton_smallest_epsilon(upper, delta, eps0,
                                                        max(low * 1.002, 1e-12))
        if cands["krr_blanket"] > low * (1 + 1e-3):
            # the stronger clone can only help when the blanket is not already at the lower bound
            strong = _strong_clone(eps0, n)

            def strong_upper(e):
                b, s = strong.evaluate(e)
                return b.upper, s
            cands["fmt23"] = newton_smallest_epsilon(strong_upper, delta, eps0,
                                                      max(low * 1.05, 1e-12))
    elif r.kind == "general" and r.delta0 == 0:
        cands["fmt21"] = _fmt21_clone(eps0, n).epsilon(delta, eps0)
        # valid for every eps0-DP randomizer run by all n users (module docstring, "The
        # general-randomizer claim": the privacy blanket spread to binary RR's)
        cands["fmt23"] = _strong_clone(eps0, n).epsilon(delta, eps0)
        for name, fn in (("fmt21_closed_form", _shuffle.fmt21_closed_form_epsilon),
                         ("balle2020", _shuffle.balle2020_epsilon)):
            try:
                cands[name] = fn(eps0, n, delta).epsilon
            except ParameterError:
                pass
    else:
        res = _shuffle.epsilon(eps0, n, delta, randomizer="general", delta0=r.delta0)
        cands.update(res.candidates)
    best = min(cands, key=cands.get)
    if r.delta0 == 0:
        cands = margined_candidates(cands, upper=True, cap=eps0)
    return _bound(cands[best], delta, best, r, n, cands)


def epsilon(spec, n: int, delta: float) -> ShuffleBound:
    """Certified upper bound on epsilon(delta) for n users, each running the randomizer ``spec``
    (:func:`randomizer`) on its own value, the server seeing the shuffled reports; neighbouring
    datasets differ in one user's value (replace one).  ``.method`` names the smallest bound and
    ``.candidates`` lists every bound that applied:

    * binary RR: ``"binary_rr_exact"`` -- the exact worst case over all datasets, certified by
      branch and bound (:class:`BinaryRRWorstCase`; within 0.4 % of the lower bound);
    * k-RR, k >= 3: ``"krr_blanket"`` (:class:`KRRBlanket`) and ``"fmt23"`` (stronger clone;
      k-RR is in the errata's class E_eps0, see :mod:`dpplugins.amplification.shuffle`);
    * general eps0-DP (one randomizer for all users): ``"fmt23"`` (the stronger clone pair,
      valid by the blanket argument of the module docstring), ``"fmt21"`` (FMT21 Thm 3.1, the
      clone pair computed exactly), ``"fmt21_closed_form"``, ``"balle2020"``; (eps0,
      delta0)-DP: Balle et al. 2020 or none.

    Example::

        >>> b = epsilon(("binary_rr", 4.0), 100_000, 1e-6)
        >>> b.method, b.epsilon < epsilon(("general", 4.0), 100_000, 1e-6).epsilon
        ('binary_rr_exact', True)
    """
    r = randomizer(spec)
    n, delta = _check_n_delta(n, delta)
    return _epsilon_cached(r, n, delta)


@functools.lru_cache(maxsize=512)
def _lower_cached(r: Randomizer, n: int, delta: float) -> ShuffleBound:
    eps0 = r.eps0
    if r.delta0 > delta:
        # the class holds a randomizer that publishes its input with probability delta0
        # (:func:`dpplugins.amplification.shuffle.epsilon`): on a dataset where nobody else holds
        # the differing value, delta(eps) >= delta0 > delta at every eps
        return _bound(math.inf, delta, "publishes_input", r, n, {"publishes_input": math.inf})
    if eps0 == 0:
        return _bound(0.0, delta, "lower bound", r, n, {})
    cands: dict[str, float] = {}
    if r.kind == "krr" and r.k == 2 and n <= _MAX_EXACT_BINARY_N:
        # its j = 0 singleton is the "others at a" pair
        cands["binary_rr_exact"] = _binary_exact(eps0, n, delta)[0].lower
    else:
        for name, pair in fixed_dataset_pairs(r, n).items():
            cands[name] = pair.epsilon_lower(delta, eps0)
        exact = _third_value(r, n)
        if exact is not None:
            cands[f"{r.k}rr_others_at_c_exact"] = exact.epsilon_lower(delta)
    best = max(cands, key=cands.get)
    cands = margined_candidates(cands, upper=False)
    return ShuffleBound(cands[best], delta, best, eps0, n, "lower bound", cands)


def lower_bound(spec, n: int, delta: float) -> ShuffleBound:
    """Certified *lower* bound on epsilon(delta): the exact privacy of the shuffled randomizer
    on specific neighbouring datasets (:func:`krr_lower_pairs`; binary RR: the best dataset of
    the branch and bound).  For a general (eps0, delta0) randomizer, binary and ternary RR are
    eps0-DP randomizers, so their values bound every valid general upper bound from below.

    Example::

        >>> lower_bound(("krr", 2.0, 4), 10_000, 1e-6).epsilon <= epsilon(("krr", 2.0, 4),
        ...                                                            10_000, 1e-6).epsilon
        True
    """
    r = randomizer(spec)
    n, delta = _check_n_delta(n, delta)
    return _lower_cached(r, n, delta)


def epsilon_bounds(spec, n: int, delta: float) -> Bounds:
    """``(lower_bound, epsilon)`` of one round."""
    up = epsilon(spec, n, delta).epsilon
    return certified_bounds(lower_bound(spec, n, delta).epsilon, up, f"epsilon at delta={delta!r}")


def _single_user_profile(r: Randomizer) -> Callable[[np.ndarray], np.ndarray]:
    """n = 1: the randomizer itself.  k-RR: ``(e^eps0 - e^eps)_+/(e^eps0 + k - 1)``; a general
    (eps0, delta0) randomizer: the profile of its dominating pair,
    ``delta0 + (1 - delta0)(e^eps0 - e^eps)_+/(e^eps0 + 1)``."""
    others = r.k - 1 if r.kind == "krr" else 1

    def fn(eps):
        eps = np.asarray(eps, dtype=float)
        # (E - e^eps)_+ / (E + others) as -expm1(eps - eps0) / (1 + others / E): the difference
        # of the two exponentials lost 2e-11 relative at eps0 = 50, above the 1e-12 margin
        gap = np.minimum(eps - r.eps0, 0.0)
        val = -np.expm1(gap) / (1.0 + others * math.exp(-r.eps0))
        return np.minimum(r.delta0 + (1 - r.delta0) * val * (1 + 1e-12), 1.0)
    return fn


def delta_bounds(spec, n: int, epsilon_: float) -> Bounds:
    """Certified bounds on delta(epsilon) of one round (upper: the same bounds as
    :func:`epsilon`; lower: :func:`lower_bound`'s datasets)."""
    r = randomizer(spec)
    n = _shuffle.check_users(n, 1)
    eps = check_nonnegative("epsilon", epsilon_)
    if n == 1:
        v = float(_single_user_profile(r)(np.array([eps]))[0])
        # the profile is rounded up by the relative margin 1e-12 (its own rounding is a few
        # u); the lower bound takes that margin off twice (it returned v itself, 1e-12 above
        # the exact delta: binary RR, eps0 = 1, eps = 0.5 gave 0.2876491366452556 where the
        # exact value is 0.2876491366449679)
        return Bounds(v * (1 - 2e-12) if r.delta0 == 0 else 0.0, v)
    # the upper bounds at eps less EPS_ROUNDING_MARGIN, the lower ones at eps plus it
    eps_up, eps_low = float(below_by_margin(eps)), eps + EPS_ROUNDING_MARGIN
    upper = float(_single_user_profile(r)(np.array([eps_up]))[0])
    if r.eps0 > 0 and eps < r.eps0 and r.delta0 == 0:
        if r.kind == "krr" and r.k == 2 and n <= _MAX_EXACT_BINARY_N:
            upper = min(upper, _binary_worst_case(r.eps0, n).delta(eps_up)[0].upper)
        elif r.kind == "krr":
            upper = min(upper, _blanket(r.eps0, n, r.k).delta(eps_up),
                        _strong_clone(r.eps0, n).delta(eps_up).upper)
        else:   # general: the stronger clone (module docstring) is below FMT21's clone pair
            upper = min(upper, _strong_clone(r.eps0, n).delta(eps_up).upper,
                        float(_shuffle.swap.pure_profile(r.eps0, n)(np.array([eps_up]))[0]))
    elif r.delta0 > 0:
        upper = float(upper_profile(r, n)(np.array([eps]))[0])  # (shifted there)
    elif eps >= r.eps0:
        upper = 0.0
    if r.delta0 == 0:
        upper = upper_at_zero(upper, eps, r.eps0)
    # an (eps0, delta0) randomizer may publish its input with probability delta0 (lower_bound)
    low = fixed_dataset_delta_lower(r, n, eps_low) if r.eps0 > 0 else r.delta0
    if r.kind == "krr" and r.k == 2 and n <= _MAX_EXACT_BINARY_N and eps < r.eps0:
        low = max(low, _binary_worst_case(r.eps0, n).delta(eps_low)[0].lower)
    return certified_bounds(low, upper, f"delta at epsilon={eps!r}")


# --------------------------------------------------------------------------------------------
# privacy profiles and PLDs: composition over rounds
# --------------------------------------------------------------------------------------------
def _binary_profile_blocks(eps0: float, n: int) -> list[_Block]:
    """A partition of the binary-RR datasets refined for three reference deltas (1e-4, 1e-7,
    1e-10): the coarsest partition that refines each of their branch-and-bound partitions."""
    wc = _binary_worst_case(eps0, n)
    cuts = set()
    for ref in (1e-4, 1e-7, 1e-10):
        _, blocks = wc.epsilon(ref)
        cuts.update(b.lo for b in blocks)
    cuts = sorted(cuts)
    out = []
    for i, lo in enumerate(cuts):
        hi = cuts[i + 1] - 1 if i + 1 < len(cuts) else wc.J
        out.append(_Block(lo, hi, math.nan, -math.inf))
    return out


def smallest_bound(bounds: Sequence[Callable[[float], float]], epsilons: Sequence[float], *,
                   probes: int = 8) -> np.ndarray:
    """At each of ``epsilons``, the smallest of several certified upper bounds on one privacy
    profile (``bounds``: functions of one eps), evaluating every bound only at ``probes``
    points spread evenly (by rank) over ``epsilons``; at a point between two probes (by rank)
    only the bounds that were the smallest at one of those two probes are evaluated.

    Every bound is certified, so the minimum over any subset of them is a certified upper
    bound; dropping a bound only loosens the points where it would have been the smallest.
    Why: a shuffled round's profile is sampled at about 80 points for its PLD, and at
    n = 10^8 each bound costs 10-90 ms per point (its count pairs walk windows of 10^5 binomial
    terms); one bound is the smallest almost everywhere (measured for unary encoding, local
    hashing and subset selection at n = 10^4 to 10^8), so the others were mostly wasted work.
    Where the smallest bound changes between two probes, both winners are evaluated there
    (the bounds used to be every probe's winner at every point: unary encoding at 10^8 users
    evaluated two bounds at all 80 points, 2 x 7 s).  With ``len(epsilons) <= 2 probes`` (or
    one bound) every bound is evaluated everywhere.

    Example::

        >>> smallest_bound([lambda e: 1.0 - e, lambda e: 0.5], [0.0, 0.25, 0.75]).tolist()
        [0.5, 0.5, 0.25]
    """
    eps = np.asarray(epsilons, dtype=float).ravel()
    if len(bounds) == 1 or len(eps) <= 2 * probes:
        return np.array([min(b(float(e)) for b in bounds) for e in eps], dtype=float)
    order = np.argsort(eps, kind="stable")
    probe_ranks = np.unique(np.round(np.linspace(0, len(eps) - 1, probes)).astype(np.int64))
    table = np.array([[b(float(eps[i])) for b in bounds] for i in order[probe_ranks]],
                     dtype=float)
    best = table.min(axis=1)
    winners = table <= best[:, None]   # (probe, bound): the smallest there, ties included
    out = np.empty(len(eps))
    out[order[probe_ranks]] = best
    for rank in np.setdiff1d(np.arange(len(eps)), probe_ranks):
        right = int(np.searchsorted(probe_ranks, rank))   # the probes rank 0 and the last
        chosen = winners[right - 1] | winners[right]      # enclose every other rank
        e = float(eps[order[rank]])
        out[order[rank]] = min(b(e) for b, keep in zip(bounds, chosen) if keep)
    return out


def upper_profile(spec, n: int) -> Callable[[np.ndarray], np.ndarray]:
    """Vectorised certified upper bound on the one-round privacy profile ``delta(eps)``, eps >= 0,
    valid in both directions (every bound here is symmetric or takes the maximum of both).
    Values are memoised per eps (the PLD constructor asks for each point twice)."""
    r = randomizer(spec)
    n = _shuffle.check_users(n, 1)
    raw = _profile_cached(r, n)
    memo = _profile_memo(r, n)

    def fn(eps):
        eps = np.asarray(eps, dtype=float)
        flat = eps.ravel()
        if np.isnan(flat).any():   # (it raised a KeyError from the memo)
            raise ParameterError("epsilon", math.nan, "a number (not NaN)")
        missing = np.array(sorted({float(e) for e in flat if float(e) not in memo}))
        if len(missing):
            for e, v in zip(missing, np.ravel(raw(below_by_margin(missing)))):
                memo[float(e)] = float(v)
        return np.array([memo[float(e)] for e in flat]).reshape(eps.shape)
    return fn


@functools.lru_cache(maxsize=64)
def _profile_memo(r: Randomizer, n: int) -> dict:
    return {}


@functools.lru_cache(maxsize=64)
def _profile_cached(r: Randomizer, n: int) -> Callable[[np.ndarray], np.ndarray]:
    single = _single_user_profile(r)
    if n == 1 or r.eps0 == 0:
        return single
    eps0 = r.eps0
    if r.kind == "krr" and r.k == 2 and n <= _MAX_EXACT_BINARY_PROFILE_N:
        blocks = _binary_profile_blocks(eps0, n)
        # long-double FFT convolutions: a profile serves every delta of a composition, and the
        # double ones' charge (2e-12 at n = 1e5) floored it near 8e-12, so 10 rounds at delta =
        # 1e-12 certified no amplification (the bound was the sum of the eps0); windows too short
        # for an FFT are convolved directly either way
        cores = [_binary_worst_case(eps0, n)._core(b.lo, b.hi, "extended") for b in blocks]

        def fn(eps):
            eps = np.asarray(eps, dtype=float)
            out = np.zeros(eps.shape)
            for c in cores:
                out = np.maximum(out, c.delta_upper_many(eps))
            return np.minimum(out, single(eps))
        return fn
    if r.kind == "krr":
        blanket, strong = _coarse_blanket(eps0, n, r.k), _strong_clone(eps0, n)
        bounds = (lambda e: strong.delta(e).upper, blanket.delta)

        def fn(eps):
            eps = np.asarray(eps, dtype=float)
            flat = np.zeros(eps.size)
            below = eps.ravel() < eps0   # delta(eps) = 0 at eps >= eps0
            flat[below] = smallest_bound(bounds, eps.ravel()[below])
            return np.minimum(flat.reshape(eps.shape), single(eps))
        return fn
    if r.delta0 == 0:
        # general: the stronger clone (module docstring; below FMT21's clone pair, which has
        # fewer clones -- a post-processing of it)
        pair = _strong_clone(eps0, n)
        swap_profile = _shuffle.swap.pure_profile(eps0, n)

        def fn(eps):
            eps = np.asarray(eps, dtype=float)
            flat = np.array([pair.delta(float(e)).upper if e < eps0 else 0.0
                             for e in eps.ravel()]).reshape(eps.shape)
            return np.minimum(np.minimum(flat, swap_profile(eps)), single(eps))
        return fn
    approx = _shuffle.swap.approximate_profile(eps0, n, r.delta0)

    def fn(eps):
        eps = np.asarray(eps, dtype=float)
        return np.minimum(approx(eps), single(eps))
    return fn


def _eps_max(r: Randomizer, n: int) -> float:
    """An eps beyond which the upper profile is below 1e-16 (or eps0)."""
    if r.eps0 == 0:
        return 1e-6
    if n == 1 or r.delta0 > 0:
        return max(r.eps0, 1e-6)
    pair = _strong_clone(r.eps0, n) if r.kind == "krr" else _fmt21_clone(r.eps0, n)
    return max(pair.epsilon(1e-16, r.eps0), 1e-6)


#: the most bins of one round's profile PLD at its default grid step (a quarter of what the
#: default memory_limit allows a component: :func:`profile_grid_floor`)
_PROFILE_BINS = 2**20


def profile_grid_floor(eps0: float) -> float:
    """The finest default grid step of a round whose randomizer is ``eps0``-LDP: its profile PLD
    spans ``[-eps_max, eps_max]`` with ``eps_max <= max(eps0, 1e-6)`` (the profile is 0 beyond
    eps0, or ends there for an (eps0, delta0) randomizer), so at this step it has at most 2^20
    bins.  Why: the default step is 1/400 of the round's epsilon at delta = 1e-6, which can be
    tiny next to eps0 -- local hashing with eps0 = 20 into 2^53 buckets got the step 1e-6 and
    raised "value_discretization_interval=1e-06 is invalid" (4e7 bins) on a valid query.  A
    coarser grid is valid, only looser."""
    return 2.0 * max(eps0, 1e-6) / _PROFILE_BINS * 1.01


def default_grid_step(spec, n: int) -> float:
    """The PLD grid step we use for one round: 1/400 of its epsilon at delta = 1e-6 (between
    1e-6 and 1e-2), and no finer than :func:`profile_grid_floor`."""
    r = randomizer(spec)
    if n == 1 or r.eps0 == 0:
        return float(np.clip(max(r.eps0, 1e-3) / 400, 1e-6, 1e-2))
    pair = _strong_clone(r.eps0, n) if r.kind == "krr" else _fmt21_clone(r.eps0, n)
    return max(float(np.clip(pair.epsilon(1e-6, r.eps0) / 400, 1e-6, 1e-2)),
               profile_grid_floor(r.eps0))


def composition_grid_step(steps: Sequence[float], eps0s: Sequence[float]) -> float:
    """The grid step on which rounds are composed: the finest of the rounds' own ``steps``, but
    no finer than the widest round needs -- its own step, or the step at which its profile PLD
    (spanning ``[-eps_max, eps_max]``, ``eps_max <= max(eps0, 1e-6)``, :func:`_eps_max`) has
    2^18 bins, whichever is finer.  A round of eps0 = 20 composed with one of eps0 = 1e-4 took
    the latter's step 1e-6 and raised "value_discretization_interval=1e-06 is invalid" (4e7
    bins), an option nobody had set.  One kind of round keeps its own step; a coarser grid is
    valid, only looser for the narrow rounds."""
    widest = max(range(len(steps)), key=lambda i: eps0s[i])
    floor = 2.0 * max(eps0s[widest], 1e-6) / 2**18 * 1.01
    return max(min(steps), min(steps[widest], floor))


def round_pld(spec, n: int, *, value_discretization_interval: float | None = None,
              profile_points: int = 80) -> PrivacyLossDistribution:
    """Dominating PLD of one round from :func:`upper_profile` (pessimistic connect-the-dots,
    :meth:`PrivacyLossDistribution.from_privacy_profile`); it composes over rounds by FFT and
    every epsilon it gives is an upper bound.  The profile is sampled at ``profile_points``
    points up to where it falls below 1e-16 (coarser sampling is valid, only looser)."""
    r = randomizer(spec)
    n = _shuffle.check_users(n, 1)
    h = value_discretization_interval or default_grid_step(r, n)
    eps_hi = _eps_max(r, n)
    step = max(h, eps_hi / profile_points)
    return PrivacyLossDistribution.from_privacy_profile(
        upper_profile(r, n), epsilon_max=eps_hi, symmetric=True,
        value_discretization_interval=h, profile_step=step,
        description=f"shuffle model, {r.name} (eps0={r.eps0:g}, n={n})")


@dataclass(frozen=True)
class LowerPLD:
    """A PLD of an exact pair that the shuffled mechanism dominates (use its *lower* bounds),
    and ``rho``: an l1 bound on the error of each of the pair's two pmfs, so a delta computed
    from ``count`` rounds is off by at most ``count rho (1 + e^eps)`` (``|H_x(P, Q) - H_x(P',
    Q')| <= ||P - P'||_1 + x ||Q - Q'||_1``, and the l1 error of a product of probability
    vectors is at most the sum of the factors')."""

    pld: PrivacyLossDistribution
    rho: float
    description: str
    #: ``(up, down, atom)`` when known (:meth:`of_pmfs` with ``outside``): every stored mass of
    #: a window outcome, in either distribution, is between ``down`` and ``up`` times the exact
    #: mass of that outcome; ``atom`` is the larger stored mass of the one outcome without such
    #: a bound (the window's outside); see :class:`RelativeCorrection`
    ratios: tuple[float, float, float] | None = None

    @classmethod
    def of_pmfs(cls, p0: np.ndarray, p1: np.ndarray, relative: float, h: float,
                description: str, absolute: float = 0.0,
                outside: float | None = None) -> "LowerPLD":
        """The pair of two pmfs on a window, each entry within ``relative`` of the exact one
        (plus an l1 error ``absolute``), with one atom appended for each distribution's mass
        outside the window (merging outcomes is a post-processing, so the pair stays dominated
        by the exact one).  The atom is computed as ``1 - sum``, so it carries the entries' error
        once more, plus the rounding of the sum and of the normalisation:
        ``rho = 2 (relative + absolute) + (len + 8) u``.

        ``outside`` (a bound on each distribution's exact mass outside the window; only with
        ``absolute = 0``): the atom is ``outside`` in both instead, so it is off by at most
        ``outside`` and the normalising sums by at most ``relative + outside + len u``: ``rho``
        gains ``4 outside`` (our derivation), and the stored window masses, ``fl(p_i / s)``
        with ``p_i`` within ``relative`` of the exact one, are within ``[(1 - relative)(1 -
        u)/s, (1 + relative)(1 + u)/s]`` of it for the computed sum ``s`` (``ratios``)."""
        p0 = np.maximum(p0, 0.0)
        p1 = np.maximum(p1, 0.0)
        if outside is None or absolute > 0:
            outside = None
            r0, r1 = max(0.0, 1.0 - float(p0.sum())), max(0.0, 1.0 - float(p1.sum()))
        else:
            r0 = r1 = float(outside)
        p = np.concatenate([p0, [r0]])
        q = np.concatenate([p1, [r1]])
        sp, sq = float(p.sum()), float(q.sum())
        pld = PrivacyLossDistribution.from_pmfs(p / sp, q / sq, symmetric=False,
                                                value_discretization_interval=h)
        rho = 2 * (relative + absolute) + (len(p) + 8) * _U
        ratios = None
        if outside is not None:
            rho += 4 * outside
            up = max((1 + relative) * (1 + _U) / s for s in (sp, sq)) * (1 + 4 * _U)
            down = min((1 - relative) * (1 - _U) / s for s in (sp, sq)) * (1 - 4 * _U)
            atom = max(r0 / sp, r1 / sq) * (1 + 4 * _U)
            ratios = (up, down, atom)
        return cls(pld, rho, description, ratios)


def lower_round_pld(spec, n: int, *, value_discretization_interval: float | None = None
                    ) -> LowerPLD:
    """PLD of an exact one-round pair dominated by the mechanism: binary RR (also for general
    randomizers, which include it) with every other user holding the differing user's X0 value;
    k-RR: every other user holding a third value c, the three-category count pair with its
    outcomes merged by privacy loss (a post-processing,
    :func:`~dpplugins.amplification.count_pair.count_pair_loss_binned_pmfs`), or above its
    80,000,000 outcomes (n above about 1.3e6 for k = 3 and 1.6e7 for k = 64 at small eps0,
    above 1e8 at eps0 = 8) every other user holding a, reduced to the count
    of reports of b (another post-processing)."""
    r = randomizer(spec)
    n = _shuffle.check_users(n, 1)
    h = value_discretization_interval or default_grid_step(r, n)
    eps0 = r.eps0
    if r.kind == "krr" and r.k >= 3:
        binned = _count_pair_loss_binned_pmfs(_lower_pairs(eps0, n, r.k)["others_at_c"], h) \
            if n >= 2 else None
        if binned is not None:
            p0, p1, rho, outside = binned
            what = "others at a third value, merged by privacy loss"
        else:
            # 1/z and e/z: a few roundings each (z = e + k - 1), 8 u covers them
            e, z, _ = _krr_laws(eps0, r.k)
            p0, p1, rho, outside = _binary_like_window(n - 1, 1 / z, 1 / z, e / z, 8 * _U)
            what = "others at a, count of b"
    else:
        # SciPy's expit, assumed accurate to 4 u relative
        beta, alpha = float(special.expit(-eps0)), float(special.expit(eps0))
        p0, p1, rho, outside = _binary_like_window(n - 1, beta, beta, alpha, 4 * _U)
        what = "binary RR, others at the X0 value"
    return LowerPLD.of_pmfs(p0, p1, rho, h, f"exact lower-bound pair of {r.name} (n={n}, "
                                           f"{what})", outside=outside)


def _binary_like_window(others: int, pi: float, v0: float, v1: float, rounding: float):
    """``S = Bin(others, pi) + Bern(v_b)`` with ``pi <= 1/2`` and the three probabilities
    floats within relative ``rounding`` of the exact ones: the pmfs of S on ``[lo, hi + 1]``
    (``[lo, hi]`` the binomial's e^-50 window, both terms of every entry computed), a bound on
    each entry's relative error *to the exact law*, and a bound on the exact mass of S outside
    (at most the binomial's outside ``[lo, hi]``).

    The relative error, our derivation: Boost's pmf within ``binomial_pmf_error(others)`` of the
    binomial of the float ``pi``, that binomial within ``exp(others (rounding + rounding pi / (1 - pi)))`` of
    the exact one (``Bin(m, pi')(k) / Bin(m, pi)(k) = (pi'/pi)^k ((1 - pi')/(1 - pi))^(m -
    k)``; ``2 rounding others`` for ``pi <= 1/2``),
    the victim's weights within ``rounding`` (``v``) and ``(rounding v + u)/(1 - v)``
    (``1 - v``), and 4 u for the products and the sum of two non-negative terms."""
    lo, hi, outside = binomial_window(others, pi, log_cut=-50.0)
    k = np.arange(lo - 1, hi + 2)
    inside = (k >= 0) & (k <= others)
    w = np.where(inside, _pmf(np.clip(k, 0, others), others, pi), 0.0)
    p0 = v0 * w[:-1] + (1 - v0) * w[1:]
    p1 = v1 * w[:-1] + (1 - v1) * w[1:]
    drift = math.expm1(2.0 * rounding * (1 + 1e-6) * others)
    # the weights v and 1 - v: 1 - v_float is off by rounding v + u, relative to 1 - v
    weight = max(max(rounding, (rounding * v + _U) / (1 - v)) for v in (v0, v1)) \
        if max(v0, v1) < 1 else math.inf
    boost = binomial_pmf_error(others)
    relative = (1 + boost) * (1 + drift) * (1 + weight) * (1 + 4 * _U) - 1
    if not (pi <= 0.5 and math.isfinite(relative) and relative < 1e-3):
        return p0, p1, 2 * boost + 4 * _U, None
    return p0, p1, relative * (1 + 1e-6), outside


def _binary_like_pmfs(others: int, pi: float, v0: float, v1: float):
    """``S = Bin(others, pi) + Bern(v_b)``: pmfs of the count on a window, and their relative
    accuracy."""
    lo, hi, _ = binomial_window(others, pi, log_cut=-50.0)
    w = _pmf(np.arange(lo, hi + 1), others, pi)
    w = np.concatenate([[0.0], w, [0.0]])
    p0 = v0 * w[:-1] + (1 - v0) * w[1:]
    p1 = v1 * w[:-1] + (1 - v1) * w[1:]
    return p0, p1, 2 * binomial_pmf_error(others) + 4 * _U


@dataclass(frozen=True)
class Round:
    """``count`` adaptive repetitions of one shuffle-model round (fresh randomness each)."""

    randomizer: Randomizer
    n: int
    count: int = 1

    def __post_init__(self) -> None:
        # a spec such as ("krr", 2.0, 4) is normalised (a Randomizer or a family's randomizer
        # object is kept); bad values raise ParameterError here, not an AttributeError deep in
        # a composition
        if isinstance(self.randomizer, (tuple, list, str)):
            object.__setattr__(self, "randomizer", randomizer(self.randomizer))
        object.__setattr__(self, "n", _shuffle.check_users(self.n, 1))
        object.__setattr__(self, "count", check_count("count", self.count, minimum=0))


def _rounds_grid_step(rs: Sequence[Round], value_discretization_interval: float | None) -> float:
    """The grid step given, or the one all the rounds' PLDs share
    (:func:`composition_grid_step`)."""
    return value_discretization_interval or composition_grid_step(
        [default_grid_step(x.randomizer, x.n) for x in rs], [x.randomizer.eps0 for x in rs])


def _composed_round_plds(rs: Sequence[Round], h: float) -> PrivacyLossDistribution:
    """The dominating PLDs of :func:`round_pld`, each self-composed ``count`` times, composed."""
    total = None
    for x in rs:
        part = round_pld(x.randomizer, x.n, value_discretization_interval=h).self_compose(x.count)
        total = part if total is None else total.compose(part)
    return total


def _composed_lower_plds(rs: Sequence[Round], h: float
                         ) -> tuple[PrivacyLossDistribution, float, "RelativeCorrection | None"]:
    """The exact pairs of :func:`lower_round_pld` composed the same way, ``sum count rho``
    (their l1 error, charged by the caller as ``rho (1 + e^eps)``), and their relative
    correction when every round has one (:class:`RelativeCorrection`)."""
    total, rho = None, 0.0
    log_up, log_down, atom, relative = 0.0, 0.0, 0.0, True
    for x in rs:
        lp = lower_round_pld(x.randomizer, x.n, value_discretization_interval=h)
        part = lp.pld.self_compose(x.count)
        total = part if total is None else total.compose(part)
        rho += x.count * lp.rho
        if lp.ratios is None:
            relative = False
        else:
            up, down, a = lp.ratios
            log_up += x.count * math.log(up)
            log_down += x.count * math.log(down)
            atom += x.count * a
    correction = RelativeCorrection.of(log_up, log_down, atom) if relative else None
    return total, rho, correction


@dataclass(frozen=True)
class RelativeCorrection:
    """From the composition of stored pairs to the exact ones, when every stored mass of a
    window outcome is within ``[down, up]`` times the exact one (:attr:`LowerPLD.ratios`).

    Our derivation.  Over k rounds the stored product masses ``P', Q'`` of outcomes with every
    coordinate in its window are within ``[D, U]`` times the exact ones (``U = prod up``, ``D =
    prod down``, either distribution); the other outcomes have stored mass at most ``A = sum
    count atom`` in all (union bound).  With ``x' = x U / D`` every window outcome has ``P' -
    x' Q' <= U (P - x Q)``, so ``H_x'(P'||Q') <= U H_x(P||Q) + A`` (either direction), i.e.
    ``H_x(P||Q) >= (H_x'(P'||Q') - A) / U``: a lower bound on the exact delta at ``eps`` from
    the stored one at ``eps + shift``, ``shift = log(U/D)``.  For epsilon at ``delta``: the
    stored pair's certified lower epsilon at ``U delta + A``, minus ``shift``.  It replaces
    the absolute charge ``count rho (1 + e^eps)`` by a relative one: 10 rounds of binary RR at
    n = 1e5 charged 9e-11 in delta, which hid every delta below about 1e-10."""

    scale: float   # U, rounded up
    shift: float   # log(U / D), rounded up
    atom: float    # A

    @classmethod
    def of(cls, log_up: float, log_down: float, atom: float) -> "RelativeCorrection":
        slack = 1e-12 * (abs(log_up) + abs(log_down)) + 1e-300
        # past the float range (10^13 rounds) the scale is inf and the correction certifies 0
        scale = math.exp(log_up + slack) * (1 + 4 * _U) if log_up + slack < 709 else math.inf
        return cls(scale,
                   (log_up - log_down + slack) * (1 + 4 * _U), atom * (1 + 4 * _U))

    def epsilon_lower(self, pld: PrivacyLossDistribution, delta: float) -> float:
        """Certified lower bound on the exact pairs' epsilon at ``delta`` (0 where the stored
        pair's is not certified)."""
        target = (self.scale * delta + self.atom) * (1 + 4 * _U)
        if not target < 1:
            return 0.0
        try:
            stored = pld.epsilon_for_delta(target).lower
        except NumericalError:
            return 0.0
        return max(0.0, stored - self.shift) if math.isfinite(stored) else stored

    def delta_lower(self, pld: PrivacyLossDistribution, epsilon: float) -> float:
        """Certified lower bound on the exact pairs' delta at ``epsilon``."""
        try:
            stored = pld.delta_for_epsilon(epsilon + self.shift).lower
        except NumericalError:
            return 0.0
        return max(0.0, (stored - self.atom) / self.scale * (1 - 4 * _U))


def basic_composition_epsilon(terms) -> float:
    """``sum count eps0`` over ``(randomizer, count)`` pairs, the epsilon of basic composition
    (Dwork & Roth 2014, Thm 3.16: the rounds are ``(sum count eps0, sum count delta0)``-DP),
    summed exactly in rationals and rounded up to a float (exact where it is one)."""
    try:
        exact = sum(Fraction(count) * Fraction(spec.eps0) for spec, count in terms)
    except (OverflowError, ValueError):   # an infinite (or NaN) eps0
        return math.inf
    try:
        total = float(exact)
    except OverflowError:                 # a sum past the floats
        return math.inf if exact > 0 else -math.inf
    return total if Fraction(total) >= exact else math.nextafter(total, math.inf)


def pure_composition_epsilon(terms) -> float | None:
    """:func:`basic_composition_epsilon` when every randomizer is pure eps0-DP (None
    otherwise): an epsilon with delta 0, so an upper bound at every delta."""
    terms = list(terms)
    if any(getattr(spec, "delta0", 0.0) > 0 for spec, _ in terms):
        return None
    return basic_composition_epsilon(terms)


def composed_epsilon_bounds(rounds: Sequence, delta: float, *,
                            value_discretization_interval: float | None = None,
                            lower: bool = True) -> Bounds:
    """Certified ``(lower, upper)`` epsilon at ``delta`` for rounds composed adaptively
    (``rounds``: :class:`Round` or ``(spec, n, count)`` triples).  Upper: the dominating PLDs of
    :func:`round_pld` composed by FFT.  Lower: the exact pairs of :func:`lower_round_pld`
    composed the same way (an adversary may use the same datasets in every round), and at
    least :func:`event_epsilon_lower` and the best one-round bound.  Pure rounds are capped by
    :func:`pure_composition_epsilon`, which also answers where delta is below what the
    composition can certify."""
    delta = check_open_unit("delta", delta)
    rs = _as_rounds(rounds)
    if not rs:
        return Bounds(0.0, 0.0)
    h = _rounds_grid_step(rs, value_discretization_interval)
    cap = pure_composition_epsilon((x.randomizer, x.count) for x in rs)
    up = composed_upper_or_cap(_composed_round_plds(rs, h), delta, cap)
    low = 0.0
    if lower:
        low_pld, rho, correction = _composed_lower_plds(rs, h)
        margin = rho * (1 + math.exp(min(up, 700.0)))
        if delta + margin < 1:
            try:
                low = low_pld.epsilon_for_delta(min(delta + margin, 0.999999)).lower
            except NumericalError:
                low = 0.0
        if correction is not None:
            low = max(low, correction.epsilon_lower(low_pld, delta))
        low = max(low, best_single_round_lower(
            rs, lambda spec, n: fixed_dataset_epsilon_lower(spec, n, delta)),
                  event_epsilon_lower(rs, delta))
    return certified_bounds(low, up, f"epsilon at delta={delta!r}")


def composed_delta_bounds(rounds: Sequence, epsilon_: float, *,
                          value_discretization_interval: float | None = None,
                          lower: bool = True) -> Bounds:
    """Certified ``(lower, upper)`` delta at ``epsilon`` for rounds composed adaptively (see
    :func:`composed_epsilon_bounds`)."""
    eps = check_nonnegative("epsilon", epsilon_)
    rs = _as_rounds(rounds)
    if not rs:
        return Bounds(0.0, 0.0)
    cap = pure_composition_epsilon((x.randomizer, x.count) for x in rs)
    if cap is not None and eps >= cap:
        return Bounds(0.0, 0.0)
    h = _rounds_grid_step(rs, value_discretization_interval)
    try:
        up = _composed_round_plds(rs, h).delta_for_epsilon(eps, lower=False).upper
    except NumericalError:
        # the composition is out of reach (2^53 rounds: 3e13 grid bins): delta is at most 1,
        # and the lower bounds below still certify
        up = 1.0
    low = 0.0
    if lower and up > 0:
        low_pld, rho, correction = _composed_lower_plds(rs, h)
        margin = rho * (1 + math.exp(min(eps, 700.0)))
        try:
            low = max(0.0, low_pld.delta_for_epsilon(eps).lower - margin)
        except NumericalError:
            low = 0.0
        if correction is not None:
            low = max(low, correction.delta_lower(low_pld, eps))
        low = max(low, best_single_round_lower(
            rs, lambda spec, n: fixed_dataset_delta_lower(spec, n, eps)),
                  event_delta_lower(rs, eps))
    return certified_bounds(low, up, f"delta at epsilon={eps!r}")


def composed_upper_or_cap(pld: PrivacyLossDistribution, delta: float,
                          cap: float | None) -> float:
    """The certified upper epsilon of a composed dominating ``pld`` at ``delta``, at most
    ``cap`` (:func:`pure_composition_epsilon`, or None); where the composition cannot certify
    ``delta`` (its NumericalError), ``cap`` itself, an upper bound at every delta -- the error
    is raised only without one."""
    try:
        up = pld.epsilon_for_delta(delta, lower=False).upper
    except NumericalError:
        if cap is None:
            raise
        return cap
    return up if cap is None else min(up, cap)


def _log_all_report_x0(spec, n: int) -> float | None:
    """A lower bound on ``log P(every report is x0)`` when all ``n`` users hold ``x0``, for a
    pure k-RR round (a general pure randomizer: binary RR, which it includes); None for other
    randomizers.  One user reports x0 w.p. ``E/(E+k-1) = 1/(1 + (k-1) e^-eps0)``; the factor
    ``1 + 1e-10`` covers the rounding of log1p, exp and the products (a few u each)."""
    if not isinstance(spec, Randomizer) or spec.delta0 > 0:
        return None
    k = spec.k if spec.kind == "krr" else 2
    return -n * math.log1p((k - 1) * math.exp(-spec.eps0)) * (1 + 1e-10) - 1e-300


def all_report_x0_bounds(rounds: Sequence) -> tuple[float, float] | None:
    """``(log P0, K)``, both rounded down, of the event "every report of every round is x0" on
    the datasets where every other user holds x0 and the differing user x0 (X0) or x1 (X1):
    under X1 only the differing user's report changes law, ``P(x0 | x1) = e^-eps0 P(x0 | x0)``
    for k-RR, so ``P1 = P0 e^-K`` with ``K = sum count eps0`` over the rounds (our derivation).
    Rounds other than pure k-RR are left out (dropping their reports is a post-processing).
    None if no round qualifies.  It matters at eps0 in the tens, where the composed pairs
    certified nothing (binary RR, eps0 = 50, n = 5, 2 rounds, delta = 1e-6: lower 0 under an
    upper of 100; this event gives 99.999999)."""
    logs, kept = [], []
    for x in rounds:
        spec, n, count = (x.randomizer, x.n, x.count) if isinstance(x, Round) else x
        log_x0 = _log_all_report_x0(spec, n)
        if log_x0 is not None and count > 0:
            logs.append(count * log_x0)
            kept.append((spec, count))
    if not kept:
        return None
    # the products and fsum within 2 u; sum count eps0 rounded down (minus the negated sum
    # rounded up)
    return (math.fsum(logs) * (1 + 1e-12),
            -basic_composition_epsilon((s, -c) for s, c in kept))


def event_epsilon_lower(rounds: Sequence, delta: float) -> float:
    """Certified lower bound on epsilon(delta) of the composed rounds from the event of
    :func:`all_report_x0_bounds`: ``delta(eps) >= P0 - e^eps P1 = P0 (1 - e^(eps - K))``, so
    ``epsilon(delta) >= K + log(1 - delta/P0)`` where ``P0 > delta`` (0 otherwise)."""
    found = all_report_x0_bounds(rounds)
    if found is None:
        return 0.0
    log_p0, total = found
    log_ratio = math.log(delta) - log_p0
    if not log_ratio < -1e-9:
        return 0.0
    value = total + math.log1p(-math.exp(log_ratio) * (1 + 1e-12)) * (1 + 1e-12)
    return max(0.0, value - 4 * _U * abs(total))


def event_delta_lower(rounds: Sequence, epsilon_: float) -> float:
    """Certified lower bound on delta(epsilon_) from the same event: ``P0 (1 - e^(eps -
    K))`` for ``eps < K`` (0 otherwise)."""
    found = all_report_x0_bounds(rounds)
    if found is None:
        return 0.0
    log_p0, total = found
    # eps - K rounded up (its rounding is relative to |eps - K| near K, not to delta)
    gap = epsilon_ - total + 2 * _U * max(abs(epsilon_), abs(total))
    if not gap < 0:
        return 0.0
    return max(0.0, math.exp(log_p0) * -math.expm1(gap) * (1 - 1e-12))


def best_single_round_lower(rounds, one_round: Callable[[object, int], float]) -> float:
    """The largest one-round lower bound ``one_round(randomizer, n)`` among ``rounds``
    (:class:`Round` or ``(randomizer, n, count)`` triples): any one round is a post-processing
    of the whole adaptive composition (drop the other rounds' outputs), so its certified lower
    bound holds for the composition.  The composed lower bound is at least this: a round's
    three-category pair can beat the composition of the reduced pairs of
    :func:`~dpplugins.amplification.shuffle_model_families.lower_round_pld` (few rounds), a
    k-RR round's two-dimensional pair beats its one-dimensional reduction composed at large n
    (:func:`lower_round_pld`), and the composed pair may certify nothing.  Callers pass
    bounds without a search (:func:`fixed_dataset_epsilon_lower`): binary RR's branch and
    bound would cost up to a minute per round kind at n = 1e8."""
    best = 0.0
    for item in rounds:
        spec, n = (item.randomizer, item.n) if isinstance(item, Round) else item[:2]
        if n < 2:
            # one user's report is its randomizer: no lower-bound pair is built for it (the
            # pairs need two users; asking raised ParameterError on a valid query of a history
            # that mixes a family round with a one-user round); it contributes 0, still valid
            continue
        try:
            best = max(best, float(one_round(spec, n)))
        except ENGINE_FAILURES:
            continue
    return best


def _as_rounds(rounds: Sequence) -> list[Round]:
    """``rounds`` as :class:`Round` objects (ParameterError naming the item that is neither a
    Round nor a ``(randomizer, n, count)`` triple), rounds of count 0 left out."""
    try:
        items = list(rounds)
    except TypeError:
        raise ParameterError("rounds", rounds, "a sequence of Round or (randomizer, n, count) "
                             "triples") from None
    rs = []
    for i, x in enumerate(items):
        if not isinstance(x, Round):
            try:
                spec, n, count = x
            except (TypeError, ValueError):
                raise ParameterError(f"rounds[{i}]", x, "a Round or a (randomizer, n, count) "
                                     "triple") from None
            x = Round(randomizer(spec), _shuffle.check_users(n, 1),
                      check_count("count", count, minimum=0))
        rs.append(x)
    return [x for x in rs if x.count > 0]
