"""k-out-of-t random allocation (check-in probability p): our certified bracket against the
public pld-accounting package (Feldman & Shenfeld, arXiv:2602.17284), timed side by side with
alternating A/B rounds (benchmarks/_ab.py).

Point: sigma = 1, t = 1000 steps per epoch, k in {1, 4}, p in {0.5, 1}, 10 epochs, delta = 1e-5.
pld-accounting's Gaussian API has no check-in probability, so p = 0.5 times ours alone.  Their
bracket is two calls (dominating and dominated PLD, geometric convolution, loss discretization
``--their-discretization``); ours is one call giving both bounds.  Run it in the venv of
``.ci/pld_accounting_leg.sh`` (``.venv-pldacc/bin/python benchmarks/allocation_vs_pld_accounting.py``);
without pld-accounting it times ours only.  Prints medians, ratios and the certified gaps.
"""

from __future__ import annotations

import argparse
import statistics

from _ab import alternate, report

from dpplugins.amplification.allocation import random_allocation_pld
from dpplugins.amplification.allocation_participations import k_out_of_t_pld

SIGMA, STEPS, EPOCHS, DELTA = 1.0, 1000, 10, 1e-5


def ours(k: int, p: float):
    if k == 1:
        pld = random_allocation_pld(SIGMA, STEPS, EPOCHS, checkin_probability=p)
    else:
        pld = k_out_of_t_pld(SIGMA, STEPS, k, EPOCHS, checkin_probability=p)
    return pld.epsilon_for_delta(DELTA)


def theirs(k: int, discretization: float):
    import PLD_accounting as pa
    params = pa.PrivacyParams(sigma=SIGMA, num_steps=STEPS, num_selected=k, num_epochs=EPOCHS,
                              delta=DELTA)
    config = pa.AllocationSchemeConfig(loss_discretization=discretization,
                                       convolution_method=pa.ConvolutionMethod.GEOM)
    upper = pa.gaussian_allocation_epsilon_configurable(params=params, config=config,
                                                        bound_type=pa.BoundType.DOMINATES)
    lower = pa.gaussian_allocation_epsilon_configurable(params=params, config=config,
                                                        bound_type=pa.BoundType.IS_DOMINATED)
    return lower, upper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--their-discretization", type=float, default=0.05)
    parser.add_argument("--participations", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--checkin", type=float, nargs="*", default=[0.5, 1.0])
    args = parser.parse_args()
    try:
        import PLD_accounting  # noqa: F401
        have_theirs = True
    except ImportError:
        have_theirs = False
        print("pld-accounting not installed: timing ours only")
    results = {}
    for k in args.participations:
        for p in args.checkin:
            candidates = {"ours": lambda k=k, p=p: results.__setitem__(("ours", k, p), ours(k, p))}
            if have_theirs and p == 1.0:
                candidates["pld-accounting"] = lambda k=k: results.__setitem__(
                    ("theirs", k, 1.0), theirs(k, args.their_discretization))
            samples = alternate(candidates, args.rounds)
            baseline = "pld-accounting" if "pld-accounting" in candidates else "ours"
            print(f"\n== sigma={SIGMA:g}, t={STEPS}, k={k}, p={p:g}, {EPOCHS} epochs, "
                  f"delta={DELTA:g}, {args.rounds} rounds ==")
            print(report(samples, baseline))
            b = results[("ours", k, p)]
            print(f"ours:           [{b.lower:.6f}, {b.upper:.6f}]  certified gap "
                  f"{(b.upper - b.lower) / b.upper:.3%}  median {statistics.median(samples['ours']):.3f} s")
            if ("theirs", k, p) in results:
                lo, hi = results[("theirs", k, p)]
                print(f"pld-accounting: [{lo:.6f}, {hi:.6f}]  gap {(hi - lo) / hi:.3%}  "
                      f"(for k > 1 their lower bound is of the reduced pair)")


if __name__ == "__main__":
    main()
