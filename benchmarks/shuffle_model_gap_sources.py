"""Where the certified gap of the shuffle-model families comes from (issue 16): central-limit
*estimates* (not certified) beside our certified upper and lower bounds.

For n users, one differing user with input x0 or x1 and the others' reports drawn from a law Q,
the shuffled output is asymptotically a Gaussian shift of

    mu^2 = chi2_Q / n,   chi2_Q = sum_y (P_x0(y) - P_x1(y))^2 / Q(y)

(the linear term of the likelihood ratio of the multiset: a sum of n i.i.d. scores whose mean
moves by chi2_Q between the two datasets and whose variance is n chi2_Q; classical local
asymptotics, e.g. van der Vaart, Asymptotic Statistics, 1998, Ch. 7; our application).  A
Gaussian shift of mu has ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``
(Dong, Roth, Su, arXiv:1905.02383, Cor. 2.13), inverted here for epsilon.  Columns:

* ``at x0`` / ``at z``: every other user holds x0, or one third value z (Q = P_x0 or P_z).
  ``chi2_Q`` is convex in Q, so among all datasets (Q in the convex hull of the inputs' laws)
  the largest is at a dataset whose other users all hold one value: for the discrete families
  by symmetry ``at z`` or ``at x0`` (``at x1`` is the mirror image), for Laplace the best of 21
  values z in [0, 1];
* ``blanket``: the same limit for the blanket bound (the differing user's report hidden among
  Bin(n-1, gamma) reports of the blanket c / gamma), ``chi2_c = sum_y (P_x0 - P_x1)^2 / c``,
  with c the blanket of :mod:`dpplugins.amplification.shuffle_model_families` (written out
  here again from the randomizers' laws, not imported).

What it shows (n = 10^6, delta = 1e-6): the certified lower bound sits at the estimate of the
worst single-value dataset, and the certified upper bound at the blanket's limit or between the
two; where the upper bound is well above the worst dataset's estimate, no lower bound can close
the gap -- it needs a tighter upper bound than any blanket (decomposition) argument gives.  The
``lower - est`` column checks the estimates: the ``at x0`` pair is one of the certified lower
bound's pairs, and where it is the best one the two agree closely.

Run: ``PYTHONPATH=. python benchmarks/shuffle_model_gap_sources.py [--n N] [--delta D]``
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from math import comb
from pathlib import Path

import numpy as np
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dpplugins.amplification import shuffle_model_families as fam  # noqa: E402

EPS0S = (0.5, 1.0, 2.0, 4.0, 8.0)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Epsilon at delta of a Gaussian shift of ``mu`` (Dong, Roth, Su, Cor. 2.13)."""
    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2
    return brentq(excess, 0.0, hi, xtol=1e-12, rtol=1e-10)


def chi2(p0: dict, p1: dict, q: dict) -> float:
    return sum((p0[y] - p1[y]) ** 2 / q[y] for y in q if q[y] > 0)


# laws of the membership pattern of (x0, x1, z) in a report, for input index 0 (x0), 1 or 2 (z)
def unary_laws(a: float, b: float) -> list[dict]:
    def law(x):
        return {bits: math.prod((a if i == x else b) if bit else 1 - (a if i == x else b)
                                for i, bit in enumerate(bits))
                for bits in itertools.product((0, 1), repeat=3)}
    return [law(x) for x in range(3)]


def subset_laws(d: int, k: int, e: float) -> list[dict]:
    z = e * comb(d - 1, k - 1) + comb(d - 1, k)
    return [{bits: comb(d - 3, k - sum(bits)) * (e if bits[x] else 1.0) / z
             for bits in itertools.product((0, 1), repeat=3) if sum(bits) <= k}
            for x in range(3)]


def hashing_laws(g: int, e: float) -> list[dict]:
    """OLH with a fully random hash into [g] (the pattern of (x0, x1, z) needs three values)."""
    laws = []
    for x in range(3):
        law: dict = {}
        for hashes in itertools.product(range(g), repeat=3):
            for y in range(g):
                p = (e if y == hashes[x] else 1.0) / (e + g - 1) / g ** 3
                key = tuple(int(y == h) for h in hashes)
                law[key] = law.get(key, 0.0) + p
        laws.append(law)
    return laws


def discrete_rows(eps0: float):
    """(family, laws of x0/x1/z, blanket chi2_c) of the discrete families; the blanket's
    likelihood ratios to c are e^eps0 where a report supports the input and 1 elsewhere, so
    chi2_c = 2 w10 (e^eps0 - 1)^2 with w10 the c-mass of the reports supporting x0, not x1."""
    e = math.exp(eps0)
    h = math.exp(eps0 / 2)
    a, b = h / (h + 1), 1 / (h + 1)
    yield fam.unary_encoding(eps0, 64), unary_laws(a, b), 2 * (1 - a) * b * (e - 1) ** 2
    a, b = 0.5, 1 / (e + 1)
    yield (fam.unary_encoding(eps0, 64, optimized=True), unary_laws(a, b),
           2 * (1 - a) * b * (e - 1) ** 2)
    d, k = 64, 4
    z = e * comb(d - 1, k - 1) + comb(d - 1, k)
    yield fam.subset_selection(eps0, d, k), subset_laws(d, k, e), \
        2 * comb(d - 2, k - 1) / z * (e - 1) ** 2
    g = 16
    yield fam.local_hashing(eps0, g), hashing_laws(g, e), \
        2 * (1 - 1 / g) / (e + g - 1) * (e - 1) ** 2


def laplace_chi2(eps0: float) -> tuple[float, float, float, float]:
    """(chi2 at x0 = 0, the largest chi2 over z in a grid of [0, 1], its z, blanket chi2_c) of
    Laplace on [0, 1] with scale 1/eps0, x0 = 0, x1 = 1 (the pair of the blanket bound)."""
    b = 1 / eps0

    def density(y, x):
        return math.exp(-abs(y - x) / b) / (2 * b)

    def value(q):
        def f(y):
            return (density(y, 0) - density(y, 1)) ** 2 / q(y)
        pieces = ((-60 * b, 0.0), (0.0, 0.5), (0.5, 1.0), (1.0, 1 + 60 * b))
        return sum(quad(f, lo, hi, limit=200)[0] for lo, hi in pieces)

    at = {float(z): value(lambda y, z=z: density(y, z)) for z in np.linspace(0, 1, 21)}
    z_best = max(at, key=at.get)
    blanket = value(lambda y: math.exp(-max(abs(y), abs(1 - y)) / b) / (2 * b))
    return at[0.0], at[z_best], z_best, blanket


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--delta", type=float, default=1e-6)
    args = parser.parse_args()
    n, delta = args.n, args.delta
    print(__doc__.split("\n\n")[0])
    print(f"n = {n:g}, delta = {delta:g}; est = central-limit estimates (NOT certified)")
    head = (f"{'family':>18} {'eps0':>4} | {'upper':>9} {'lower':>9} {'gap%':>6} | "
            f"{'est at x0':>9} {'est at z':>9} {'est blanket':>11} | {'upper/worst':>11} "
            f"{'lower/worst':>11}")
    print(head)
    print("-" * len(head))
    for eps0 in EPS0S:
        rows = []
        for family, laws, chi2_c in discrete_rows(eps0):
            p0, p1, pz = laws
            rows.append((family, chi2(p0, p1, p0), chi2(p0, p1, pz), chi2_c, "z"))
        at_x0, best, z_best, chi2_c = laplace_chi2(eps0)
        rows.append((fam.laplace_bounded(eps0), at_x0, best, chi2_c, f"z={z_best:.2f}"))
        for family, c_x0, c_z, c_blanket, where in rows:
            up = fam.epsilon(family, n, delta).epsilon
            low = fam.lower_bound(family, n, delta).epsilon
            est = [gaussian_epsilon(math.sqrt(c / n), delta) for c in (c_x0, c_z, c_blanket)]
            worst = max(est[:2])
            print(f"{family.name:>18} {eps0:>4g} | {up:>9.6f} {low:>9.6f} "
                  f"{(up - low) / up * 100:>6.2f} | {est[0]:>9.6f} {est[1]:>9.6f} "
                  f"{est[2]:>11.6f} | {up / worst:>11.4f} {low / worst:>11.4f}")
    print("upper/worst: the certified upper bound over the estimate of the worst single-value "
          "dataset (what a tighter upper bound could at best reach); lower/worst: the certified "
          "lower bound over it.  Laplace's 'at z' column is the best of 21 values z.")


if __name__ == "__main__":
    main()
