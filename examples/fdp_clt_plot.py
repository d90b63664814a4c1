"""When is the Gaussian-DP CLT safe?  Certified (exact composition) vs CLT, in numbers and a plot.

The CLT of Bu, Dong, Long, Su (2020) describes DP-SGD in the limit T -> inf with q sqrt(T) fixed.
This script keeps q sqrt(T) = 0.5 and sigma = 1 (Poisson sampling, add/remove neighbours) and
prints, for growing T, the certified epsilon of the "fdp" accountant beside the CLT's estimate:
the CLT under-reports epsilon for small T and approaches the certified value as T grows.  It
then draws both trade-off curves for the smallest T into a PNG (needs matplotlib; without it the
numbers are still printed).

    python examples/fdp_clt_plot.py --out fdp_clt.png
"""

from __future__ import annotations

import argparse
import math
import warnings

from dpplugins.accountants import create
from dpplugins.fdp import CLTEstimateWarning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="fdp_clt.png", help="PNG file to write")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--sigma", type=float, default=1.0)
    args = parser.parse_args()

    print(f"sigma={args.sigma}, q sqrt(T) = 0.5, delta={args.delta:g}, Poisson, add/remove")
    print(f"{'T':>6} {'q':>9} {'certified eps':>14} {'CLT eps':>9} {'CLT low by':>11}")
    smallest = None
    for steps in (10, 100, 1000, 10_000):
        acc = create("fdp")
        acc.step(noise_multiplier=args.sigma, sample_rate=0.5 / math.sqrt(steps), count=steps)
        certified = acc.get_epsilon(args.delta)
        with warnings.catch_warnings():  # the estimate is labelled in the table instead
            warnings.simplefilter("ignore", CLTEstimateWarning)
            estimate = acc.get_epsilon(args.delta, method="clt")
        print(f"{steps:>6} {0.5 / math.sqrt(steps):>9.4f} {certified:>14.4f} {estimate:>9.4f} "
              f"{(certified - estimate) / certified:>10.1%}")
        smallest = smallest or acc

    try:
        path = smallest.plot_tradeoff(args.out, title="certified vs CLT trade-off, T = 10")
    except ImportError as error:
        print(f"no plot: {error}")
        return
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
