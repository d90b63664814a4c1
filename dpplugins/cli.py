"""The ``dpplugins`` command line: compare, epsilon, noise, plot.

Every subcommand has ``--help`` with an example.  Errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

from dpplugins.errors import NumericalError, ParameterError

EXAMPLES = {
    "compare": "dpplugins compare --dataset-size 60000 --batch-size 256 --epochs 60 "
               "--noise-multiplier 1.1 --delta 1e-5 --sampler poisson",
    "epsilon": "dpplugins epsilon --noise-multiplier 1.1 --sample-rate 0.004 --steps 14000 "
               "--delta 1e-5 --accountant pld",
    "noise": "dpplugins noise --target-epsilon 3 --delta 1e-5 --sample-rate 0.01 --steps 1000",
    "plot": "dpplugins plot --dataset-size 60000 --batch-size 256 --epochs 20 "
            "--noise-multiplier 1.1 --delta 1e-5 --output eps.png",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_training_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset-size", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--epochs", type=float, required=True)
    p.add_argument("--noise-multiplier", type=float, required=True)
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--sampler", choices=("poisson", "shuffle", "checkin"), default="poisson")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dpplugins`` command (subcommands compare, epsilon, noise,
    plot)."""
    parser = _Parser(prog="dpplugins", description="Privacy accountants for DP training.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("compare", help="every accountant side by side",
                       epilog=f"example: {EXAMPLES['compare']}")
    _add_training_options(p)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument("--csv", action="store_true", help="print CSV")
    p.add_argument("--no-references", action="store_true",
                   help="skip dp-accounting / Opacus reference accountants")

    p = sub.add_parser("epsilon", help="certified epsilon bounds for one accountant",
                       epilog=f"example: {EXAMPLES['epsilon']}")
    p.add_argument("--accountant", default="pld")
    p.add_argument("--noise-multiplier", type=float, required=True)
    p.add_argument("--sample-rate", type=float, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--delta", type=float, required=True)

    p = sub.add_parser("noise", help="noise multiplier for a target epsilon",
                       epilog=f"example: {EXAMPLES['noise']}")
    p.add_argument("--accountant", default="pld")
    p.add_argument("--target-epsilon", type=float, required=True)
    p.add_argument("--sample-rate", type=float, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--delta", type=float, required=True)

    p = sub.add_parser("plot", help="epsilon against epochs (PNG, needs matplotlib)",
                       epilog=f"example: {EXAMPLES['plot']}")
    _add_training_options(p)
    p.add_argument("--accountants", default="pld",
                   help="comma-separated accountants (references: dp_accounting.rdp, ...)")
    p.add_argument("--points", type=int, default=10, help="number of epochs to evaluate")
    p.add_argument("--tradeoff", action="store_true",
                   help="draw certified and CLT trade-off curves (fdp accountant) instead")
    p.add_argument("--output", required=True, help="PNG path")
    p.add_argument("--width", type=float, default=6.4, help="inches")
    p.add_argument("--height", type=float, default=4.0, help="inches")
    p.add_argument("--dpi", type=int, default=100)
    return parser


def _run(args: argparse.Namespace) -> int:
    from dpplugins import report

    if args.command == "compare":
        config = report.TrainingConfig(args.dataset_size, args.batch_size, args.epochs,
                                       args.noise_multiplier, args.delta, args.sampler)
        rows = report.compare(config, references=not args.no_references, progress=True)
        if args.json:
            print(report.to_json(rows))
        elif args.csv:
            print(report.to_csv(rows), end="")
        else:
            print(f"{config.steps} steps, sample rate {config.sample_rate:.6g}, "
                  f"sampler {config.sampler}, delta {config.delta:g}")
            print(report.format_table(rows))
        return 0
    if args.command == "epsilon":
        from dpplugins.accountants import create
        acc = create(args.accountant)
        acc.step(noise_multiplier=args.noise_multiplier, sample_rate=args.sample_rate,
                 count=args.steps)
        lower, upper = acc.get_epsilon_bounds(args.delta)
        print(f"accountant {args.accountant} ({acc.bound_type}, {acc.neighbouring})")
        print(f"epsilon in [{lower:.6g}, {upper:.6g}] at delta={args.delta:g}")
        return 0
    if args.command == "noise":
        from dpplugins.calibration import find_noise_multiplier
        sigma = find_noise_multiplier(target_epsilon=args.target_epsilon, delta=args.delta,
                                      sample_rate=args.sample_rate, steps=args.steps,
                                      accountant=args.accountant)
        print(f"noise multiplier {sigma:.6g} (epsilon <= {args.target_epsilon:g} at "
              f"delta={args.delta:g}, accountant {args.accountant})")
        return 0
    if args.command == "plot":
        from dpplugins.plots import plot_epsilon_against_epochs
        config = report.TrainingConfig(args.dataset_size, args.batch_size, args.epochs,
                                       args.noise_multiplier, args.delta, args.sampler)
        if args.tradeoff:
            from dpplugins.accountants import create
            acc = create("fdp")
            acc.step(noise_multiplier=config.noise_multiplier, sample_rate=config.sample_rate,
                     count=config.steps)
            acc.plot_tradeoff(args.output)
            print(f"wrote {args.output}")
            return 0
        names = [n.strip() for n in args.accountants.split(",") if n.strip()]
        plot_epsilon_against_epochs(config, names, args.output, points=args.points,
                                    size=(args.width, args.height), dpi=args.dpi)
        print(f"wrote {args.output}")
        return 0
    raise AssertionError(args.command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status (2 on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (ParameterError, NumericalError, ImportError) as error:
        print(f"dpplugins {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
