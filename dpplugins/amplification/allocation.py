"""Random allocation ("balls-and-bins") DP-SGD with Gaussian noise: certified privacy bounds.

**Protocol.**  Every epoch has ``t`` steps; each example is put into exactly one of them, chosen
uniformly at random and independently of the others (Chua, Ghazi, Harrison, Leeman, Kamath, Kumar,
Manurangsi, Sinha, Zhang, "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025, arXiv:2412.16802;
Feldman & Shenfeld, "Privacy amplification by random allocation", 2025, arXiv:2502.08202, whose
follow-up arXiv:2602.17284 reports random allocation at least as good as Poisson sampling for the
Gaussian mechanism -- what our numbers show too).  It is the random
check-in protocol with check-in probability 1 (Balle, Kairouz, McMahan, Thakkar, Thakurta,
"Privacy amplification via random check-ins", NeurIPS 2020, arXiv:2007.06605, Alg. 1 with the
averaged update of Sec. 4.2).  Each step adds ``N(0, sigma^2 I)`` to the sum of clipped
gradients (clipping norm 1); a step without examples releases the noise alone.

**Dominating pair** (Chua et al. 2025, arXiv:2412.16802, the pair ``(P_B, Q_B)`` of ABLQ_B for
adaptive queries): for one epoch and the remove direction,

    P = (1/t) sum_j N(e_j, sigma^2 I_t)      versus      Q = N(0, sigma^2 I_t),

and the add direction is ``(Q, P)``.  Epochs use fresh allocations, so they compose.

**Reduction to a sum of log-normals** (our derivation).  ``dP/dQ(x) = (1/t) sum_j
exp((x_j - 1/2) / sigma^2) = a S`` with ``S = sum_j Y_j``, ``Y_j = exp(x_j / sigma^2)`` and
``a = exp(-1/(2 sigma^2)) / t``.  The loss depends on ``x`` only through ``S``, so the pair is
equivalent to ``(a s mu(ds), mu(ds))`` with ``mu`` the law of ``S`` under Q: a sum of ``t``
i.i.d. log-normals ``Y = e^G``, ``G ~ N(0, 1/sigma^2)``.  Under P one summand is replaced by
``e^G'``, ``G' ~ N(1/sigma^2, 1/sigma^2)``.  Post-processings may use the whole output ``x``
(all ``Y_j``), not only ``S``.

**Check-in probability** ``p < 1`` (our derivation).  Every example first takes part in the
epoch with probability ``p`` (independently), then in one uniform step.  Fix the adversary's
(adaptive) strategy for an epoch and let ``(A, B)`` be the laws of the epoch's transcript with
and without the example, the example placed in a uniform step: Chua et al.'s pair dominates
``(A, B)`` in the sense of Zhu, Dong & Wang (AISTATS 2022, arXiv:2106.08567, Def. 8: every
hockey-stick order ``alpha >= 0``, i.e. trade-off domination), so by Blackwell's theorem (Dong,
Roth & Su, JRSS-B 2022, arXiv:1905.02383, Thm 2.10) some kernel ``K`` maps ``(P, Q)`` to ``(A,
B)``.  With check-in probability ``p`` the transcript laws are ``((1 - p) B + p A, B)`` (an
absent example is the dataset without it; the others' choices are independent of its), the
image under the same ``K`` of ``P_p = (1 - p) Q + p P`` against ``Q``; epochs compose by Zhu et
al.'s Thm 10.  So ``(P_p, Q)`` is a dominating pair (remove; add: ``(Q, P_p)``).  Its
likelihood ratio ``(1 - p) + p a S`` is again a function of ``S``, and the integrands of both
directions stay convex and monotone in ``S``, so the convex-order construction below applies
word for word with the ratio ``(1 - p) + p a s`` and with the split outcomes' P-mass ``(1 - p)
Q-mass + p P-mass``; the dominated pair is the same post-processing applied to ``P_p`` (a
kernel is linear: ``K P_p = (1 - p) K Q + p K P``), with the band ``[(1 - p) + p lo, (1 - p) + p
hi]``.  Three consequences, also checked by the tests: (i) *monotone in p*: ``P_p`` is the image
of ``P_p'`` (``p < p'``) under the kernel "with probability ``1 - p / p'`` replace the output by
a fresh draw from Q", which fixes Q; (ii) *never above random allocation into*
``T = floor(t / p)`` *steps*: releasing only the first ``t`` of the ``T`` steps is a
post-processing of that protocol and is exactly check-in with probability ``t / T >= p``, then
(i); (iii) ``t = 1`` is the Poisson-subsampled Gaussian at rate ``p``.  The Gaussian bounds
below become ``p^n delta_G(eps + n log(t / p)) <= delta(eps) <= delta_G(eps)``: under ``P_p``
the example is present with probability ``p``, and then the loss ``log((1 - p) + p a S)`` is at
least ``log p`` plus the loss of the ``p = 1`` case.  Replace-one neighbours are not covered
(they need the pair of moving the example between steps); the accountant refuses them.

**Upper bound: a dominating pair by convex order** (our derivation).  For a finite measure ``nu``
on ``[0, inf)`` write ``pair(nu) = (a s nu, nu)``.  The remove divergence of a composition
containing ``pair(nu)`` is ``E_nu[(a S * rest - g)_+]`` and the add divergence
``E_nu[(1 - g a S * rest)_+]`` (``g = e^eps``, ``rest >= 0`` from the other mechanisms); both
integrands are non-negative and convex in ``S``, the first increasing, the second decreasing.
So a measure ``nu'`` obtained from ``nu`` by a kernel that keeps or raises the mean of every atom
and by *adding* mass gives a larger remove divergence, one that keeps or lowers the mean (and adds
mass) a larger add divergence, whatever the other mechanisms are (Jensen, one coordinate of the
product at a time).  We spread every summand ``Y`` in a cell ``(kh, (k+1)h]`` (``k`` absolute) to
the two cell ends, giving each end *at least* its exact mean-preserving weight
``U_k >= E[(Y - kh)/h; cell]``, ``L_k >= E[((k+1)h - Y)/h; cell]`` (certified upper bounds of the
computed values): this measure is reached from the exact law both by a mean-raising and by a
mean-lowering kernel plus extra mass, so one summand measure serves both directions; sums of
independent summands inherit it (one summand at a time).  Summands outside ``[k0 h, y_max]``
(``k0 h`` where ``P(Y <= k0 h)`` is about ``1e-20``) and sums outside the FFT window are observed
separately (a finer observation dominates) and split into a P-only and a Q-only outcome (an
outcome ``(p, q)`` is the merge of ``(p, 0)`` and ``(0, q)``); their masses are certified upper
bounds (exact tails, and Chernoff bounds on the computed summand measure, also for the P-side
``a E[S; S > w]``).  Mass folded into the window by the circular convolution is extra mass of the
form ``pair(.)``, which only adds.

**Lower bound: a dominated pair by post-processing.**  Rounding each ``Y_j`` *down* to the grid
(``R = sum_j floor(Y_j / h) h``, so ``S`` lies in ``[R, R + t h)`` and ``dP/dQ`` of the outcome
``R`` lies in the band ``[a R, a (R + t h)]``), or merging the partial sums of the geometric
route per grid cell into their barycentres (convex order down, exactly ``p = a x q``), is a
function of the output.  Dropping outcomes -- summands outside the grid, sums outside the window,
negligible masses -- keeps a pair below: a divergence of a composition is a sum of non-negative
terms.

**Computed masses against exact ones** (our derivation).  Let ``(A, B)`` be non-negative measures
handed on as the normalised vectors ``(A / c_1, B / c_2)``.  For ``n`` such components
``H_g(prod A_i / c_1i || prod B_i / c_2i) = (prod c_1i)^-1 H_g'(prod A_i || prod B_i)`` with
``g' = g prod c_1i / c_2i``, i.e. ``H_(A,B)(eps) = (prod c_1i) H_engine(eps + sum log(c_2i /
c_1i))``: a *relative* factor on delta and a *shift* of epsilon, no additive term.  So every
componentwise relative rounding error is absorbed by choosing directed measures: for the upper
pair the summand masses are rounded up (above), for the lower pair ``A <= P*`` and ``B >= Q*``
componentwise (``H`` increases with the first and decreases with the second measure), using that
a ``t``-fold convolution of masses each within relative ``r`` is within ``(1 +- r)^t``.  Outcomes
whose second (first) mass alone can be raised freely -- Q-only outcomes in the remove direction,
P-only in the add direction -- make the upper shift non-negative.  What is left additive is the
l1 error ``e`` of the FFT output (computed in long double, bound of Higham 2002 Sec. 24.1 as in
:mod:`dpplugins.pld.compose`, plus folded mass for the lower pair).  Replacing one component's
masses, for fixed others of total first mass ``U``: with the likelihood ratio ``rho`` of every
outcome kept (upper pair, ``p = a s q``) the remove divergence moves by at most ``sum rho |e|
U <= a s_max ||e|| U`` and the add divergence by ``||e|| U``; with ratios only known to lie in a
band ``[lo, hi]`` and the computed ``p`` projected into the band (lower FFT pair), the
homogeneity ``phi(p, q) = q phi(p / q, 1)`` gives ``|phi(p', q') - phi(p, q)| <= (|p' - p| + 2 hi
|q' - q|) U`` (the sums of weighted errors are bounded by ``max(w) ||e||_1`` or Cauchy-Schwarz
``||w||_2 ||e||_2``, whichever is smaller).  No term carries a factor ``e^eps``; the additive
term is the FFT's round-off (about ``1e-14`` to ``1e-11`` per epoch, growing with the grid size;
none on the geometric route) and the mass of the first-only outcome (truncated summands, about
``2e-14`` per epoch), which is charged so rather than handed on as a ``delta(inf)`` atom.  :class:`AllocationPLD` keeps, per direction, the summed
log-factor, shift and additive term of the upper and of the lower construction.  (Before this
construction the masses were charged ``32 u`` relative per summand, times ``t``, as an l1 slack
per epoch: about ``5e-11`` per epoch, and an ``e^eps`` factor in the lower bound.)

**Numerics.**  Two ways to sum the ``t`` summands: FFT powers in long double on the uniform grid
``k h``, ``k0 <= k <= y_max / h`` (many steps per epoch, or a grid of at most ``FFT_SMALL_GRID``
cells, i.e. large noise), or direct pairwise summation on a geometric grid (few steps per epoch
or heavy tails) with the spread (upper, both neighbour weights rounded up; a sum within rounding
of a grid point also puts the fraction error on the point beyond) or barycentre contraction
(lower) after every sum and the rounding tracked per sum (Higham 2002, Sec. 4.2).  The relative
accuracy charged for a Gaussian interval mass grows with ``z^2`` in the far tails
(:func:`_cell_accuracy`).  Outcomes whose masses are both below ``1e-22`` are split (upper) or
dropped (lower), which keeps the PLD engine's rounding charge (proportional to the largest
``|log mass|``) near its value for the Gaussian mechanism.

**Several participations** (``k > 1``) live in
:mod:`dpplugins.amplification.allocation_participations`; the dominated pair of observing the sum
(:func:`sum_observation_lower_pair`) is built here, by the FFT route, with ``k`` shifted
summands and the likelihood-ratio band ``[0, (a (R + t h))^k]`` (Maclaurin's inequality
``e_k(y) / C(t, k) <= (sum y / t)^k``; Hardy, Littlewood, Polya, "Inequalities", 1952, Thm 52);
outcomes whose band exceeds ``_BAND_CAP`` are dropped (a dominated pair may drop outcomes).

**Small and large noise.**  One epoch is a post-processing of the Gaussian mechanism with
sensitivity 1 (reveal which step holds the example), and under P the loss ``log(a S)`` is at least
``(x_1 - 1/2) / sigma^2 - log t`` (the summand that holds the example), whose law is the Gaussian
mechanism's loss; the hockey-stick ``E_P[(1 - e^(eps - L))_+]`` increases with the loss, and
losses add under composition, so ``delta_G(eps + n log t) <= delta(eps) <= delta_G(eps)`` for
``n`` epochs (``mu^2 = sum_i 1/sigma_i^2``, ``n log t = sum_i log t_i``; remove direction for the
lower bound; our derivation).  Every query intersects its bounds with these.  Where the summands'
range does not fit in floating point (``sigma`` below about 0.045) an epoch is accounted by these
Gaussian bounds alone (on the PLD grid), and where the composed loss exceeds what the PLD grid
represents (epsilon above about 8000) they are evaluated in closed form: with ``a = mu/2 -
eps/mu`` and ``b = mu/2 + eps/mu``, ``delta_G = Phi(a) - e^eps Phi(-b)`` (Balle & Wang 2018,
Thm 8) and ``e^eps phi(b) = phi(a)``, the Mills-ratio bounds ``b / (1 + b^2) <= Phi(-b) / phi(b)
<= 1 / b`` give ``Phi(a) - phi(a) / b <= delta_G <= Phi(a) - phi(a) b / (1 + b^2)``.  The
relative gap of these bounds is about ``2 sigma^2 log t``, small only for small noise.  If the
grids cannot certify a delta (their error terms not small next to it), the Gaussian bounds are
returned.  Large ``sigma`` needs no special case: the summand grid starts at ``k0``, so it has
a few hundred cells whatever ``sigma``, and the FFT route takes it.  More than ``2**40`` steps
per epoch are accounted by the Gaussian bounds alone, on the Gaussian's own loss grid (the
summation routes count sums of ``t`` summands in double and FFT lengths; from ``10^13`` steps on
their certificates gave no more than the Gaussian bound, or failed, at every noise we checked),
and where that grid does not fit the memory limit (a history
mixing such an epoch with one that needs a much finer loss grid) the composition is answered
in closed form.

**Cheap certificates first** (our derivation; :meth:`AllocationPLD.delta_for_epsilon`).  A delta
query is first answered by the closed-form Gaussian bound and by the Chernoff bound of the
composed PLD (``P(L > eps) <= exp(K(lam) - lam eps)``, from the components' cumulants, no FFT),
each carried through the certificates (``e^L C + A``).  The additive terms ``A`` of the
certificates (about ``1e-14`` per epoch) are floors below which the FFT compositions can neither
lower the upper bound nor certify a lower bound above their own error term, so where the cheap
bound is below them the FFT is not run (tiny deltas at large epsilon over long runs, which took
over 10 s; reliability issue 21).

Example::

    >>> from dpplugins.amplification.allocation import random_allocation_pld
    >>> pld = random_allocation_pld(noise_multiplier=1.0, steps_per_epoch=100, epochs=1)
    >>> lower, upper = pld.epsilon_for_delta(1e-5)   # about 0.62 (Poisson sampling: 0.72)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive, check_nonnegative, check_probability)
from dpplugins.mechanisms.distributions import Gaussian
from dpplugins.mechanisms.pairs import DiscretePair
from dpplugins.mechanisms.types import MechanismPairs
from dpplugins.mechanisms.gaussian import gaussian as _gaussian_pairs
from dpplugins.pld.distribution import (Bounds, PrivacyLossDistribution, certified_bounds,
                                        component_bin_limit, component_bins,
                                        grid_noise_multiplier)
from dpplugins.pld.spectra import from_log_polar, log_polar, power_rounding

__all__ = ["AllocationPair", "AllocationPLD", "allocation_pairs", "random_allocation_pld",
           "sum_observation_lower_pair",
           "default_summand_step", "epoch_loss_scale", "MonteCarloEstimate",
           "monte_carlo_delta"]

_U = np.finfo(float).eps / 2
#: long double where it is wider than double (x86); elsewhere double, with its own round-off
_LD = np.longdouble if np.finfo(np.longdouble).eps < 1e-18 else np.float64
_U_LD = float(np.finfo(_LD).eps) / 2
#: relative accuracy we charge for Gaussian interval masses (the routine promises "a few ulps";
#: we take 32 to be safe)
_REL_MASS = 32 * _U
#: constant of the FFT round-off model (as in :mod:`dpplugins.pld.compose`)
_C_FFT = 10.0
#: cell masses below this are not trusted to be relatively accurate (underflow): such cells are
#: moved to the truncated outcomes (upper) or dropped (lower)
_TINY_CELL = 1e-280
#: products below this are moved to the truncated outcomes / dropped (no underflow)
_TINY_TERM = 1e-200
#: partial sums of the geometric route whose P- plus Q-mass is below this are moved to the
#: truncated outcomes (upper) or dropped (lower): negligible, and it keeps later sums short
_NEGLIGIBLE = 1e-40
#: outcomes with both masses below this are split (upper) or dropped (lower): keeps the PLD
#: engine's rounding charge (proportional to the largest |log mass|) small
_TRIM = 1e-22
#: outcomes of the several-participations lower pair whose likelihood-ratio band reaches above
#: this are dropped (keeps the error terms weighted by the band small)
_BAND_CAP = 1e8
#: P(Y <= y_lo) for the lowest grid point of the summands
_LOW_TAIL = 1e-20
#: relative margin for normalising and converting to double (a division in long double and a
#: rounding to double, each within one unit of round-off)
_NORM = 2 * (_U + _U_LD) * (1 + 1e-3)
#: relative margin by which P-masses are rounded away from ``a s q`` (covers the products'
#: rounding and the normalisation)
_THETA = 16 * (_U + _U_LD)
#: above this noise a summand's spread is below what a double-precision grid near 1 resolves:
#: such epochs are accounted by the Gaussian bounds (epsilon is below 1e-12 there anyway)
_HUGE_SIGMA = 1e12
#: more steps per epoch than this are accounted by the Gaussian bounds alone (module docstring,
#: "Small and large noise"): the summation routes count sums of ``t`` summands in double and in
#: FFT lengths, and their certificates widen with ``t``; checked at ``sigma`` = 0.1, 0.3, 1, 10,
#: 100, 1000: from ``10**13`` steps on they gave no more than the Gaussian bound or failed
#: (overflowing FFT lengths, a relative error above 1, loss grids beyond the memory limit)
_MAX_ALLOCATION_STEPS = 2 ** 40
#: largest Gaussian ``mu`` handled in closed form (beyond: the upper bound is inf)
_MU_CAP = 1e150
#: the closed-form Gaussian bounds take over where a composed loss this large would be needed
_CLOSED_FORM_LOSS = 8000.0
#: PLD grid losses are capped at +-600 (dpplugins.mechanisms.pairs.MAX_ABS_LOSS): an epoch whose
#: Gaussian loss reaches beyond this is accounted in closed form
_ENGINE_LOSS = 550.0


def _inv_sq(sigma: float) -> float:
    """``1 / sigma^2`` (inf where it overflows)."""
    s = 1.0 / sigma
    return s * s


def _gaussian_accounted(sigma: float, t: int, checkin: float = 1.0) -> bool:
    """Whether an epoch is accounted by the Gaussian mechanism alone (exact for ``t = 1``,
    ``p = 1``; otherwise the bounds of the module docstring, "Small and large noise"): one step,
    noise too small for the summands' range, noise above ``_HUGE_SIGMA``, or more than
    ``_MAX_ALLOCATION_STEPS`` steps."""
    return ((t == 1 and checkin == 1.0) or t > _MAX_ALLOCATION_STEPS
            or sigma > _HUGE_SIGMA or not _summands_fit(sigma, t))


def _gaussian_grid_fits(sigma: float, h_loss: float, memory_limit: int) -> bool:
    """Whether the PLD grid of the Gaussian mechanism with noise ``sigma`` (sensitivity 1) at
    loss step ``h_loss`` fits in ``memory_limit`` (the PLD engine's own check,
    :func:`dpplugins.pld.distribution.check_grid_size`); where it does not, the epoch is
    accounted in closed form instead of refused with an error about a grid step the user never
    chose (reliability issue 21)."""
    try:
        bins = component_bins(_gaussian_pairs(grid_noise_multiplier(sigma)), h_loss)
    except (ArithmeticError, ValueError):
        return False
    return bins <= component_bin_limit(memory_limit)


def _check_protocol(noise_multiplier, steps_per_epoch) -> tuple[float, int]:
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    return sigma, t


def epoch_loss_scale(noise_multiplier: float, steps_per_epoch: int,
                     checkin_probability: float = 1.0) -> float:
    """Rough standard deviation of one epoch's privacy loss, used only to size grids:
    ``p sqrt((e^(1/sigma^2) - 1) / t)`` (the chi-square divergence of Poisson sampling at rate
    ``p/t`` summed over t steps; Mironov, Talwar, Zhang 2019, Sec. 3), at most ``1/sigma``."""
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    p = check_probability("checkin_probability", checkin_probability)
    chi2 = math.expm1(min(_inv_sq(sigma), 700.0))
    return min(1.0 / sigma, p * math.sqrt(chi2 / t))


def default_summand_step(noise_multiplier: float, steps_per_epoch: int,
                         accuracy: float = 1.0) -> float:
    """Grid step ``h`` for the summands ``Y = e^G`` (``G ~ N(0, 1/sigma^2)``).

    The convex-order spread adds at most ``h^2 / 4`` to each summand's variance, so we take ``h``
    a fiftieth of ``sd(Y)``; for few steps per epoch the sum can be small where the add direction
    is decided, so ``h`` is also at most ``t E[Y] / 4000``.  ``accuracy < 1`` refines.  (Computed
    in logarithms; capped at 1e300 where ``Y``'s moments overflow -- such noise is accounted by
    the Gaussian bounds, without a summand grid.)
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    s2 = _inv_sq(sigma)
    log_mean = s2 / 2
    # log(sqrt(e^s2 - 1) e^(s2/2)); e^s2 - 1 = s2 = 1/sigma^2 where s2 underflows to 0
    log_excess = math.log(-math.expm1(-s2)) if s2 > 0 else -2.0 * math.log(sigma)
    log_sd = 0.5 * (s2 + log_excess) + log_mean
    log_h = math.log(accuracy) + min(log_sd - math.log(20.0),
                                     math.log(t) + log_mean - math.log(2000.0))
    return math.exp(min(log_h, math.log(1e300)))


# -- certified summand cells ------------------------------------------------------------------
def _summand_cells(log_mean: float, s: float, edges: np.ndarray):
    """Masses ``m_k = P(Y in (e_k, e_(k+1)])`` and partial means ``E[Y; Y in cell k]`` for
    ``Y = e^G``, ``G ~ N(log_mean, s^2)``, relatively accurate (``_REL_MASS``) where not tiny.

    ``E[e^G; a < G <= b] = e^(log_mean + s^2/2) P(a < N(log_mean + s^2, s^2) <= b)`` (completing
    the square)."""
    with np.errstate(divide="ignore"):
        log_edges = np.log(edges)  # -inf at 0
    lo, hi = log_edges[:-1], log_edges[1:]
    mass = Gaussian(log_mean, s).interval_mass(lo, hi)
    partial = math.exp(log_mean + s * s / 2) * Gaussian(log_mean + s * s, s).interval_mass(lo, hi)
    return mass, partial


def _cell_accuracy(log_mean: float, s: float, edges: np.ndarray) -> np.ndarray:
    """Relative accuracy we charge for the interval masses of ``G ~ N(log_mean, s^2)`` on the
    cells ``(log e_k, log e_(k+1)]``: ``_REL_MASS``, plus ``4 u (z^2 + 1)`` with ``z`` the cell's
    largest standardised edge -- narrow cells are integrated by quadrature of ``exp(-z^2/2)``, whose
    argument is only accurate to ``u z^2`` (the a-few-ulps model of
    :mod:`dpplugins.mechanisms.distributions` holds for moderate ``z``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_edges = np.log(edges)
        z = np.abs(log_edges - log_mean) / s
    z = np.where(np.isfinite(z), z, 0.0)
    zmax = np.maximum(z[:-1], z[1:])
    return _REL_MASS + 4 * _U * (zmax * zmax + 1.0)


def _tail_above(log_mean: float, s: float, y: float) -> float:
    """Upper bound on ``P(e^G > y)`` for ``G ~ N(log_mean, s^2)``."""
    return float(special.ndtr(-(math.log(y) - log_mean) / s)) * (1 + 2 * _REL_MASS)


def _tail_below(log_mean: float, s: float, y: float) -> float:
    """Upper bound on ``P(e^G <= y)`` (0 for ``y = 0``)."""
    if y <= 0:
        return 0.0
    return float(special.ndtr((math.log(y) - log_mean) / s)) * (1 + 2 * _REL_MASS)


def _truncation_masses(t: int, tau_q: float, tau_p: float) -> tuple[float, float]:
    """Upper bounds on the Q- and P-probability that some summand is outside the grid, given
    upper bounds ``tau_q`` (plain summand) and ``tau_p`` (the summand holding the example):
    ``1 - (1 - tau_q)^t`` and ``1 - (1 - tau_q)^(t-1) (1 - tau_p)``."""
    tau_q, tau_p = min(tau_q, 1.0), min(tau_p, 1.0)
    if tau_q >= 1.0 or tau_p >= 1.0:
        return 1.0, 1.0
    lq = math.log1p(-tau_q)
    q_out = -math.expm1(t * lq)
    p_out = -math.expm1((t - 1) * lq + math.log1p(-tau_p))
    return min(1.0, q_out * (1 + 16 * _U)), min(1.0, p_out * (1 + 16 * _U))


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _end_weights(s: float, edges: np.ndarray, mass: np.ndarray, partial: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Certified upper bounds ``(L, U)`` on the exact mean-preserving end weights of every cell
    ``(e_k, e_(k+1)]`` of ``Y = e^G``, ``G ~ N(0, s^2)``: ``U_k >= E[(Y - e_k) / w; cell]``,
    ``L_k >= E[(e_(k+1) - Y) / w; cell]`` (``w`` the cell width).

    Computed as ``w_k = (partial_k - e_k m_k) / w``, whose cancellation costs at most
    ``r (e_k + e_(k+1)) m_k / w + r m_k`` (``r`` the relative accuracy of masses and partial
    means, :func:`_cell_accuracy`, plus the subtraction's rounding).  Where the log-density of
    ``Y`` varies by at most 1 over the cell we use 8-point Gauss-Legendre quadrature of
    ``(y - e_k) f(y) / w`` instead: its error is far below round-off there (Abramowitz & Stegun
    25.4.30; the argument of :mod:`dpplugins.mechanisms.distributions`), and we charge ``2 r m_k``
    plus ``8 u (|log f| + 1) m_k`` for the exponential of the log-density.  Clipping the computed
    weight to ``[0, m_k]`` moves it towards the exact one or by at most ``r m_k``."""
    lo_e, hi_e = edges[:-1], edges[1:]
    width = hi_e - lo_e
    r = np.maximum(_cell_accuracy(0.0, s, edges), _cell_accuracy(s * s, s, edges)) + 4 * _U
    w = np.clip((partial - lo_e * mass) / width, 0.0, mass)
    error = r * ((lo_e + hi_e) / width + 2.0) * mass
    with np.errstate(divide="ignore", invalid="ignore"):
        y_lo = np.log(np.maximum(lo_e, 1e-300))
        y_hi = np.log(hi_e)
        # |d log f / dy| = |1 + log(y) / s^2| / y on the cell, times the width
        variation = (1.0 + np.maximum(np.abs(y_lo), np.abs(y_hi)) / (s * s)) * width / np.maximum(
            lo_e, 1e-300)
    smooth = (lo_e > 0) & (variation <= 1.0) & (mass > 0)
    if np.any(smooth):
        u = 0.5 * (_GL_NODES + 1.0)  # nodes on [0, 1]
        left, wid = lo_e[smooth], width[smooth]
        y = left[:, None] + wid[:, None] * u[None, :]
        log_f = -0.5 * (np.log(y) / s) ** 2 - np.log(y * s * math.sqrt(2 * math.pi))
        # w_k = wid * int_0^1 u f(left + wid u) du, with wid inside the exponential: f alone
        # underflows where the cell is wide (sigma = 0.05: log y = 480 gives f = e^-768 and a
        # width of e^480, so w was 0 where the cell's mass is 1e-125 and its P-mass 1e-5 --
        # the upper bound lost that P-mass and fell below the truth)
        log_wid = np.log(wid)
        log_terms = log_f + log_wid[:, None]
        w_quad = 0.5 * np.sum(_GL_WEIGHTS[None, :] * u[None, :] * np.exp(log_terms), axis=1)
        w[smooth] = np.clip(w_quad, 0.0, mass[smooth])
        exp_error = 8 * _U * (np.max(np.abs(log_f), axis=1) + np.abs(log_wid) + 1.0)
        error[smooth] = (2 * r[smooth] + exp_error) * mass[smooth]
    cap = mass * (1 + 2 * r)
    upper = np.minimum(w + error, cap) * (1 + 4 * _U)
    lower = np.minimum(mass - w + error + r * mass, cap) * (1 + 4 * _U)
    return lower, upper


def _tiny_cell_bound(mass: np.ndarray, partial_upper_edge: np.ndarray, mean: float
                     ) -> tuple[float, float, np.ndarray]:
    """Cells whose mass is too small to be relatively accurate: (Q-mass bound, P-mass bound of
    the summand holding the example, mask).  Each such cell's true mass is at most
    ``_TINY_CELL (1 + r) + 1e-300`` (``r`` at most 1e-11, :func:`_cell_accuracy`); under P's
    special summand it is at most ``e_(k+1) / E[Y]`` times that."""
    tiny = mass < _TINY_CELL
    if not np.any(tiny):
        return 0.0, 0.0, tiny
    per = _TINY_CELL * (1 + 1e-11) + 1e-300
    q_bound = per * int(np.count_nonzero(tiny))
    with np.errstate(over="ignore"):
        p_bound = float(np.sum(np.minimum(per * partial_upper_edge[tiny] / mean, 1.0)))
    return q_bound, min(1.0, p_bound * (1 + 1e-12)), tiny


# -- sums of summands by FFT in long double --------------------------------------------------
class _LogMGF:
    """Upper bounds on ``lam -> log sum_j m_j e^(lam j)`` and ``log sum_j j m_j e^(lam j)`` for a
    non-negative measure on ``j = 0 .. n-1``.  Cells are grouped into at most 4096 blocks and each
    block's mass (summed, then rounded up) is put at its block's last index for ``lam > 0`` and
    its first for ``lam < 0``: an upper bound, cheap for long grids.  Shifted, so nothing
    overflows."""

    def __init__(self, masses: np.ndarray) -> None:
        n = len(masses)
        block = max(1, math.ceil(n / 4096))
        padded = np.zeros(math.ceil(n / block) * block)
        padded[:n] = np.maximum(masses, 0.0)
        sums = padded.reshape(-1, block).sum(axis=1) * (1 + (block + 2) * _U)
        keep = np.flatnonzero(sums > 0)
        self.log_m = np.log(sums[keep])
        self.first = (keep * block).astype(float)
        self.last = np.minimum(keep * block + block - 1, n - 1).astype(float)
        self.j_max = float(self.last[-1]) if len(keep) else 0.0
        self.j_min = float(self.first[0]) if len(keep) else 0.0

    def __call__(self, lam: float, moment: bool = False) -> float:
        j = self.last if lam > 0 else self.first
        ref = self.j_max if lam > 0 else self.j_min
        e = self.log_m + lam * (j - ref)
        if moment:  # log sum_j j m_j e^(lam j), with j at most the block's last index
            with np.errstate(divide="ignore"):
                e = e + np.log(self.last)
        if len(e) == 0:
            return -math.inf
        top = float(np.max(e))
        if top == -math.inf:
            return -math.inf
        return lam * ref + top + math.log(float(np.sum(np.exp(e - top))) * (1 + 1e-12))


def _chernoff_window(parts, tail: float, max_index: int) -> tuple[int, int, float, float, float]:
    """Window ``[w_lo, w_hi]`` of the sum index ``J = sum of independent indices`` (``parts``:
    ``(log-MGF, count)``) with certified masses outside: ``P(J > w_hi) <= exp(K(lam) - lam (w_hi
    + 1))`` and ``P(J < w_lo) <= exp(K(-lam) + lam (w_lo - 1))`` for the cumulant ``K`` of the
    measure (Chernoff; any ``lam > 0`` is valid, we search a grid).  Returns ``(w_lo, w_hi,
    mass above, mass below, lam used above)``."""
    if max_index < 8192:
        return 0, max_index, 0.0, 0.0, 0.0
    log_tail = math.log(tail)

    def cumulant(lam):
        return sum(k * f(lam) for f, k in parts)

    # scale of J: lam from 1e-6 to 20 over the spread (in index units)
    mean = sum(k * math.exp(min(f(1e-9, True) - f(1e-9), 700.0)) for f, k in parts)
    spread = max(1.0, math.sqrt(max(mean, 1.0)))
    grid = np.exp(np.linspace(math.log(1e-4 / spread), math.log(50.0 / spread), 40))
    best_hi, lam_hi = max_index, 0.0
    best_lo, lam_lo = 0, 0.0
    for lam in grid:
        edge = (cumulant(lam) - log_tail) / lam
        if edge < best_hi:
            best_hi, lam_hi = math.ceil(edge), lam
        edge = -(cumulant(-lam) - log_tail) / lam
        if edge > best_lo:
            best_lo, lam_lo = math.floor(edge), lam
    w_hi = int(min(max_index, best_hi))
    w_lo = int(max(0, min(best_lo, w_hi)))
    above = 0.0 if w_hi >= max_index else min(1.0, math.exp(min(
        0.0, cumulant(lam_hi) - lam_hi * (w_hi + 1))) * (1 + 1e-9))
    below = 0.0 if w_lo <= 0 else min(1.0, math.exp(min(
        0.0, cumulant(-lam_lo) + lam_lo * (w_lo - 1))) * (1 + 1e-9))
    return w_lo, w_hi, above, below, lam_hi


class _Spectrum(NamedTuple):
    y: np.ndarray      # rfft of the (folded) masses, long double
    eta: float         # bound on every coefficient's error
    abs_y: np.ndarray  # |y| as double, rounded up


def _spectrum(masses: np.ndarray, size: int) -> _Spectrum:
    """Real FFT (long double) of ``masses`` placed at ``0 .. len - 1`` modulo ``size``; every
    coefficient is within ``eta = c u log2(N) sum|x|`` of the exact DFT of the stored masses
    (Higham 2002, Sec. 24.1; the model of :mod:`dpplugins.pld.compose`).  Folding sums run in long
    double; their rounding is charged to ``eta`` too."""
    n = len(masses)
    folds = math.ceil(n / size)
    x = np.zeros(folds * size, dtype=_LD)
    x[:n] = masses
    x = x.reshape(folds, size).sum(axis=0) if folds > 1 else x
    y = sp_fft.rfft(x)
    log2n = math.log2(max(size, 2))
    total = float(np.sum(masses))
    eta = _C_FFT * _U_LD * log2n * total + 2 * folds * _U_LD * total
    abs_y = np.abs(y).astype(float) * (1 + 4 * _U_LD + 2 * _U) + 1e-300
    return _Spectrum(y, eta, abs_y)


class _Product:
    """``prod_i y_i^(k_i)`` of spectra, kept as its factors, with the bound ``G = prod (|y_i| +
    eta_i)^k_i`` (log) and ``sum k_i eta_i / (|y_i| + eta_i)``: the exact product of the exact
    spectra is within ``G (sum k eta / (|y| + eta))`` of the product of the computed ones.
    :func:`_inverse` evaluates the product only where ``G`` is in double's range, as
    ``exp(sum k_i log y_i)`` from log-modulus and phase in long double
    (:func:`dpplugins.pld.spectra.log_polar`; rounding relative ``c u (1 + sum k_i (|log y_i| +
    0.2))``, :func:`dpplugins.pld.spectra.power_rounding`, as in :mod:`dpplugins.pld.compose`).
    Binary powering cost ``2 log2 k`` complex long-double products per frequency (14 of the 28 s
    of a query at ``t = 326,049``), and the rounding of its ``j``-th squaring enters the result
    to the power ``k / 2^j``, so that too grows ``k``-fold, not with the number of products."""

    def __init__(self, half: int) -> None:
        self.factors: tuple = ()
        self.log_g = np.zeros(half)
        self.ratio = np.zeros(half)

    def times(self, spec: _Spectrum, k: int) -> "_Product":
        if k == 0:
            return self
        out = _Product(0)
        out.factors = self.factors + ((spec, k),)
        magnitude = spec.abs_y + spec.eta
        out.log_g = self.log_g + k * np.log(magnitude)
        out.ratio = self.ratio + k * spec.eta / magnitude
        return out

    def at(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The product at the frequencies ``live`` (long double) and its rounding term ``1 + sum
        k_i power_rounding(y_i)`` (in units of ``c u``) there."""
        log_modulus, phase, rounding = 0.0, 0.0, 1.0
        for spec, k in self.factors:
            lm, arg, _ = log_polar(spec.y[live])
            log_modulus = log_modulus + k * lm
            phase = phase + k * arg
            rounding = rounding + k * power_rounding(lm, arg, spec.eta)
        return from_log_polar(log_modulus, phase), rounding


def _inverse(prod: _Product, size: int) -> tuple[np.ndarray, float, float]:
    """Inverse real FFT (long double) and bounds on the l1 and the l2 distance of the result to
    the exact circular convolution of the stored masses.  l2: the coefficient errors' 2-norm over
    the full spectrum over ``N^1/2`` (Parseval) plus the inverse transform's own rounding
    ``c u log2(N) ||x||_2`` (Higham 2002, Sec. 24.1); l1 <= ``N^1/2`` l2.  Frequencies where
    ``G < e^-745`` are set to zero: each is off by at most ``G < 5e-324``."""
    log2n = math.log2(max(size, 2))
    half = len(prod.log_g)
    live = np.flatnonzero(prod.log_g > -745.0)
    with np.errstate(under="ignore", over="ignore"):
        g = np.exp(np.minimum(prod.log_g[live], 700.0))
    value, rounding = prod.at(live)
    # the product's own rounding in long double: the phase reduction, exponential, sine, cosine
    # and complex product, 10 u (as in :mod:`dpplugins.pld.compose`)
    coeff = g * (prod.ratio[live] + _C_FFT * _U_LD * rounding + 10 * _U_LD)
    weights = np.full(half, 2.0)
    weights[0] = 1.0
    if size % 2 == 0:
        weights[-1] = 1.0
    spectrum = np.zeros(half, dtype=value.dtype)
    spectrum[live] = value
    x = sp_fft.irfft(spectrum, n=size)
    dead = half * 4 * 5e-324
    norm2 = float(np.sqrt(np.sum(np.square(x.astype(float)))))
    l2 = ((float(np.sqrt(np.sum(weights[live] * coeff * coeff))) + dead) / math.sqrt(size)
          + _C_FFT * _U_LD * log2n * norm2 * (1 + 1e-6) + 1e-300) * (1 + 1e-6)
    return x, l2 * math.sqrt(size) * (1 + 1e-9), l2


def _weighted(weights: np.ndarray, l1: float, l2: float) -> float:
    """Bound on ``sum_i w_i |e_i|`` for ``w >= 0`` and an error vector with ``||e||_1 <= l1``,
    ``||e||_2 <= l2``: the smaller of ``max(w) l1`` and ``||w||_2 l2`` (Cauchy-Schwarz)."""
    w = np.asarray(weights, dtype=float)
    top = float(np.max(w))
    if not top > 0:
        return 0.0
    # ||w||_2 scaled by its largest entry (w * w overflowed for weights above 1e154)
    norm = top * float(np.sqrt(np.sum((w / top) ** 2)))
    return min(top * l1, norm * l2) * (1 + 1e-9)


def _window_of(x: np.ndarray, w_lo: int) -> np.ndarray:
    """Entries ``w_lo .. w_lo + N - 1`` of a circular result of length N."""
    return np.roll(x, -(w_lo % len(x)))


def _fft_size(span: int, memory_limit: int, what: str) -> int:
    # long double: input, spectrum, two powers and the result, plus double work arrays; checked
    # before next_fast_len, which overflows (or refuses) for spans beyond about 2**62
    size = span if span * 120 > memory_limit else sp_fft.next_fast_len(max(span, 2), real=True)
    if size * 120 > memory_limit:
        raise NumericalError(
            f"{what} needs an FFT of {size:,} points, more than memory_limit={memory_limit:,} "
            "bytes allows", "use method='geometric', a larger summand_step, or raise "
            "memory_limit")
    return size


# -- certificates and the pairs handed to the PLD engine --------------------------------------
class _Cert(NamedTuple):
    """What the numbers handed on certify, for one direction (summed over composed epochs):

    upper: ``H_true(eps) <= exp(log_factor) H_engine(eps + shift) + additive exp(log_growth)``;
    lower: ``H_true(eps) >= exp(log_factor) H_engine(eps + shift) - additive exp(log_growth)``,

    where ``H_engine`` is the hockey-stick divergence of the composition of the normalised pairs
    (module docstring).  ``log_growth`` bounds the log of the other components' total first mass
    in the hybrid argument behind ``additive``.  An upper shift is never negative."""

    log_factor: float
    shift: float
    additive: float
    log_growth: float

    def plus(self, other: "_Cert") -> "_Cert":
        return _Cert(*(a + b for a, b in zip(self, other)))

    def times(self, k: int) -> "_Cert":
        return _Cert(*(k * a for a in self))

    def extra(self) -> float:
        """``additive exp(log_growth)``, rounded up; ``inf`` past double's range.  (It capped
        ``log_growth`` at 700, an underestimate when ``additive < e^-700``, and multiplied
        numpy scalars, which warned of the overflow.)"""
        additive = float(self.additive)
        if not additive > 0.0:
            return 0.0
        if self.log_growth <= 700.0:
            return additive * math.exp(self.log_growth)  # Python floats: inf, no warning
        # in logarithms: log rounds to within 745 u, the sum and exp to a few u more
        log_extra = math.log(additive) + self.log_growth
        return math.inf if log_extra > 709.0 else math.exp(log_extra) * (1 + 1e-12)


_EXACT = _Cert(0.0, 0.0, 0.0, 0.0)
#: no lower bound in this direction (the factor is zero)
_NONE = _Cert(-math.inf, 0.0, 0.0, 0.0)


def _normalised(x: np.ndarray) -> tuple[np.ndarray, float]:
    """``x / sum(x)`` rounded to double, and the computed sum.  Every entry ``E_i`` satisfies
    ``E_i S (1 - _NORM/2) <= x_i <= E_i S (1 + _NORM/2)`` with ``S`` the returned sum (one
    division in the working precision, one rounding to double), whatever the sum's own error."""
    total = float(np.sum(x))
    if not total > 0:
        return np.zeros(len(x)), 0.0
    return (x / _LD(total)).astype(float), total


@dataclass(frozen=True)
class AllocationPair:
    """One epoch as discrete pairs handed to the PLD engine, per direction.

    ``kind == "upper"``: a pair that dominates the epoch, up to the certificate; ``"lower"``: a
    pair the epoch dominates, up to the certificate.  ``pairs[d] = (first, second)`` are the
    normalised vectors of direction ``d`` (remove: P then Q; add: Q then P); ``slack[d]`` the
    certificate (:class:`_Cert`: log-factor, shift, additive term, growth).  ``support`` holds the
    sums ``s`` of the body outcomes (the extra outcomes follow them).  ``p`` and ``q`` are the
    remove direction's vectors.
    """

    kind: str
    pairs: dict
    slack: dict
    support: np.ndarray = field(repr=False)

    @property
    def p(self) -> np.ndarray:
        return self.pairs["remove"][0]

    @property
    def q(self) -> np.ndarray:
        return self.pairs["remove"][1]

    def direction_pair(self, direction: str, description: str) -> MechanismPairs:
        """One direction (``"remove"``: P vs Q, ``"add"``: Q vs P) as a one-sided
        :class:`~dpplugins.mechanisms.types.MechanismPairs`."""
        first, second = self.pairs[direction]
        return MechanismPairs({"remove": DiscretePair(first, second)}, True, description)


def _finish_upper(q: np.ndarray, ratio: np.ndarray, p_only: float, q_only: float, l1: float,
                  remove_error: float, support: np.ndarray, ratio_rel: float) -> AllocationPair:
    """The dominating pair ``(ratio q, q)`` with certified split masses, as normalised vectors.

    ``q`` (long double) is within l1 distance ``l1`` of a measure that dominates the epoch's
    summed law in the sense of the module docstring, with ``sum ratio |error| <= remove_error``
    for ``ratio = a s``,
    ``p_only`` / ``q_only`` bound the P- and Q-mass of the split outcomes, ``ratio_rel`` bounds
    the relative error of the computed ``a s``.  remove: first = ``ratio q`` rounded up by
    ``theta = _THETA + 2 ratio_rel``, second = ``q`` plus free Q-only mass (it changes no remove
    divergence) chosen so that the shift is >= 0; add: first = ``q``, second = ``ratio q``
    rounded down plus free P-only mass.  Outcomes with both masses below ``_TRIM`` are split
    (their first mass joins the first-only outcome, the second mass is free); the first-only
    outcome (P-only for remove, Q-only for add) is charged as an additive term.  Additive terms:
    remove ``(1 + 2 theta) remove_error + P-only``, add ``l1 + Q-only`` (kernel argument)."""
    ratio = ratio.astype(_LD)
    theta = _THETA + 2 * ratio_rel
    pairs, certs = {}, {}
    for direction in ("remove", "add"):
        if direction == "remove":
            first, second = ratio * q * _LD(1 + theta), q
            first_only, additive = p_only, (1 + 2 * theta) * remove_error
        else:
            first, second = q, ratio * q * _LD(1 - theta)
            first_only, additive = q_only, l1
        keep = np.maximum(first, second) >= _TRIM
        first_only += float(np.sum(first[~keep])) * (1 + 1e-9)
        first, second = first[keep], second[keep]
        # the first-only outcome (loss +inf) is left out and its mass charged as an additive
        # term: in any composition the products containing it contribute at most its mass
        # times the others' total first mass.  The same as a delta(inf) term, and the PLD grid
        # need not reach down for the tangent construction's start (DiscretePair.loss_range)
        additive += first_only
        s1 = float(np.sum(first))
        s2 = float(np.sum(second))
        margin = 1 + 8 * _NORM if direction == "remove" else (1 + 8 * _NORM) / (1 - 4 * _NORM)
        free = max(0.0, s1 * margin - s2) * (1 + 1e-9)
        e1, c1 = _normalised(np.concatenate([first, np.array([0.0], dtype=_LD)]))
        e2, c2 = _normalised(np.concatenate([second, np.array([free], dtype=_LD)]))
        # A = c1 (1 + NORM) e1 >= first; remove: B = c2 (1 + NORM) e2 >= second with A >= a s B
        # (theta > 2 NORM); add: B = c2 (1 - NORM) e2 <= second, so B <= a s A
        log_c1 = math.log(c1) + math.log1p(_NORM)
        log_c2 = math.log(c2) + (math.log1p(_NORM) if direction == "remove" else math.log1p(-_NORM))
        shift = log_c2 - log_c1
        if shift < 0:
            raise RuntimeError("internal: negative shift of an upper pair (report this as a bug)")
        pairs[direction] = (e1, e2)
        certs[direction] = _Cert(log_c1, shift, additive * (1 + 1e-6),
                                 max(0.0, log_c1) + 1e-9)
    return AllocationPair("upper", pairs, certs, support)


def _finish_lower(p: np.ndarray, q: np.ndarray, keep: np.ndarray, up: float, down: float,
                  remove_extra: float, add_extra: float, growth_p: float, growth_q: float,
                  support: np.ndarray) -> AllocationPair:
    """The dominated pair as normalised vectors, with the outcomes ``~keep`` dropped.

    ``p``, ``q`` (long double) are computed masses whose exact-arithmetic counterparts
    ``C_P``, ``C_Q`` satisfy ``C_P / up <= P*`` and ``C_Q / down >= Q*`` (and ``C_Q / up <= Q*``,
    ``C_P / down >= P*``) componentwise, ``P*, Q*`` the exact dominated pair; the additive terms
    ``remove_extra``, ``add_extra`` bound the effect of ``p - C_P``, ``q - C_Q`` (band or kernel
    argument).  remove: ``A = c_1 E_P <= p / up``, ``B = c_2 E_Q >= q / down``; add with the roles
    swapped."""
    pk, qk = p[keep], q[keep]
    e_p, s_p = _normalised(pk)
    e_q, s_q = _normalised(qk)
    pairs, certs = {}, {}
    # the accumulated relative error can reach 1 (``down <= 0``: t of about 1e12 steps on the
    # geometric route): the masses then certify nothing, and no lower pair is handed on (a
    # lower bound of 0 is certified) instead of a math domain error
    if s_p <= 0 or s_q <= 0 or not (down > 0 and math.isfinite(up)):
        zero = np.zeros(1)
        for d in ("remove", "add"):
            pairs[d] = (zero, zero)
            certs[d] = _NONE
        return AllocationPair("lower", pairs, certs, support[keep])
    for direction in ("remove", "add"):
        if direction == "remove":
            e1, e2, s1, s2, extra, growth = e_p, e_q, s_p, s_q, remove_extra, growth_p
        else:
            e1, e2, s1, s2, extra, growth = e_q, e_p, s_q, s_p, add_extra, growth_q
        log_c1 = math.log(s1) + math.log1p(-_NORM) - math.log(up)
        log_c2 = math.log(s2) + math.log1p(_NORM) - math.log(down)
        pairs[direction] = (e1, e2)
        certs[direction] = _Cert(log_c1, log_c2 - log_c1, extra * (1 + 1e-6),
                                 max(0.0, math.log(max(growth, 1e-300))) + 1e-9)
    return AllocationPair("lower", pairs, certs, support[keep])


def _mixed_upper(ratio: np.ndarray, p_only: float, q_only: float, ratio_rel: float,
                 checkin: float) -> tuple[np.ndarray, float, float]:
    """The upper pair of check-in probability ``p``: ratios ``(1 - p) + p a s``, the P-mass of
    the split outcomes ``(1 - p) Q-mass + p P-mass`` (both bounds), and the relative error of the
    computed ratios (two non-negative terms, a product and a sum: ``4 u`` more).  The identity
    for ``p = 1`` (module docstring, "Check-in probability")."""
    if checkin >= 1.0:
        return ratio, p_only, ratio_rel
    mixed = (1.0 - checkin) + checkin * ratio
    return (mixed, ((1.0 - checkin) * q_only + checkin * p_only) * (1 + 4 * _U),
            ratio_rel + 4 * _U)


def _ratio_error(s: float) -> float:
    """Relative error bound of the computed ``a x = exp(-s^2/2) / t * x`` against the exact value
    for ``s = 1/sigma``: ``s^2`` is within 2 ulps, so the exponent is off by ``s^2 u``, plus the
    rounding of ``exp``, the division and the products."""
    return (s * s + 8) * 2 * _U


def _rel_powers(r: float, t: int) -> tuple[float, float]:
    """Upper bound on ``(1 + r)^t`` and lower bound on ``(1 - r)^t``."""
    return (math.exp(t * math.log1p(r)) * (1 + 8 * _U),
            math.exp(t * math.log1p(-r)) * (1 - 8 * _U))


class _Cells(NamedTuple):
    """The summand cells ``(k h, (k+1) h]``, ``k0 <= k < k1``: edges, the masses of ``G ~ N(0,
    s^2)`` and of ``G' ~ N(s^2, s^2)`` (the summand holding the example; also ``E[Y; cell] /
    E[Y]``), relatively accurate where not tiny."""

    edges: np.ndarray
    plain: np.ndarray
    shifted: np.ndarray


def _uniform_cells(s: float, h: float, k0: int, k1: int) -> _Cells:
    edges = np.arange(k0, k1 + 1, dtype=float) * h
    with np.errstate(divide="ignore"):
        log_edges = np.log(edges)
    lo, hi = log_edges[:-1], log_edges[1:]
    return _Cells(edges, Gaussian(0.0, s).interval_mass(lo, hi),
                  Gaussian(s * s, s).interval_mass(lo, hi))


def _upper_fft(sigma: float, t: int, h: float, k0: int, k1: int, tail: float,
               memory_limit: int, cells: _Cells, checkin: float = 1.0) -> AllocationPair:
    """Dominating pair by FFT powers on the grid ``k h``, ``k0 <= k <= k1`` (module docstring)."""
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    edges = cells.edges
    mass, partial = cells.plain, math.exp(s * s / 2) * cells.shifted
    q_tiny, p_tiny, tiny = _tiny_cell_bound(mass, edges[1:], math.exp(s * s / 2))
    low, up = _end_weights(s, edges, mass, partial)
    low[tiny] = 0.0
    up[tiny] = 0.0
    summand = _point_weights(low, up)
    tau_q = _tail_below(0.0, s, edges[0]) + _tail_above(0.0, s, edges[-1]) + q_tiny
    tau_p = _tail_below(s * s, s, edges[0]) + _tail_above(s * s, s, edges[-1]) + p_tiny
    return upper_pair_of_summands(
        summand, t, h, k0, a, _ratio_error(s), _truncation_masses(t, tau_q, tau_p), tail,
        memory_limit, f"random allocation at noise_multiplier={sigma:g}, steps_per_epoch={t}",
        checkin)


def _point_weights(low: np.ndarray, up: np.ndarray) -> np.ndarray:
    """The weights of the grid points ``k0 .. k1`` of a spread: cell ``k``'s lower end weight on
    point ``k``, its upper end weight on point ``k + 1``, rounded up (the additions round by at
    most ``u``)."""
    summand = np.zeros(len(low) + 1)
    summand[:-1] += low
    summand[1:] += up
    return summand * (1 + 4 * _U)


def upper_pair_of_summands(summand: np.ndarray, t: int, h: float, k0: float, a: float,
                           ratio_rel: float, truncated: tuple[float, float], tail: float,
                           memory_limit: int, what: str, checkin: float = 1.0) -> AllocationPair:
    """The dominating pair of one epoch from a summand measure on the grid points ``(k0 + j) h``,
    ``0 <= j < len(summand)`` (module docstring, "Upper bound"; ``k0 >= 0`` need not be an
    integer: the sums are the points ``(t k0 + J) h``): ``summand`` holds upper
    bounds on the spread weights of the summand ``Y`` under Q, the epoch's likelihood ratio is
    ``a S`` for the sum ``S`` of ``t`` summands (``ratio_rel`` bounds the relative error of the
    computed ``a s``), ``truncated = (Q-mass, P-mass)`` bounds the probability that some summand
    is off the grid.  The t-fold sum by FFT powers in long double, its window by Chernoff
    bounds; ``what`` names the protocol in a memory error."""
    q_trunc, p_trunc = truncated
    n = len(summand) - 1
    mgf = _LogMGF(summand)
    w_lo, w_hi, above, below, lam = _chernoff_window([(mgf, t)], tail, t * n)
    size = _fft_size(w_hi - w_lo + 1, memory_limit, what)
    spec = _spectrum(summand, size)
    x, l1, l2 = _inverse(_Product(size // 2 + 1).times(spec, t), size)
    q = np.maximum(_window_of(x, w_lo), 0.0)
    index = t * k0 + w_lo + np.arange(size, dtype=float)  # absolute sum index of each entry
    support = index * h
    # P-mass of the dominating measure outside the window: a h sum K nu_K with K = t k0 + J;
    # above: Chernoff on sum J e^(lam J) nu_J = t M'(lam) M(lam)^(t-1)
    p_above = 0.0
    if above > 0:
        log_moment = math.log(t) + mgf(lam, True) + (t - 1) * mgf(lam) - lam * (w_hi + 1)
        p_above = a * h * (t * k0 * above + math.exp(min(log_moment, 0.0))) * (1 + 1e-9)
    p_below = a * h * (t * k0 + w_lo) * below * (1 + 1e-9)
    ratio, p_only, ratio_rel = _mixed_upper(a * support, p_trunc + p_above + p_below,
                                            q_trunc + above + below, ratio_rel, checkin)
    remove_error = _weighted(ratio * (1 + 8 * _U), l1, l2)
    return _finish_upper(q, ratio, p_only, q_trunc + above + below, l1, remove_error, support,
                         ratio_rel)


def _lower_fft(sigma: float, t: int, h: float, k0: int, k1: int, tail: float,
               memory_limit: int, cells: _Cells, checkin: float = 1.0,
               participations: int = 1) -> AllocationPair:
    """Dominated pair of the rounded-down sum ``R`` by FFT powers (module docstring).

    ``participations = k > 1`` (with ``p = 1``): the example is in ``k`` distinct uniform steps,
    so under P ``k`` summands are shifted; the likelihood ratio of the full output is
    ``e_k(a' Y) / C(t, k)`` (elementary symmetric polynomial, ``a' = a t``), at most ``(a S)^k``
    by Maclaurin's inequality, so the band on the outcome ``R`` is ``[0, (a (R + t h))^k]``.
    With no positive lower end the add direction gets no lower bound, and outcomes whose band
    exceeds ``_BAND_CAP`` are dropped (module docstring, "Several participations")."""
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    plain, special_ = cells.plain, cells.shifted
    # tiny cells are dropped (the branch "some summand there" is observed and dropped)
    plain = np.where(plain < _TINY_CELL, 0.0, plain)
    special_ = np.where(special_ < _TINY_CELL, 0.0, special_)
    good_q, good_s = plain > 0, special_ > 0
    r = max(float(np.max(_cell_accuracy(0.0, s, cells.edges)[good_q], initial=_REL_MASS)),
            float(np.max(_cell_accuracy(s * s, s, cells.edges)[good_s], initial=_REL_MASS)))
    return lower_pair_of_summands(
        plain, special_, r, t, h, k0, a, _ratio_error(s), tail, memory_limit,
        f"random allocation at noise_multiplier={sigma:g}, steps_per_epoch={t}", checkin,
        participations)


def lower_pair_of_summands(plain: np.ndarray, special_: np.ndarray, r: float, t: int, h: float,
                           k0: float, a: float, ratio_rel: float, tail: float,
                           memory_limit: int, what: str, checkin: float = 1.0,
                           participations: int = 1) -> AllocationPair:
    """The dominated pair of one epoch from the summand's cell masses (module docstring, "Lower
    bound"): ``plain[i]`` and ``special_[i]`` are the masses of cell ``i`` (a summand ``Y`` in
    ``[(k0 + i) h, (k0 + i + 1) h]``, ``k0 >= 0`` real) under Q and under P for the summand
    holding the example, each within relative ``r`` of the exact one (0 for a dropped cell);
    the likelihood ratio of the epoch is ``a S`` (``ratio_rel`` bounds the relative error of
    the computed ``a s``).  ``k = participations``: :func:`_lower_fft`.  The t-fold sums by FFT
    powers in long double."""
    k = participations
    n = len(plain)
    mgf_q, mgf_s = _LogMGF(plain), _LogMGF(special_)
    top = t * (n - 1)
    wq = _chernoff_window([(mgf_q, t)], tail, top)
    wp = _chernoff_window([(mgf_s, k), (mgf_q, t - k)], tail, top)
    w_lo, w_hi = min(wq[0], wp[0]), max(wq[1], wp[1])
    size = _fft_size(w_hi - w_lo + 1, memory_limit, what)
    spec_q, spec_s = _spectrum(plain, size), _spectrum(special_, size)
    half = size // 2 + 1
    prod = _Product(half)
    if t > k:
        prod = prod.times(spec_q, t - k)
    xq, l1q, l2q = _inverse(prod.times(spec_q, k), size)
    xp, l1p, l2p = _inverse(prod.times(spec_s, k), size)
    # distance to the exact (unfolded) window values: rounding plus the mass folded in (which
    # also bounds its l2 norm)
    eps_q, e2_q = l1q + wq[2] + wq[3], l2q + wq[2] + wq[3]
    eps_p, e2_p = l1p + wp[2] + wp[3], l2p + wp[2] + wp[3]
    q = np.maximum(_window_of(xq, w_lo), 0.0)
    p = _window_of(xp, w_lo)
    index = t * k0 + w_lo + np.arange(size, dtype=float)
    support = index * h
    up, down = _rel_powers(r, t)
    # exact band of dP/dQ on the outcome R: [a R, a (R + t h)]; the convolutions of the stored
    # masses have ratios within (up / down) of it, and the projection endpoints are widened by a
    # few ulps so that the computed interval contains the exact one
    factor = up / down * (1 + 8 * _U + 2 * k * ratio_rel)
    if k == 1:
        lo = (a * support / factor * (1 - 8 * _U)).astype(_LD)
        hi_d = a * (support + t * h) * factor * (1 + 8 * _U)
    else:
        lo = np.zeros(len(support), dtype=_LD)
        with np.errstate(over="ignore", divide="ignore"):
            hi_d = np.exp(np.minimum(k * np.log(a * (support + t * h)), 700.0)) * factor * (
                1 + 8 * (k + 1) * _U)
    hi = hi_d.astype(_LD)
    p = np.clip(p, lo * q, hi * q)
    hi_d = hi_d * (1 + 8 * _U)
    if checkin < 1.0:  # P_p = (1 - p) Q + p P on every outcome (module docstring)
        p = _LD(1.0 - checkin) * q + _LD(checkin) * p
    # drop: R = 0 (no lower end of the band), a negligible low prefix, negligible outcomes; the
    # hybrid argument runs over the kept outcomes only (module docstring)
    cumulative = np.cumsum(q.astype(float))
    # (k > 1: no outcome's band has a lower end and only the remove direction, which uses the
    # upper end alone, is certified, so R = 0 is kept: dropping it, 16 % of Q at sigma = 0.7 in
    # 2-out-of-4, gave the pair a negative shift, which the engine's eps >= 0 cannot use)
    keep = ((index > 0) | (k > 1)) & (cumulative > 1e-25) & (np.maximum(p, q) >= _TRIM)
    if k > 1:
        keep &= hi_d <= _BAND_CAP
    if not np.any(keep):
        keep = index > 0
    hi_k = hi_d[keep]
    # after the projection |p - C_P| <= |f_P - C_P| + hi |q - C_Q| entrywise
    eps_pp = eps_p + _weighted(hi_k, eps_q, e2_q)
    e2_pp = e2_p + float(np.max(hi_k)) * e2_q
    # the smallest ratio P/Q of an outcome, exact or computed: the projection's lower end
    # (below the exact band's a R by the factor up / down and a few ulps)
    alpha = (lo[keep].astype(float) * (1 - 4 * _U) if k == 1
             else np.ones(int(np.sum(keep))))
    if checkin < 1.0:
        # the mixed vector is within (1 - p) |q - C_Q| + p |p - C_P| of its exact counterpart,
        # and its ratios lie in the mixed band [(1 - p) + p lo, (1 - p) + p hi]
        eps_pp = ((1 - checkin) * eps_q + checkin * eps_pp) * (1 + 8 * _U)
        e2_pp = ((1 - checkin) * e2_q + checkin * e2_pp) * (1 + 8 * _U)
        hi_k = ((1 - checkin) + checkin * hi_k) * (1 + 8 * _U)
        alpha = ((1 - checkin) + checkin * alpha) * (1 - 8 * _U)
    # remove: sum (|dA| + 2 rho |dB|), the computed ratio rho <= hi (over up / down <= 1);
    # add: first = Q, every ratio Q/P at most 1 / alpha (module docstring)
    remove_extra = eps_pp + 2 * _weighted(hi_k, eps_q, e2_q) / down
    inv_alpha = (1 + 1e-9) / alpha
    add_extra = eps_q + 2 * _weighted(inv_alpha, eps_pp, e2_pp) / down
    growth_p = float(np.sum(p)) / up + eps_pp + 1e-12
    growth_q = float(np.sum(q)) / up + eps_q + 1e-12
    pair = _finish_lower(p, q, keep, up, down, remove_extra, add_extra, max(1.0, growth_p),
                         max(1.0, growth_q), support)
    if k > 1:  # no lower end of the band: no add-direction lower bound
        pair.slack["add"] = _NONE
    return pair


# -- direct summation on geometric grids -------------------------------------------------------
def _geometric_base(s: float, t: int, cells: int, log_y_max: float
                    ) -> tuple[np.ndarray, bool, float, float]:
    """Summand grid ``0, g_1 < g_2 < ...`` with constant ratio ``e^r``: ``g_1`` is where
    ``P(Y <= g_1) = 1e-20`` and point ``cells`` is ``y_max``.  A spread can move mass one point
    above the largest sum, once per summation level.  Usually one grid serves all partial sums:
    it reaches ``t y_max e^(r (levels + 1))`` (then ``single`` is True).  Where that would need
    more than ``4 cells`` extra points (tiny ``r``, i.e. large noise) a sum of ``n`` summands lives
    on ``n`` times the summand grid instead, which then continues ``2 bit_length(t) + 3`` points
    above ``y_max``.  Returns ``(grid, single, log g_1, r)``."""
    log_y_lo = s * float(special.ndtri(_LOW_TAIL))
    r = (log_y_max - log_y_lo) / (cells - 1)
    levels = 2 * max(1, t.bit_length())
    extra = math.ceil((math.log(t) + r * (levels + 1)) / r) + 2
    single = extra <= 4 * cells
    if not single:
        extra = 2 * t.bit_length() + 3
    top = log_y_lo + r * (cells + extra - 1) + (0.0 if single else math.log(t))
    if top > 709.0:
        # (the grid's last points overflowed to inf and the bounds came out NaN: sigma =
        # 0.044, t = 100, geometric_cells = 1000)
        raise NumericalError(f"random allocation's geometric grid of {cells} cells reaches "
                             f"e^{top:.0f}, beyond double precision",
                             "use more geometric_cells (default 2000) or method='fft'")
    logs = log_y_lo + r * np.arange(cells + extra)
    return np.concatenate([[0.0], np.exp(logs)]), single, log_y_lo, r


def _cells_of(grid: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Index ``j`` of the grid cell ``[g_j, g_(j+1))`` holding each ``x`` (clipped to the grid)."""
    return np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 2)


def _spread_onto(grid: np.ndarray, x: np.ndarray, m: np.ndarray, fe: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Masses ``m`` at the computed sums ``x`` spread to the neighbouring grid points with both
    weights rounded up: ``1 - f + fe`` and ``f + fe`` (capped at 1), ``fe`` bounding the error of
    the computed fraction ``f`` (including that of ``x`` itself).  Where ``x`` is within ``2 u x``
    of a grid point the exact sum may lie on either side of it: the point beyond that grid point
    gets ``fe`` too.  Either way the result is reached from the exact mean-preserving spread both
    by raising and by lowering means, plus extra mass (module docstring).  Also returns (an upper
    bound on) how many terms each grid point summed."""
    if len(x) and float(np.max(x)) > grid[-2]:
        raise RuntimeError("internal: a partial sum left the geometric grid (report this as a "
                           "bug; the grid top is sized for every level)")
    n = len(grid)
    j = _cells_of(grid, x)
    g_lo, g_hi = grid[j], grid[j + 1]
    frac = np.clip((x - g_lo) / (g_hi - g_lo), 0.0, 1.0)
    out = np.bincount(j, weights=m * np.minimum(1.0, 1.0 - frac + fe), minlength=n)
    out += np.bincount(j + 1, weights=m * np.minimum(1.0, frac + fe), minlength=n)[:n]
    c = np.bincount(j, minlength=n)
    counts = c + np.concatenate([[0], c[:-1]])
    near_lo = np.flatnonzero((x - g_lo <= 2 * _U * x) & (j > 0))
    near_hi = np.flatnonzero(g_hi - x <= 2 * _U * x)
    for index, where in ((j[near_lo] - 1, near_lo), (j[near_hi] + 2, near_hi)):
        if len(index):
            out += np.bincount(index, weights=m[where] * fe, minlength=n)
            counts += np.bincount(index, minlength=n)
    return out, counts


def _pairwise_products(x1, m1, x2, m2, a: float, block: int = 1 << 20):
    """Blocks of ``(x1_i + x2_j, m1_i m2_j)`` with products below ``_TINY_TERM`` removed; yields
    ``(sums, products, bound)`` with ``bound`` an upper bound on ``sum (a x + 1) m`` over the
    removed ones (their P- plus Q-mass, see :func:`_geometric_pairs`)."""
    rows = max(1, block // max(len(x2), 1))
    for start in range(0, len(x1), rows):
        xs = (x1[start:start + rows, None] + x2[None, :]).ravel()
        ms = (m1[start:start + rows, None] * m2[None, :]).ravel()
        big = ms >= _TINY_TERM
        small = ~big
        gone = float(np.sum((a * xs[small] + 1.0) * (ms[small] + _TINY_TERM * 1e-3)))
        yield xs[big], ms[big], gone * (1 + 1e-9)


@dataclass
class _Law:
    """A discrete law of a sum of ``count`` summands: positions ``x``, masses ``m``.

    Upper route: ``m >= (1 - lam) D`` componentwise for a measure ``D`` that dominates the exact
    law (module docstring).  Lower route: ``m`` and the barycentres ``x`` are within relative
    ``rel`` and ``pos`` of the exact barycentre contraction."""

    x: np.ndarray
    m: np.ndarray
    count: int = 1
    lam: float = 0.0
    rel: float = 0.0
    pos: float = 0.0
    #: upper route: Q-mass of the dominating measure moved to the truncated outcomes, and a bound
    #: on its P-mass in the final sum (module docstring of :func:`_geometric_pairs`)
    lost: float = 0.0
    lost_p: float = 0.0


def _self_sum(law: _Law, t: int, combine) -> _Law:
    """Law of the sum of ``t`` i.i.d. copies by binary powering, ``combine`` reducing each sum."""
    result = None
    base = law
    while t:
        if t & 1:
            result = base if result is None else combine(result, base)
        t >>= 1
        if t:
            base = combine(base, base)
    return result


class _SumTable(NamedTuple):
    """For the single geometric grid ``g_j = g_1 e^(r (j - 1))``: the sum ``g_i + g_k`` lies in the
    cell ``[g_c, g_(c+1))`` with ``c = k + offset[d]``, ``d = i - k``, at the fraction
    ``frac[d]`` of it (``d`` stored shifted by ``n - 1``), computed from ``log(1 + e^(r d))``
    without overflow."""

    offset: np.ndarray
    frac: np.ndarray
    mid: np.ndarray  # offsets for the barycentre assignment of the lower route


def _sum_table(r: float, n: int) -> _SumTable:
    d = np.arange(-(n - 1), n, dtype=float)
    lam = np.log1p(np.exp(-r * np.abs(d)))  # log(1 + e^(r d)) - max(r d, 0), in [0, log 2]
    steps = np.floor(lam / r)
    offset = (np.maximum(d, 0) + steps).astype(np.int64)
    frac = np.clip(np.expm1(lam - r * steps) / math.expm1(r), 0.0, 1.0)
    # lower route: a cell's barycentre sits near its geometric midpoint, so assign the pair to
    # the cell of e^(r/2) (g_i + g_k) (any assignment is a valid post-processing)
    mid = (np.maximum(d, 0) + np.floor(lam / r + 0.5)).astype(np.int64)
    return _SumTable(offset, frac, mid)


def _grid_deviation(grid: np.ndarray, log_lo: float, r: float) -> float:
    """Largest relative deviation of the stored grid points from ``exp(log_lo + r (j - 1))``
    (computed in long double)."""
    j = np.arange(1, len(grid), dtype=_LD)
    ideal = np.exp(_LD(log_lo) + _LD(r) * (j - 1))
    dev = np.abs(grid[1:].astype(_LD) / ideal - 1)
    return float(np.max(dev)) + 8 * _U_LD * (abs(log_lo) + r * len(grid) + 1)


def _spread_sum_fast(u: np.ndarray, v: np.ndarray, table: _SumTable, fe: float, beyond: float
                     ) -> tuple[np.ndarray, int, int]:
    """The spread of the sum of two independent grid measures on the single geometric grid
    (the same weights as :func:`_spread_onto`, from the tabulated fractions; ``fe`` covers their
    error against the stored grid, ``beyond`` the weight on the point beyond a grid point the
    exact sum may straddle).  Returns (masses, a bound on the terms summed per point, number of
    products)."""
    n = len(u)
    out = np.zeros(n)
    iu, iv = np.flatnonzero(u[1:] > 0) + 1, np.flatnonzero(v[1:] > 0) + 1
    terms, products = 0, 0
    if len(iu) and len(iv):
        a1, b1, a2, b2 = int(iu[0]), int(iu[-1]), int(iv[0]), int(iv[-1])
        centre = n - 1
        for d in range(a1 - b2, b1 - a2 + 1):
            k_lo, k_hi = max(a2, a1 - d), min(b2, b1 - d)
            if k_lo > k_hi:
                continue
            o, f = int(table.offset[centre + d]), float(table.frac[centre + d])
            if k_hi + o + 2 >= n:
                raise RuntimeError("internal: a partial sum left the geometric grid (report "
                                   "this as a bug; the grid top is sized for every level)")
            prod = u[k_lo + d: k_hi + d + 1] * v[k_lo: k_hi + 1]
            out[k_lo + o: k_hi + o + 1] += prod * min(1.0, 1.0 - f + fe)
            out[k_lo + o + 1: k_hi + o + 2] += prod * min(1.0, f + fe)
            if f <= fe:
                out[k_lo + o - 1: k_hi + o] += prod * beyond
            if f >= 1.0 - fe:
                out[k_lo + o + 2: k_hi + o + 3] += prod * beyond
            terms += 1
            products += k_hi - k_lo + 1
    # sums with the point 0 land exactly on the other point
    out += u[0] * v
    out[1:] += v[0] * u[1:]
    return out, 4 * terms + 2, products + 2 * n


def _contract_sum_fast(m1, mo1, m2, mo2, table: _SumTable) -> tuple[np.ndarray, np.ndarray, int]:
    """Lower route on the single geometric grid: the pair of cells ``(i, k)`` is merged into the
    cell ``k + mid[i - k]`` (cell 0 with cell k into k); masses ``m1 m2`` and first moments
    ``mo1 m2 + m1 mo2`` add (exactly the Q-mass and ``E_Q[S; outcome]`` of the merged outcome).
    Returns (masses, moments, a bound on the terms summed per cell)."""
    n = len(m1)
    mass = np.zeros(n)
    moment = np.zeros(n)
    i1, i2 = np.flatnonzero(m1[1:] > 0) + 1, np.flatnonzero(m2[1:] > 0) + 1
    terms = 0
    if len(i1) and len(i2):
        a1, b1, a2, b2 = int(i1[0]), int(i1[-1]), int(i2[0]), int(i2[-1])
        centre = n - 1
        for d in range(a1 - b2, b1 - a2 + 1):
            k_lo, k_hi = max(a2, a1 - d), min(b2, b1 - d)
            if k_lo > k_hi:
                continue
            o = int(table.mid[centre + d])
            if k_hi + o >= n - 1:
                raise RuntimeError("internal: a partial sum left the geometric grid (report "
                                   "this as a bug)")
            x1, y1 = m1[k_lo + d: k_hi + d + 1], mo1[k_lo + d: k_hi + d + 1]
            x2, y2 = m2[k_lo: k_hi + 1], mo2[k_lo: k_hi + 1]
            mass[k_lo + o: k_hi + o + 1] += x1 * x2
            moment[k_lo + o: k_hi + o + 1] += y1 * x2 + x1 * y2
            terms += 1
    mass += m1[0] * m2
    moment += mo1[0] * m2 + m1[0] * mo2
    mass[1:] += m2[0] * m1[1:]
    moment[1:] += mo2[0] * m1[1:] + m2[0] * mo1[1:]
    return mass, moment, 2 * terms + 3


def _geometric_pairs(sigma: float, t: int, cells: int, log_y_max: float, lower: bool = True,
                     checkin: float = 1.0) -> tuple[AllocationPair, AllocationPair | None]:
    """Both pairs by direct summation on geometric grids (few steps per epoch or heavy tails,
    where a uniform grid would need too many cells).

    Upper: every partial sum is spread to its neighbouring grid points with both weights rounded
    up (:func:`_spread_onto`); the computed masses are within relative ``lam`` *below* such a
    dominating measure (a sum of ``n`` non-negative terms loses at most ``(n - 1) u`` relative,
    products ``u`` each; Higham 2002, Sec. 4.2), so dividing by ``1 - lam`` gives a dominating
    measure.  Products below ``_TINY_TERM`` and partial sums whose ``(a x + 1) m`` is below
    ``_NEGLIGIBLE`` are moved to the truncated outcomes (observing "this happened" and splitting
    that branch): its Q-mass is what was removed (over ``1 - lam``), its P-mass in the final sum
    ``a E[S_n + rest; branch] <= (a x + 1) m`` since ``a (t - n) E[Y] <= 1``; a branch of one
    input of a sum keeps its bounds times the other input's total mass (below 1.01).  Lower:
    every partial sum is merged per grid cell into its barycentre (a post-processing), masses
    within relative ``rel`` and barycentres within ``pos``; removed terms are dropped."""
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    base, single, log_g1, r_grid = _geometric_base(s, t, cells, log_y_max)
    ratio_gap = -math.expm1(-math.log(base[2] / base[1]))  # 1 - e^-r
    edges = base[: cells + 1]
    mass, partial = _summand_cells(0.0, s, edges)
    mean = math.exp(s * s / 2)
    ratio_rel = _ratio_error(s)
    y_max = float(edges[-1])

    q_tiny, p_tiny, tiny = _tiny_cell_bound(mass, edges[1:], mean)
    low, up = _end_weights(s, edges, mass, partial)
    low[tiny] = 0.0
    up[tiny] = 0.0
    spread = np.zeros(len(base))
    spread[:cells] += low
    spread[1: cells + 1] += up
    spread *= 1 + 4 * _U
    tau_q = _tail_above(0.0, s, y_max) + q_tiny
    tau_p = _tail_above(s * s, s, y_max) + p_tiny
    q_trunc, p_trunc = _truncation_masses(t, tau_q, tau_p)
    fe = 6 * _U / ratio_gap + 4 * _U

    if single:
        table = _sum_table(r_grid, len(base))
        dev = _grid_deviation(base, log_g1, r_grid)
        # fractions from the table are off by the grid's deviation from an exact geometric
        # sequence (relative dev, three points involved: |df| <= 3 dev / (1 - e^-r)) and by
        # their own rounding (a few u, also over 1 - e^-r)
        fe_fast = (3 * dev + 6 * _U) / ratio_gap + 4 * _U
        beyond = fe_fast * math.exp(r_grid)
        top_weight = a * float(base[-1]) + 1.0

    def combine_up(u: _Law, v: _Law) -> _Law:
        n = u.count + v.count
        grid = base if single else base * n
        removed = 0.0
        if single:
            total, nterms, products = _spread_sum_fast(u.m, v.m, table, fe_fast, beyond)
            # products (and their weighted parts) that underflow lose at most 1e-307 each
            removed = 4 * products * 1e-307 * top_weight
        else:
            iu, iv = np.flatnonzero(u.m > 0), np.flatnonzero(v.m > 0)
            total = np.zeros(len(grid))
            counts = np.zeros(len(grid), dtype=np.int64)
            for xs, ms, gone in _pairwise_products(u.x[iu], u.m[iu], v.x[iv], v.m[iv], a):
                part, c = _spread_onto(grid, xs, ms, fe)
                total += part
                counts += c
                removed += gone
            nterms = int(counts.max(initial=0))
        lam = 1 - (1 - u.lam) * (1 - v.lam) * (1 - (nterms + 4) * _U)
        # negligible points: (P + Q)-mass bound (a x + 1) m below _NEGLIGIBLE
        weight = a * grid + 1.0
        small = weight * total < _NEGLIGIBLE
        scale = (1 + 1e-9) / (1 - lam)
        new_q = (float(np.sum(total[small])) + removed) * scale
        new_p = (float(np.sum(weight[small] * total[small])) + removed) * scale
        total[small] = 0.0
        # each input's lost part times the other input's total mass (below 1.01)
        return _Law(grid, total, count=n, lam=lam, lost=(u.lost + v.lost) * 1.01 + new_q,
                    lost_p=(u.lost_p + v.lost_p) * 1.01 + new_p)

    up_law = _self_sum(_Law(base, spread), t, combine_up)
    q = up_law.m.astype(_LD) / _LD(1 - up_law.lam) * _LD(1 + 4 * _U)
    q_lost, p_lost = up_law.lost, up_law.lost_p
    ratio, p_only, mixed_rel = _mixed_upper(a * up_law.x, p_trunc + p_lost, q_trunc + q_lost,
                                            ratio_rel, checkin)
    upper = _finish_upper(q, ratio, p_only, q_trunc + q_lost, 0.0, 0.0, up_law.x, mixed_rel)
    if not lower:
        return upper, None

    def combine_down(u: _Law, v: _Law) -> _Law:
        n = u.count + v.count
        grid = base if single else base * n
        mass_ = np.zeros(len(grid) - 1)
        moment = np.zeros(len(grid) - 1)
        counts = np.zeros(len(grid) - 1, dtype=np.int64)
        for xs, ms, _ in _pairwise_products(u.x, u.m, v.x, v.m, a):
            j = _cells_of(grid, xs)
            mass_ += np.bincount(j, weights=ms, minlength=len(grid) - 1)
            moment += np.bincount(j, weights=ms * xs, minlength=len(grid) - 1)
            counts += np.bincount(j, minlength=len(grid) - 1)
        # the rest is dropped (a dominated pair may drop outcomes)
        keep = (mass_ >= _TINY_TERM) & ((a * moment + mass_) >= _NEGLIGIBLE)
        nmax = int(counts.max(initial=0))
        rel = u.rel + v.rel + u.rel * v.rel + (nmax + 2) * _U
        moment_rel = rel + max(u.pos, v.pos) + 3 * _U
        return _Law(moment[keep] / mass_[keep], mass_[keep], count=n, rel=rel,
                    pos=rel + moment_rel + 2 * _U)

    good = mass >= _TINY_CELL
    r = float(np.max(np.maximum(_cell_accuracy(0.0, s, edges),
                                _cell_accuracy(s * s, s, edges))[good], initial=_REL_MASS))
    if single:
        return upper, _geometric_lower_fast(a, base, mass, partial, good, r, t, table,
                                            ratio_rel, checkin)
    bary = _Law(partial[good] / mass[good], mass[good], rel=r, pos=2 * r + 3 * _U)
    dn_law = _self_sum(bary, t, combine_down)
    x = dn_law.x.astype(_LD)
    m = dn_law.m.astype(_LD)
    p = _LD(a) * x * m
    # p = a x m is within (1 + rel)(1 + pos)(1 + ratio_rel)(1 + 2 u) of P* = a x* m*, m of m*
    rho = (1 + dn_law.rel) * (1 + dn_law.pos) * (1 + ratio_rel) * (1 + 4 * _U) - 1
    if checkin < 1.0:  # (1 - p) m + p a x m: a sum of two terms each within rho, rounded
        p = _LD(1.0 - checkin) * m + _LD(checkin) * p
        rho = rho * (1 + 1e-12) + 8 * _U
    keep = np.maximum(p, m) >= _TRIM
    lower_pair = _finish_lower(p, m, keep, 1 + rho, 1 - rho, 0.0, 0.0, 1 + rho, 1 + rho,
                               dn_law.x)
    return upper, lower_pair


def _geometric_lower_fast(a: float, base: np.ndarray, mass: np.ndarray, partial: np.ndarray,
                          good: np.ndarray, r: float, t: int, table: _SumTable,
                          ratio_rel: float, checkin: float = 1.0) -> AllocationPair:
    """Dominated pair of the geometric route on the single grid: the outcome is a deterministic
    merge of the summands' grid cells (:func:`_contract_sum_fast`), so its exact Q-mass and
    P-mass ``a E_Q[S; outcome]`` are sums of products of the cells' masses and partial means;
    masses are within relative ``rel``, moments within ``rel_m`` (sums of ``n`` non-negative
    terms, Higham 2002 Sec. 4.2; partial means within ``r``).  Negligible outcomes are dropped."""
    n = len(base)
    m0 = np.zeros(n)
    mo0 = np.zeros(n)
    cells = len(mass)
    m0[:cells] = np.where(good, mass, 0.0)
    mo0[:cells] = np.where(good, partial, 0.0)
    law = (m0, mo0, r, r + 2 * _U)

    def combine(x, y):
        m, mo, terms = _contract_sum_fast(x[0], x[1], y[0], y[1], table)
        rel = x[2] + y[2] + x[2] * y[2] + (terms + 2) * _U
        rel_m = max(x[3] + y[2], x[2] + y[3]) + max(x[3] * y[2], x[2] * y[3]) + (terms + 3) * _U
        drop = (m < _TINY_TERM) | (a * mo + m < _NEGLIGIBLE)
        m[drop] = 0.0
        mo[drop] = 0.0
        return (m, mo, rel, rel_m)

    result, base_law, k = None, law, t
    while k:
        if k & 1:
            result = base_law if result is None else combine(result, base_law)
        k >>= 1
        if k:
            base_law = combine(base_law, base_law)
    m, mo, rel, rel_m = result
    q = m.astype(_LD)
    p = _LD(a) * mo.astype(_LD)
    rho = max(rel, (1 + rel_m) * (1 + ratio_rel) * (1 + 2 * _U) - 1)
    if checkin < 1.0:  # (1 - p) m + p a mo: a sum of two terms each within rho, rounded
        p = _LD(1.0 - checkin) * q + _LD(checkin) * p
        rho = rho * (1 + 1e-12) + 8 * _U
    keep = (np.maximum(p, q) >= _TRIM) & (m > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        support = np.where(m > 0, mo / np.where(m > 0, m, 1.0), 0.0)
    return _finish_lower(p, q, keep, 1 + rho, 1 - rho, 0.0, 0.0, 1 + rho, 1 + rho, support)


#: the FFT route is used when a uniform summand grid needs at most this many cells
FFT_CELL_BUDGET = 3_000_000
#: ... and for any number of steps per epoch when it needs at most this many
FFT_SMALL_GRID = 20_000


def _log_y_max(sigma: float, truncation_mass: float, t: int = 1) -> float:
    """``log y_max``: the summand holding the example exceeds ``y_max`` with probability
    ``truncation_mass`` (``G' ~ N(s^2, s^2)``), and each of the other ``t - 1`` summands with
    probability at most ``truncation_mass / (t - 1)``, so the truncated P-mass is at most twice
    ``truncation_mass`` whatever ``t`` (large noise makes the plain summands' tail count)."""
    s = 1.0 / sigma
    log_y = s * s + s * float(-special.ndtri(truncation_mass))
    if t > 1:
        log_y = max(log_y, s * float(-special.ndtri(truncation_mass / (t - 1))))
    return log_y


def _summands_fit(sigma: float, t: int, truncation_mass: float = 1e-14) -> bool:
    """Whether the summands' range (and ``t`` times it, a little above) fits in double."""
    return _log_y_max(sigma, truncation_mass, t) + math.log(t) + 3.0 <= 700.0


def allocation_pairs(noise_multiplier: float, steps_per_epoch: int, *, method: str = "auto",
                     summand_step: float | None = None, geometric_cells: int = 2000,
                     truncation_mass: float = 1e-14, tail_mass: float = 1e-24,
                     memory_limit: int = 1 << 30, lower: bool = True,
                     checkin_probability: float = 1.0
                     ) -> tuple[AllocationPair, AllocationPair | None]:
    """The (dominating, dominated) discrete pairs of one random-allocation epoch, with their
    certificates (:class:`AllocationPair`).  ``checkin_probability`` ``p`` in (0, 1]: every
    example takes part with probability ``p`` (module docstring, "Check-in probability").

    ``method="fft"`` sums the summands on a uniform grid of step ``summand_step`` (default
    :func:`default_summand_step`) by FFT powers in long double; ``"geometric"`` sums them directly
    on geometric grids of ``geometric_cells`` cells up to ``y_max`` (cost ~ cells^2 log t, no
    FFT); ``"auto"`` takes the FFT for ``t >= 32`` when its grid has at most ``FFT_CELL_BUDGET``
    cells, and the geometric route where the FFT does not fit ``memory_limit``.  Summands above
    ``y_max`` (where ``P(e^G' > y_max) = truncation_mass`` for the summand that carries the
    example) or below ``P(Y <= y) = 1e-20`` are truncated; ``tail_mass`` is the
    FFT window allowance (mass outside the window, per measure).  Raises :class:`NumericalError`
    if the grid would not fit in ``memory_limit`` bytes or the noise is too small for the
    summands' range.  ``lower=False`` skips the dominated pair (returned as ``None``).
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    checkin = check_probability("checkin_probability", checkin_probability)
    truncation_mass = check_open_unit("truncation_mass", truncation_mass)
    tail_mass = check_open_unit("tail_mass", tail_mass)
    if method not in ("auto", "fft", "geometric"):
        raise ParameterError("method", method, "'auto', 'fft' or 'geometric'")
    geometric_cells = check_count("geometric_cells", geometric_cells, minimum=16)
    requested = method
    method, h, k0, k1, log_y_max = _summand_grid(sigma, t, method, summand_step, truncation_mass)
    cells = k1 - k0

    def geometric():
        if 48 * geometric_cells * (geometric_cells + 64) > memory_limit:
            raise NumericalError(f"geometric_cells={geometric_cells} needs more memory than "
                                 f"memory_limit={memory_limit}", "use fewer cells or raise "
                                 "memory_limit")
        return _geometric_pairs(sigma, t, geometric_cells, log_y_max, lower, checkin)
    if method == "geometric":
        return geometric()
    try:
        _check_cells(sigma, t, cells, memory_limit)
        grid = _uniform_cells(1.0 / sigma, h, k0, k1)
        return (_upper_fft(sigma, t, h, k0, k1, tail_mass, memory_limit, grid, checkin),
                _lower_fft(sigma, t, h, k0, k1, tail_mass, memory_limit, grid, checkin)
                if lower else None)
    except NumericalError:
        if requested != "auto":
            raise
        # the FFT does not fit the memory limit (many steps per epoch): the geometric route
        # needs none (sigma = 1, t = 1e6 at delta = 1e-8: only the Gaussian bound 5.78 was
        # left; the geometric route certifies [0.0027, 0.0212] in 0.5 s)
        return geometric()


def sum_observation_lower_pair(noise_multiplier: float, steps_per_epoch: int,
                               participations: int, *, summand_step: float | None = None,
                               truncation_mass: float = 1e-14, tail_mass: float = 1e-24,
                               memory_limit: int = 1 << 30,
                               checkin_probability: float = 1.0) -> AllocationPair:
    """A pair dominated by one epoch of ``k``-out-of-``t`` random allocation (each example in
    ``participations = k`` distinct uniformly random steps): the law of the rounded-down sum
    ``R`` of the ``t`` summands under P (``k`` of them shifted) and under Q, by FFT powers
    (module docstring, "Several participations").  Only its remove direction carries a lower
    bound.  ``k = 1`` gives the dominated pair of :func:`allocation_pairs`.

    ``checkin_probability = p < 1``: the example takes part in the epoch (in all ``k`` steps)
    with probability ``p``, so the epoch's law with it is ``(1 - p) Q + p P`` against ``Q``
    (:mod:`dpplugins.amplification.allocation_participations`, "Check-in probability"); the
    same post-processing (the rounded-down sum) of that mixture is the mixture of the two
    post-processed laws, which is what is returned (our derivation: a kernel is linear)."""
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    k = check_count("participations", participations, minimum=1)
    if k > t:
        raise ParameterError("participations", k, f"<= steps_per_epoch={t}")
    truncation_mass = check_open_unit("truncation_mass", truncation_mass)
    tail_mass = check_open_unit("tail_mass", tail_mass)
    p = check_probability("checkin_probability", checkin_probability)
    _, h, k0, k1, _ = _summand_grid(sigma, t, "fft", summand_step, truncation_mass)
    _check_cells(sigma, t, k1 - k0, memory_limit)
    grid = _uniform_cells(1.0 / sigma, h, k0, k1)
    return _lower_fft(sigma, t, h, k0, k1, tail_mass, memory_limit, grid, p, k)


def _check_cells(sigma: float, t: int, cells: int, memory_limit: int) -> None:
    max_cells = memory_limit // (8 * 12)
    if cells > max_cells:
        raise NumericalError(
            f"random allocation at noise_multiplier={sigma:g}, steps_per_epoch={t} needs "
            f"{float(cells):.3g} grid cells for one summand (memory limit allows {max_cells:,})",
            "use method='geometric', a larger summand_step or truncation_mass, or raise "
            "memory_limit")


def _summand_grid(sigma: float, t: int, method: str, summand_step: float | None,
                  truncation_mass: float) -> tuple[str, float, int, int, float]:
    """The summation route and the summand grid ``k h``, ``k0 <= k <= k1``: ``(method, h, k0,
    k1, log y_max)`` (:func:`allocation_pairs`)."""
    h = (default_summand_step(sigma, t) if summand_step is None
         else check_positive("summand_step", summand_step))
    s = 1.0 / sigma
    log_y_max = _log_y_max(sigma, truncation_mass, t)
    if not _summands_fit(sigma, t, truncation_mass):
        raise NumericalError(
            f"noise_multiplier={sigma:g} is too small for random-allocation accounting "
            "(the summands' range overflows)", "use a larger noise multiplier, or "
            "random_allocation_pld, which falls back to the Gaussian bounds")
    y_max = math.exp(log_y_max)
    h = max(h, y_max * 2.0 ** -50)  # grid indices stay exact in double
    k1 = math.ceil(y_max / h)
    k0 = min(math.floor(math.exp(s * float(special.ndtri(_LOW_TAIL))) / h), k1 - 1)
    cells = k1 - k0
    if method == "auto":
        # small uniform grids (large noise) go to the FFT for any t: there a geometric grid's
        # cells are so narrow that the rounding of the sums costs relative accuracy
        method = ("fft" if (t >= 32 or cells <= FFT_SMALL_GRID) and cells <= FFT_CELL_BUDGET
                  else "geometric")
        if method == "fft" and t < 32 and summand_step is None:
            # few steps: a finer grid is cheap here and at least as accurate as the geometric
            # route it replaces
            h = min(h, (y_max - k0 * h) / (FFT_SMALL_GRID // 2))
            k1 = math.ceil(y_max / h)
            k0 = min(math.floor(math.exp(s * float(special.ndtri(_LOW_TAIL))) / h), k1 - 1)
    return method, h, k0, k1, log_y_max


# -- closed-form Gaussian bounds ----------------------------------------------------------------
def _gaussian_parts(mu: float, epsilon: float, shift: float) -> tuple[float, float, float]:
    """``(a, b, log Phi(a))`` for ``delta_G(eps) = Phi(a) - e^eps Phi(-b)``, ``a = mu/2 - eps/mu``,
    ``b = mu/2 + eps/mu > 0``, with ``a`` moved by ``shift`` times a bound on its rounding."""
    a = mu / 2 - epsilon / mu
    a += shift * 1e-12 * (abs(mu / 2) + abs(epsilon / mu) + 1.0)
    b = mu / 2 + epsilon / mu
    return a, b, float(special.log_ndtr(a))


def _gaussian_delta_upper(mu: float, epsilon: float) -> float:
    """``delta_G(eps) <= Phi(a) - phi(a) b / (1 + b^2)``: the Mills-ratio bound ``Phi(-b) >=
    phi(b) b / (1 + b^2)`` and ``e^eps phi(b) = phi(a)`` (Balle & Wang 2018, Thm 8), in
    logarithms, with margins for the rounding of the argument and of ``log_ndtr``."""
    if not mu <= _MU_CAP:
        return 1.0
    a, b, log_cdf = _gaussian_parts(mu, epsilon, 1.0)
    log_ratio = -0.5 * a * a - 0.5 * math.log(2 * math.pi) - math.log(b) - math.log1p(1 / (b * b)) - log_cdf
    ratio = min(1.0, math.exp(min(log_ratio, 0.0)) * (1 - 1e-10))
    return min(1.0, math.exp(log_cdf) * (1 - ratio) * (1 + 1e-10) + 1e-300)


def _gaussian_delta_lower(mu: float, epsilon: float) -> float:
    """``delta_G(eps) >= Phi(a) - phi(a) / b``: ``Phi(-b) <= phi(b) / b`` (Mills ratio) and
    ``e^eps phi(b) = phi(a)``.  Evaluated in logarithms with margins."""
    mu = min(mu, _MU_CAP)  # delta_G grows with mu: a smaller mu gives a lower bound
    a, b, log_cdf = _gaussian_parts(mu, epsilon, -1.0)
    log_ratio = -0.5 * a * a - 0.5 * math.log(2 * math.pi) - math.log(b) - log_cdf
    ratio = math.exp(min(log_ratio, 1.0)) * (1 + 1e-10) + 1e-12
    if ratio >= 1.0:
        return 0.0
    return max(0.0, math.exp(log_cdf) * (1 - ratio) * (1 - 1e-10))


def _gaussian_epsilon_bounds(mu: float, delta: float, shift: float,
                             log_weight: float = 0.0) -> Bounds:
    """Closed-form bounds for an allocation composition dominated by ``N(mu, 1)`` vs ``N(0, 1)``
    whose remove direction is at least ``e^log_weight`` times that Gaussian's profile shifted by
    ``shift`` (module docstring): ``[eps_lower(delta e^-log_weight) - shift, eps_upper(delta)]``,
    found by bisection.  Valid whatever the bisection does: the upper end satisfies
    ``delta_upper(eps) <= delta`` and the lower end ``e^log_weight delta_lower(eps) > delta``
    (delta is non-increasing in eps)."""
    upper = _gaussian_epsilon_upper(mu, delta)
    target = delta * _exp(-log_weight) * (1 + 8 * _U) if log_weight < 0 else delta
    if target >= 1.0 or (mu <= _MU_CAP and not math.isfinite(upper)):
        return Bounds(0.0, upper)
    if not mu <= _MU_CAP:  # noise below 1e-150: no finite upper bound in double
        lo = _largest_violating(_MU_CAP, target, _MU_CAP * (_MU_CAP / 2 + 40.0))
        return Bounds(max(0.0, lo - shift), math.inf)
    if _gaussian_delta_lower(mu, 0.0) <= target:
        return Bounds(0.0, upper)
    lo = _largest_violating(mu, target, max(upper, 1e-300))
    return certified_bounds(max(0.0, lo - shift), upper, f"epsilon at delta={delta!r}")


def _largest_violating(mu: float, target: float, hi: float) -> float:
    """An epsilon in ``[0, hi]`` with ``_gaussian_delta_lower(mu, eps) > target`` (0 when only
    the start qualifies), by 100 bisection steps: a certified lower end, whatever the steps do,
    since delta is non-increasing in epsilon."""
    lo = 0.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _gaussian_delta_lower(mu, mid) > target:
            lo = mid
        else:
            hi = mid
    return lo


def _gaussian_epsilon_upper(mu: float, delta: float) -> float:
    """The smallest epsilon (to bisection accuracy, rounded up) with ``delta_upper(eps) <=
    delta`` (:func:`_gaussian_delta_upper`); inf where none is resolved."""
    if not mu <= _MU_CAP:
        return math.inf
    # Phi(a) <= delta at this eps, so the (smaller) upper bound is <= delta there too
    hi = max(0.0, mu * (mu / 2 + float(-special.ndtri(delta))))
    step = max(1e-12 * hi, 1e-12)
    for _ in range(2000):
        if _gaussian_delta_upper(mu, hi) <= delta:
            break
        hi += step
        step *= 2
    else:
        hi = math.inf  # delta below what the bound resolves (about 1e-300): no finite epsilon
    if not math.isfinite(hi):
        return math.inf
    lo = 0.0
    if _gaussian_delta_upper(mu, 0.0) > delta:
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if _gaussian_delta_upper(mu, mid) <= delta:
                hi = mid
            else:
                lo = mid
    else:
        hi = 0.0
    return hi


# -- the composed PLD with certificates ---------------------------------------------------------
def _exp(x: float) -> float:
    return math.exp(min(x, 700.0)) if x > -math.inf else 0.0


class _Lazy:
    """A value built on first use (an epoch's pairs and PLDs are only needed when the PLD engine
    answers, not where the closed-form Gaussian bounds do)."""

    def __init__(self, build) -> None:
        self._build = build
        self._value = None
        self._error: tuple[str, str] | None = None

    def get(self):
        if self._error is not None:
            # a build that does not fit fails the same way every time: once is enough (it can
            # cost seconds before the FFT size is known)
            raise NumericalError(*self._error)
        if self._build is not None:
            try:
                self._value = self._build()
            except NumericalError as error:
                # its messages only: the error's traceback would keep the failed build's
                # arrays alive as long as this epoch
                self._error, self._build = (error.what, error.fix), None
                raise
            self._build = None
        return self._value


def _shared_map(arguments: dict, make) -> dict:
    """``{d: make(*arguments[d])}``, made once per distinct tuple of objects: directions that
    share one PLD (a privacy-profile epoch holds both of its directions in one object) keep
    sharing its composition (it was built once per direction: about 92 MB and 1.7 s of a
    10^6-bucket randomized-response query)."""
    made: dict = {}
    out = {}
    for direction, args in arguments.items():
        key = tuple(id(a) for a in args)
        if key not in made:
            made[key] = make(*args)
        out[direction] = made[key]
    return out


class AllocationPLD:
    """Composed PLD of random-allocation epochs, one per direction, with certificates.

    ``plds[d]`` composes the normalised pairs of direction ``d`` (``None`` when only the
    closed-form Gaussian bounds apply); ``upper_slack[d]`` / ``lower_slack[d]`` are the summed
    certificates (:class:`_Cert`): the true divergence of direction ``d`` is at most
    ``exp(L) H(eps + shift) + A`` (upper) and at least ``exp(L) H(eps + shift) - A`` (lower) in
    terms of the PLD's certified bounds ``H``.  ``gaussian_mu2`` (sum of ``1/sigma^2``) and
    ``log_t`` (sum of ``log t``) over the epochs give the Gaussian bounds of the module
    docstring, used where they are tighter and where the composed loss is beyond the PLD grid
    (``gaussian_mu2=None``: some epoch has another base mechanism, no Gaussian bounds;
    :mod:`dpplugins.amplification.allocation_mechanisms`);
    ``log_weight`` (sum of ``log p`` over the epochs, 0 for ``p = 1``) weights the Gaussian lower
    bound (module docstring, "Check-in probability").
    Epochs are built lazily, on the first query that needs the PLD engine.  Queries return
    :class:`~dpplugins.pld.Bounds` for the maximum over both directions.
    """

    def __init__(self, plds: dict | None, upper_slack: dict | None, lower_slack: dict | None, *,
                 has_lower: bool = True, gaussian_mu2: float | None = 0.0, log_t: float = 0.0,
                 engine: bool | None = None, lazy: "_Lazy | None" = None,
                 log_weight: float = 0.0, has_upper: bool = True) -> None:
        #: the parts ``(plds, upper_slack, lower_slack)``, built on first use
        self._parts = lazy if lazy is not None else _Lazy(lambda: (plds, upper_slack,
                                                                    lower_slack))
        #: False when the PLD engine cannot be used (closed form only)
        self.engine = (plds is not None) if engine is None else engine
        #: False when the PLDs were built from the dominating pair only (lower bounds are 0)
        self.has_lower = has_lower
        #: False for a dominated construction (only its lower bounds mean anything: its upper
        #: slots hold the dominated pair, :mod:`~dpplugins.amplification.allocation_participations`)
        self.has_upper = has_upper
        self.gaussian_mu2 = gaussian_mu2
        self.log_t = log_t
        self.log_weight = log_weight

    @property
    def plds(self) -> dict | None:
        return self._parts.get()[0] if self.engine else None

    @property
    def upper_slack(self) -> dict:
        return self._parts.get()[1]

    @property
    def lower_slack(self) -> dict:
        return self._parts.get()[2]

    def _derived(self, build, other: "AllocationPLD | None" = None, count: int = 1
                 ) -> "AllocationPLD":
        engine = self.engine and (other is None or other.engine)
        mu2 = self.gaussian_mu2
        if mu2 is not None:
            mu2 *= count
            if other is not None:
                mu2 = None if other.gaussian_mu2 is None else mu2 + other.gaussian_mu2
        return AllocationPLD(None, None, None, lazy=_Lazy(build), engine=engine,
                             has_lower=self.has_lower and (other is None or other.has_lower),
                             gaussian_mu2=mu2,
                             log_t=count * self.log_t + (other.log_t if other is not None else 0.0),
                             log_weight=count * self.log_weight
                             + (other.log_weight if other is not None else 0.0),
                             has_upper=self.has_upper and (other is None or other.has_upper))

    def compose(self, other: "AllocationPLD") -> "AllocationPLD":
        """Both compositions, certificates added."""
        def build():
            plds = (None if self.plds is None or other.plds is None
                    else _shared_map({d: (self.plds[d], other.plds[d]) for d in self.plds},
                                     lambda a, b: a.compose(b)))
            add = lambda a, b: {d: a[d].plus(b[d]) for d in a}  # noqa: E731
            return (plds, add(self.upper_slack, other.upper_slack),
                    add(self.lower_slack, other.lower_slack))
        return self._derived(build, other)

    def self_compose(self, count: int) -> "AllocationPLD":
        """``count`` repetitions, certificates times ``count``."""
        count = check_count("count", count, minimum=1)

        def build():
            scale = lambda sl: {d: c.times(count) for d, c in sl.items()}  # noqa: E731
            plds = None if self.plds is None else _shared_map(
                {d: (p,) for d, p in self.plds.items()}, lambda p: p.self_compose(count))
            return plds, scale(self.upper_slack), scale(self.lower_slack)
        return self._derived(build, count=count)

    def composed_window_bins(self) -> int:
        """The largest FFT window a query composes over the directions
        (:meth:`~dpplugins.pld.PrivacyLossDistribution.composed_window_bins`; 0 where the
        closed-form Gaussian bounds answer)."""
        if self._closed_form() or self.plds is None:
            return 0
        return max(pld.composed_window_bins() for pld in self.plds.values())

    def _mu(self) -> float:
        """The Gaussian bound's ``mu``; at least 1e-150 (a larger ``mu`` is still a valid upper
        bound, and ``mu^2`` must not underflow)."""
        return math.sqrt(max(self.gaussian_mu2, 1e-300))

    def _closed_form(self) -> bool:
        mu2 = self.gaussian_mu2
        if mu2 is None:  # no closed form: the engine answers
            return False
        return not self.engine or mu2 / 2 + 20 * math.sqrt(mu2) > _CLOSED_FORM_LOSS

    def slack_at(self, epsilon: float) -> float:
        """The largest additive numerical term (upper plus lower, over both directions); the
        relative factors and shifts are not included (they scale with delta).  0 where the
        closed-form Gaussian bounds answer."""
        if self._closed_form():
            return 0.0
        return max(self.upper_slack[d].extra() + (self.lower_slack[d].extra()
                                                  if self.lower_slack[d].log_factor > -math.inf
                                                  else 0.0)
                   for d in self.upper_slack)

    def upper_floor(self) -> float:
        """The largest additive term of the upper certificates (``A_up`` of
        :meth:`_engine_cannot_improve`) plus the composed PLD's own floor (its construction
        error, :meth:`~dpplugins.pld.PrivacyLossDistribution.delta_upper_floor`, scaled by the
        certificate's factor): every upper bound on delta that the engine returns on this grid
        is at least this; 0 where the closed-form Gaussian bounds answer."""
        if self._closed_form():
            return 0.0
        return max((_exp(self.upper_slack[d].log_factor) * self.plds[d].delta_upper_floor()
                    if self.plds is not None else 0.0)
                   + self.upper_slack[d].extra() for d in self.upper_slack)

    def _delta(self, direction: str, epsilon: float) -> Bounds:
        pld = self.plds[direction]
        up, lo = self.upper_slack[direction], self.lower_slack[direction]
        upper = pld.delta_for_epsilon(epsilon + up.shift, lower=False).upper
        upper = min(1.0, (_exp(up.log_factor) * upper + up.extra()) * (1 + 8 * _U))
        lower = 0.0
        if self.has_lower and pld.has_lower_bound and lo.log_factor > -math.inf:
            # (the engine's raw values are not checked against each other: the two pairs
            # bracket the epoch only up to their certificates' additive terms, so below those
            # they may cross -- Laplace scale 0.05, t = 3, epsilon 19: 1.12e-8 above 8.99e-9,
            # next to terms of 4e-5, refused as "a defect"; the certified bounds are checked
            # below)
            raw = pld.delta_for_epsilon(max(0.0, epsilon + lo.shift), check=False).lower
            lower = max(0.0, (_exp(lo.log_factor) * raw) * (1 - 8 * _U) - lo.extra())
        if not self.has_upper:
            # a dominated construction: its upper slot is a placeholder (the dominated pair's own
            # value, no bound), so a lower bound above it is no crossing (as in _consistent)
            return Bounds(lower, max(lower, upper))
        return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")

    def _gaussian_delta(self, epsilon: float) -> Bounds:
        if self.gaussian_mu2 is None:
            return Bounds(0.0, 1.0)
        mu = self._mu()
        upper = _gaussian_delta_upper(mu, epsilon)
        lower = (_exp(self.log_weight) * _gaussian_delta_lower(mu, epsilon + self.log_t)
                 * (1 - 8 * _U) if self.has_lower else 0.0)
        return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")

    def _chernoff_upper(self, epsilon: float) -> float:
        """Certified upper bound on ``delta(epsilon)`` without any FFT composition: per
        direction ``(e^L C + A) (1 + 8u)`` with ``C`` the Chernoff bound of the composed PLD
        (:meth:`~dpplugins.pld.PrivacyLossDistribution.delta_upper_chernoff`, from the
        components' cumulants), ``L``, ``A`` the direction's certificate (:class:`_Cert`:
        ``H_true(eps) <= e^L H_engine(eps + shift) + A``), maximised over the directions."""
        worst = 0.0
        for d, pld in self.plds.items():
            cert = self.upper_slack[d]
            chernoff = pld.delta_upper_chernoff(epsilon + cert.shift)
            worst = max(worst, min(1.0, (_exp(cert.log_factor) * chernoff + cert.extra())
                                   * (1 + 8 * _U)))
        return worst

    def _engine_cannot_improve(self, cheap_upper: float) -> bool:
        """Whether the PLD engine's FFT compositions (the expensive part of a delta query;
        reliability issue 21) cannot improve on a certified upper bound ``cheap_upper`` and a
        lower bound of 0 (our derivation, from the certificates alone):

        * upper: a direction's engine bound is ``(e^L H + A_up) (1 + 8u) >= A_up``, so if
          ``cheap_upper <= A_up`` for one direction, the maximum over the directions intersected
          with ``cheap_upper`` is ``cheap_upper``;
        * lower: a direction's engine lower bound is ``e^L' H' - A_lo`` and at most the true
          delta, so at most ``cheap_upper``; if ``cheap_upper <= A_lo`` in every direction
          that has one, the engine could only return a lower bound below its own additive error
          term, a difference of two numbers agreeing to within the true delta.  We do not
          compute it (0 is a certified lower bound; the accountant reports the gap).

        ``A_up``, ``A_lo`` grow with the number of epochs (about ``1e-14`` per epoch), so this
        decides the tiny deltas of large epsilon and long runs."""
        up, lo = self.upper_slack, self.lower_slack
        if not any(cheap_upper <= up[d].extra() for d in up):
            return False
        return not self.has_lower or all(
            lo[d].log_factor == -math.inf or cheap_upper <= lo[d].extra() for d in lo)

    def delta_for_epsilon(self, epsilon: float) -> Bounds:
        """Certified bounds on ``delta(epsilon)`` (the maximum over both directions),
        intersected with the Gaussian bounds of the module docstring and with the Chernoff bound
        of the composed PLD (:meth:`_chernoff_upper`); the FFT compositions are skipped where
        they cannot improve these (:meth:`_engine_cannot_improve`)."""
        epsilon = check_nonnegative("epsilon", epsilon)
        gauss = self._gaussian_delta(epsilon)
        if self._closed_form():
            return gauss
        cheap = min(gauss.upper, self._chernoff_upper(epsilon))
        if self._engine_cannot_improve(cheap):
            # (cheap is a placeholder in a dominated construction: _consistent)
            return _consistent(gauss.lower, cheap, "delta", epsilon, self.has_upper)
        per = [self._delta(d, epsilon) for d in self.plds]
        upper = min(max(b.upper for b in per), cheap)
        lower = max(max(b.lower for b in per), gauss.lower)
        return _consistent(lower, upper, "delta", epsilon, self.has_upper)

    def _epsilon_upper(self, direction: str, delta: float) -> float:
        cert = self.upper_slack[direction]
        extra = cert.extra()
        if extra > delta / 2:
            raise NumericalError(
                f"the certified numerical slack ({extra:.3g}) is not small next to "
                f"delta={delta:g}", "ask for a larger delta, or refine the grids")
        target = (delta - extra) / _exp(cert.log_factor) * (1 - 8 * _U)
        if target >= 1.0:
            # exp(L) H + A <= exp(L) + A <= delta for every epsilon (H <= 1): 0 is certified
            # (the engine refused the rescaled target, named "delta", as above 1: delta =
            # 0.9999 on 3-out-of-10 at sigma = 0.05 answered "delta=1.0000948 is invalid")
            return 0.0
        found = self.plds[direction].epsilon_for_delta(target, lower=False).upper
        return max(0.0, found - cert.shift)

    def _epsilon_lower(self, direction: str, delta: float) -> float:
        pld = self.plds[direction]
        cert = self.lower_slack[direction]
        if not (self.has_lower and pld.has_lower_bound) or cert.log_factor == -math.inf:
            return 0.0
        # in logarithms: the factor (p^n for n epochs at check-in probability p) can underflow
        log_target = math.log(delta + cert.extra()) - cert.log_factor + 8 * _U
        if log_target >= 0.0:
            return 0.0
        target = math.exp(log_target)
        try:
            found = pld.epsilon_for_delta(target).lower
        except NumericalError:
            return 0.0  # the engine cannot certify this delta: no lower bound (0 is one)
        if found <= 0.0 and cert.shift < 0.0:
            # a negative shift (a dominated pair that dropped outcomes with more Q- than
            # P-mass: 2-out-of-4 at sigma = 0.7 drops R = 0, 16 % of Q, shift -0.1698) needs
            # H_engine on [shift, 0) for eps < -shift; the engine answers eps >= 0 only, and its
            # lower end 0 is where its search starts, not H_engine(0) > target.  -shift was
            # returned as a constant lower bound above the truth (3-out-of-5 at sigma = 0.7,
            # delta = 0.7: 0.108 where epsilon is 0).  Only found > 0 certifies H_engine >
            # target on [shift, found) (H decreases); as in _delta, max(0, eps + shift)
            return 0.0
        return max(0.0, found - cert.shift)

    def epsilon_for_delta(self, delta: float) -> Bounds:
        """Certified bounds on the smallest epsilon with ``delta(epsilon) <= delta``: the
        maximum over directions of each direction's bounds, intersected with the Gaussian
        bounds of the module docstring."""
        delta = check_open_unit("delta", delta)
        gauss = (Bounds(0.0, math.inf) if self.gaussian_mu2 is None
                 else _gaussian_epsilon_bounds(self._mu(), delta, self.log_t, self.log_weight))
        if not self.has_lower:
            gauss = Bounds(0.0, gauss.upper)
        if self._closed_form():
            return gauss
        try:
            for d in self.plds:  # refuse before composing anything (a cheap check)
                if self.upper_slack[d].extra() > delta / 2:
                    self._epsilon_upper(d, delta)
            upper = max(self._epsilon_upper(d, delta) for d in self.plds)
        except NumericalError:
            # the grids cannot certify this delta (their error terms are not small next to it);
            # the Gaussian bounds still hold -- a wide gap says how much is lost
            if not math.isfinite(gauss.upper):
                raise
            return gauss
        upper = min(upper, gauss.upper)
        lower = max(max(self._epsilon_lower(d, delta) for d in self.plds), gauss.lower)
        return _consistent(lower, upper, "epsilon", delta, self.has_upper)


def _consistent(lower: float, upper: float, what: str, at: float,
                has_upper: bool = True) -> Bounds:
    """``Bounds(lower, upper)`` of two certified bounds, ``lower`` capped at ``upper`` where they
    cross by rounding; a crossing beyond rounding (relative 1e-6) means one of them is not
    certified, and raises :class:`~dpplugins.errors.NumericalError` instead of hiding it
    (:func:`~dpplugins.pld.certified_bounds`).  Without a meaningful upper bound (``has_upper``
    False: a dominated construction) the lower bound is returned whole (it was capped by the
    dominated pair's own value: 1.0e-5 where 7.9e-3 is certified)."""
    if not has_upper:
        return Bounds(lower, max(lower, upper))
    where = "delta at epsilon" if what == "delta" else "epsilon at delta"
    return certified_bounds(lower, upper, f"{where}={at!r}")


def _gaussian_epoch(sigma: float, t: int, h_loss: float, *, tail_mass: float, memory_limit: int,
                    lower: bool, checkin: float = 1.0) -> AllocationPLD:
    """An epoch accounted by the Gaussian mechanism (module docstring, "Small and large noise"):
    exact for ``t = 1`` and ``p = 1``; otherwise the upper bound is the Gaussian's and the remove
    direction's lower bound ``p`` times the Gaussian's shifted by ``log(t / p)``.  Where the
    Gaussian loss exceeds the PLD grid no PLD is built (closed form only)."""
    mu2 = _inv_sq(sigma)
    engine = (mu2 / 2 + 10 * math.sqrt(mu2) <= _ENGINE_LOSS
              and _gaussian_grid_fits(sigma, h_loss, memory_limit))

    def build():
        one = PrivacyLossDistribution.from_gaussian(
            sigma, value_discretization_interval=h_loss, tail_mass=tail_mass,
            memory_limit=memory_limit)
        return {"remove": one, "add": one}
    return base_mechanism_epoch(build, t, lower=lower, checkin=checkin, engine=engine,
                                gaussian_mu2=mu2)


def base_mechanism_parts(plds: dict | None, t: int, checkin: float = 1.0) -> tuple:
    """The parts ``(plds, upper certificates, lower certificates)`` of an epoch accounted by one
    step of its base mechanism, whose PLDs per direction are ``plds`` (module docstring, "Small
    and large noise"; the argument holds for any base pair, our derivation): one epoch is a
    post-processing of one step (reveal the step that holds the example; with ``p < 1`` the
    epoch is dominated by the ``p = 1`` one), so the upper certificate is exact; under P the
    example is present with probability ``p`` and then the epoch's loss is at least ``log(p /
    t)`` plus the loss of the step holding it, so the remove direction's lower bound is ``p``
    times the step's delta at ``epsilon + log(t / p)`` (exact for ``t = 1``, ``p = 1``); no
    lower bound for the add direction."""
    exact = {d: _EXACT for d in ("remove", "add")}
    log_p = math.log(checkin)
    lower_cert = (dict(exact) if t == 1 and checkin == 1.0
                  else {"remove": _Cert(log_p, math.log(t) - log_p, 0.0, 0.0), "add": _NONE})
    return plds, exact, lower_cert


def base_mechanism_epoch(build, t: int, *, lower: bool, checkin: float = 1.0,
                         engine: bool = True, gaussian_mu2: float | None = None
                         ) -> AllocationPLD:
    """An epoch accounted by one step of its base mechanism (:func:`base_mechanism_parts`);
    ``build()`` returns the step's PLDs ``{"remove": ..., "add": ...}`` on first use (not
    called when ``engine`` is False: closed-form Gaussian bounds only)."""
    log_p = math.log(checkin)
    lazy = _Lazy(lambda: base_mechanism_parts(build() if engine else None, t, checkin))
    return AllocationPLD(None, None, None, lazy=lazy, engine=engine, has_lower=lower,
                         gaussian_mu2=gaussian_mu2, log_t=math.log(t) - log_p,
                         log_weight=log_p)


def parts_of_pairs(upper: AllocationPair, dominated: AllocationPair | None, description: str,
                   h_loss: float, *, tail_mass: float, memory_limit: int) -> tuple:
    """The parts ``(plds, upper certificates, lower certificates)`` of an epoch given as its
    dominating and dominated pairs: per direction, the PLD engine's bracketing PLD of the two.
    Without the dominated pair the upper one stands in for it (its "lower" bounds are unused:
    the lower certificates say there is none)."""
    stand_in = dominated if dominated is not None else upper
    plds = {d: PrivacyLossDistribution.from_bracketing_pairs(
        upper.direction_pair(d, f"{description} ({d})"),
        stand_in.direction_pair(d, f"{description} ({d})"),
        value_discretization_interval=h_loss, tail_mass=tail_mass, memory_limit=memory_limit)
        for d in ("remove", "add")}
    lower_slack = (dict(dominated.slack) if dominated is not None
                   else {d: _NONE for d in ("remove", "add")})
    return plds, dict(upper.slack), lower_slack


def _epoch_pld(sigma: float, t: int, h_loss: float, *, method: str, summand_step,
               geometric_cells: int, tail_mass: float, memory_limit: int,
               lower: bool = True, checkin: float = 1.0) -> AllocationPLD:
    description = f"random allocation, sigma={sigma:g}, {t} steps/epoch, p={checkin:g}"
    if _gaussian_accounted(sigma, t, checkin):
        return _gaussian_epoch(sigma, t, h_loss, tail_mass=tail_mass, memory_limit=memory_limit,
                               lower=lower, checkin=checkin)

    def build():
        upper, dominated = allocation_pairs(sigma, t, method=method, summand_step=summand_step,
                                            geometric_cells=geometric_cells,
                                            memory_limit=memory_limit, lower=lower,
                                            checkin_probability=checkin)
        return parts_of_pairs(upper, dominated, description, h_loss, tail_mass=tail_mass,
                              memory_limit=memory_limit)
    # parameters are checked now, not at the first query
    check_positive("value_discretization_interval", h_loss)
    if method not in ("auto", "fft", "geometric"):
        raise ParameterError("method", method, "'auto', 'fft' or 'geometric'")
    check_count("geometric_cells", geometric_cells, minimum=16)
    if summand_step is not None:
        check_positive("summand_step", summand_step)
    log_p = math.log(checkin)
    return AllocationPLD(None, None, None, lazy=_Lazy(build), engine=True, has_lower=lower,
                         gaussian_mu2=_inv_sq(sigma), log_t=math.log(t) - log_p,
                         log_weight=log_p)


def default_loss_step(noise_multiplier: float, steps_per_epoch: int,
                      checkin_probability: float = 1.0) -> float:
    """Default PLD grid step: a 40th of :func:`epoch_loss_scale`, at most 1e-2 and at least 1e-13
    (below, ``1 - e^-h`` is not representable next to 1 and the PLD grid's tangent construction
    cannot start; such noise, ``sigma`` above about 1e10, has epsilon below 1e-12 anyway).  An
    epoch accounted by the Gaussian mechanism alone (:func:`_gaussian_accounted`, e.g. ``t``
    above ``2**40``) is on the grid of that mechanism, whose loss scale is ``1/sigma``."""
    scale = epoch_loss_scale(noise_multiplier, steps_per_epoch, checkin_probability)
    if _gaussian_accounted(float(noise_multiplier), int(steps_per_epoch),
                           float(checkin_probability)):
        scale = 1.0 / float(noise_multiplier)
    return max(min(scale / 40.0, 1e-2), 1e-13)


def random_allocation_pld(noise_multiplier: float, steps_per_epoch: int, epochs: int = 1, *,
                          value_discretization_interval: float | None = None,
                          method: str = "auto", summand_step: float | None = None,
                          geometric_cells: int = 2000, tail_mass: float = 1e-15,
                          memory_limit: int = 1 << 30, lower: bool = True,
                          checkin_probability: float = 1.0) -> AllocationPLD:
    """Certified PLD of ``epochs`` epochs of random-allocation DP-SGD (add/remove neighbours),
    each example taking part in an epoch with probability ``checkin_probability`` (module
    docstring, "Check-in probability"; ``1`` is random allocation).

    One epoch with one step (``t = 1``) is exactly the Gaussian mechanism with sensitivity 1 and
    is built as such; so is an epoch whose noise is too small for the summands' range or above
    1e12 (with the lower bound shifted by ``log t``; module docstring).  ``value_discretization_interval`` is the
    loss grid step of the PLD (default :func:`default_loss_step`); the other options go to
    :func:`allocation_pairs`.  ``lower=False`` builds only what the upper bound needs (lower
    bounds are then reported as 0).
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    checkin = check_probability("checkin_probability", checkin_probability)
    epochs = check_count("epochs", epochs, minimum=1)
    h_loss = (default_loss_step(sigma, t, checkin) if value_discretization_interval is None
              else check_positive("value_discretization_interval", value_discretization_interval))
    one = _epoch_pld(sigma, t, h_loss, method=method, summand_step=summand_step,
                     geometric_cells=geometric_cells, tail_mass=tail_mass,
                     memory_limit=memory_limit, lower=lower, checkin=checkin)
    return one.self_compose(epochs)


class MonteCarloEstimate(NamedTuple):
    """A Monte Carlo *estimate* of delta(epsilon) -- not a certified bound.

    ``upper_confidence`` is the estimate plus ``z`` standard errors (normal approximation), which
    is what a 99.9 % one-sided confidence statement would use; it is still an estimate.
    """

    estimate: float
    standard_error: float
    upper_confidence: float
    samples: int
    direction: str


def _log_sum_exp_rows(g: np.ndarray) -> np.ndarray:
    return special.logsumexp(g, axis=-1)


def monte_carlo_delta(noise_multiplier: float, steps_per_epoch: int, epsilon: float, *,
                      epochs: int = 1, direction: str = "remove", samples: int = 100_000,
                      tilt: float = 0.0, seed: int | None = None, z: float = 3.09,
                      chunk: int = 4096, checkin_probability: float = 1.0
                      ) -> MonteCarloEstimate:
    """Importance-sampling estimate of one direction's ``delta(epsilon)`` (an *estimate*).

    Draws the Gaussian outputs of the dominating pair directly (independent of the FFT code):
    ``remove`` estimates ``E_P[(1 - e^(eps - L))_+]``, ``add`` estimates
    ``E_Q[(1 - e^(eps + L))_+]`` with ``L = log(a S)``, in the scaled coordinates
    ``g_j = x_j / sigma^2`` (``N(0, s^2)`` under Q, ``s = 1/sigma``; under ``P_j`` coordinate j has
    mean ``s^2``).  For ``remove`` with ``tilt > 0`` the proposal is the mixture
    ``R = (1/t) sum_j R_j`` in which coordinate j has mean ``s^2 + tilt * s`` (a mixture of mean
    shifts, in the spirit of the importance sampling of Chua et al. 2025, Sec. 5); by symmetry we
    shift coordinate 0 and weight by ``dP/dR = sum_j e^(g_j - s^2/2) / sum_j
    e^((m g_j - m^2/2) / s^2)``, which stays bounded where the loss is large.  ``tilt = 0`` is
    plain Monte Carlo.  ``upper_confidence`` adds ``z`` standard errors.

    ``checkin_probability`` ``p < 1``: the loss of an epoch is ``log((1 - p) + p a S)`` and under
    P the example is present in an epoch with probability ``p`` (plain Monte Carlo only: ``tilt``
    must be 0).
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    epsilon = check_nonnegative("epsilon", epsilon)
    epochs = check_count("epochs", epochs, minimum=1)
    samples = check_count("samples", samples, minimum=2)
    tilt = check_nonnegative("tilt", tilt)
    if direction not in ("remove", "add"):
        raise ParameterError("direction", direction, "'remove' or 'add'")
    checkin = check_probability("checkin_probability", checkin_probability)
    if checkin < 1.0 and tilt > 0:
        raise ParameterError("tilt", tilt, "0 when checkin_probability < 1 (plain Monte Carlo)")
    rng = np.random.default_rng(seed)
    s = 1.0 / sigma
    log_a = -s * s / 2 - math.log(t)
    m = s * s + tilt * s  # proposal mean of the shifted coordinate
    total, total_sq, done = 0.0, 0.0, 0
    while done < samples:
        n = min(chunk, samples - done)
        loss = np.zeros(n)
        log_weight = np.zeros(n)
        for _ in range(epochs):
            g = rng.normal(0.0, s, size=(n, t))
            if direction == "remove":
                present = 1.0 if checkin >= 1.0 else (rng.random(n) < checkin)
                # the coordinate that carries the example
                g[:, 0] += (m if tilt > 0 else s * s) * present
                if tilt > 0:
                    log_weight += (_log_sum_exp_rows(g - s * s / 2)
                                   - _log_sum_exp_rows((m * g - m * m / 2) / (s * s)))
            epoch_loss = _log_sum_exp_rows(g) + log_a
            if checkin < 1.0:  # log((1 - p) + p a S)
                epoch_loss = np.logaddexp(math.log1p(-checkin), math.log(checkin) + epoch_loss)
            loss += epoch_loss
        signed = loss if direction == "remove" else -loss
        value = -np.expm1(np.minimum(epsilon - signed, 0.0)) * np.exp(log_weight)
        total += float(np.sum(value))
        total_sq += float(np.sum(value * value))
        done += n
    mean = total / done
    var = max(total_sq / done - mean * mean, 0.0)
    se = math.sqrt(var / done)
    return MonteCarloEstimate(mean, se, mean + z * se, done, direction)
