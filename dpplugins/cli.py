"""The ``dpplugins`` command line: compare, epsilon, noise, plot, shuffle (the shuffle model:
:mod:`dpplugins.cli_shuffle`).

Every subcommand has ``--help`` with an example.  Every failure -- a bad number, an accountant
that does not support the sampler, a missing output directory, a closed output pipe, a
computation that fails -- prints one line on stderr and exits with status 2; never a traceback.

The training run is described by the same options in every subcommand (``--sampler``,
``--dataset-size``, ``--batch-size`` or ``--sample-rate``, ``--epochs`` or ``--steps``, and the
sampler's own options) and becomes one event (:meth:`dpplugins.report.TrainingConfig.event`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings

from dpplugins.cli_types import finite_number, integer, named_by_flag
from dpplugins.display import lower_text, upper_text
from dpplugins.errors import NumericalError, ParameterError

EXAMPLES = {
    "compare": "dpplugins compare --dataset-size 60000 --batch-size 256 --epochs 60 "
               "--noise-multiplier 1.1 --delta 1e-5 --sampler shuffled_epochs",
    "epsilon": "dpplugins epsilon --noise-multiplier 1.1 --sample-rate 0.004 --steps 14000 "
               "--delta 1e-5 --accountant pld",
    "noise": "dpplugins noise --target-epsilon 3 --delta 1e-5 --sample-rate 0.01 --steps 1000",
    "plot": "dpplugins plot --dataset-size 60000 --batch-size 256 --epochs 20 "
            "--noise-multiplier 1.1 --delta 1e-5 --output eps.png",
    "shuffle": "dpplugins shuffle --eps0 4 --n 100000 --delta 1e-6 --randomizer oue --d 64",
}

JSON_HELP = ("print strict JSON (never bare Infinity/NaN: an infinite or missing number is "
             "null, with an 'infinite' list naming the infinite fields and a 'reason')")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # a value that starts with "-" and a digit, ".digit", inf or nan is a value (argparse
        # took "--delta -1e-5", "-inf" and "-1e400" for an option: "expected one argument",
        # naming neither the value nor the valid range); no option here looks like that
        self._negative_number_matcher = re.compile(r"^-(\d|\.\d|inf|nan)", re.IGNORECASE)

    def error(self, message: str) -> None:  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


# -- argument types: finite numbers only (1e400 and NaN are refused while parsing) ------------
_finite = finite_number
_integer = integer


def _sampler_help() -> str:
    from dpplugins.report import SAMPLER_ALIASES, SAMPLERS

    aliases = ", ".join(f"'{old}' = {new}" for old, new in SAMPLER_ALIASES.items())
    return ("how batches are drawn: " + ", ".join(SAMPLERS) + " (random_allocation: every "
            "example in one uniformly random step of each epoch, balls-and-bins); default "
            f"poisson. Aliases (old names): {aliases}")


def _add_training_options(p: argparse.ArgumentParser, *, noise: bool = True) -> None:
    from dpplugins.report import CHECKIN_VARIANTS, SAMPLER_ALIASES, SAMPLERS
    from dpplugins.events import PNSGD_VARIANTS

    g = p.add_argument_group("training run (one event)")
    g.add_argument("--sampler", choices=SAMPLERS + tuple(SAMPLER_ALIASES), default="poisson",
                   metavar="SAMPLER", help=_sampler_help())
    g.add_argument("--dataset-size", type=_integer, metavar="N",
                   help="number of examples n (required except for poisson with --sample-rate)")
    g.add_argument("--batch-size", type=_integer, metavar="B",
                   help="batch size b: Poisson rate b/n, shuffled batches of b, ceil(n/b) steps "
                        "per epoch for random_allocation / random_checkin")
    g.add_argument("--sample-rate", type=_finite, metavar="Q",
                   help="poisson only: the sample rate, instead of --dataset-size/--batch-size")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=_finite, metavar="E",
                        help="passes over the data (rounded to a whole number of steps)")
    length.add_argument("--steps", type=_integer, metavar="S",
                        help="noisy steps in total (instead of --epochs)")
    if noise:
        g.add_argument("--noise-multiplier", type=_finite, required=True, metavar="SIGMA",
                       help="noise standard deviation / clipping norm (Opacus' meaning)")
    g.add_argument("--delta", type=_finite, required=True, help="target delta in (0, 1)")
    g.add_argument("--steps-per-epoch", type=_integer, metavar="T",
                   help="random_allocation / random_checkin: steps (slots) per epoch "
                        "(default ceil(n/b))")
    g.add_argument("--checkin-probability", type=_finite, metavar="P0",
                   help="random_allocation / random_checkin: probability that an example "
                        "takes part in an epoch (default 1)")
    g.add_argument("--participations", type=_integer, metavar="K",
                   help="random_allocation: distinct uniformly random steps per epoch of "
                        "every taking-part example (default 1)")
    g.add_argument("--checkin-variant", choices=CHECKIN_VARIANTS,
                   help="random_checkin: fixed (one example per slot, default) or averaged "
                        "(every checked-in example of the slot)")
    g.add_argument("--window", type=_integer, metavar="W",
                   help="sliding_window (required there): each example checks into one of W "
                        "consecutive slots; n - W + 1 steps per pass")
    g.add_argument("--drop-last", action="store_true",
                   help="shuffled_epochs: drop the last, smaller batch of every epoch")
    q = p.add_argument_group("projected noisy SGD (hidden iterates; --sampler shuffled_epochs "
                             "--batch-size 1)")
    q.add_argument("--lipschitz", type=_finite, metavar="L",
                   help="gradient norm bound (clipping norm); with --diameter and "
                        "--learning-rate the run is PNSGD")
    q.add_argument("--diameter", type=_finite, metavar="D",
                   help="diameter of the convex set the iterates are projected onto")
    q.add_argument("--learning-rate", type=_finite, metavar="ETA", help="step size")
    q.add_argument("--pnsgd-variant", choices=PNSGD_VARIANTS,
                   help="which iterate is released (default shuffled: the end of every pass)")
    q.add_argument("--contraction", type=_finite, metavar="M",
                   help="Lipschitz constant of the gradient step (default 1)")
    q.add_argument("--smoothness", type=_finite, metavar="BETA",
                   help="smoothness of the loss (checks learning rate <= 2/beta)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dpplugins`` command (subcommands compare, epsilon, noise,
    plot)."""
    from dpplugins import __version__

    parser = _Parser(prog="dpplugins", description="Privacy accountants for DP training. "
                     "Every failure prints one line on stderr and exits with status 2.")
    parser.add_argument("--version", action="version", version=f"dpplugins {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                metavar="{compare,epsilon,noise,plot,shuffle}")

    p = sub.add_parser("compare", help="every accountant side by side, valid ones marked",
                       description="Epsilon of every registered accountant and the installed "
                       "references for one training run; accountants that do not support the "
                       "sampler's event show their Poisson number marked not valid, or the "
                       "reason.  Exit status 2 when a dpplugins accountant valid for the sampler "
                       "(or a reference named with --accountants) fails; a failing default "
                       "reference, or a number shown only for information, is shown in the "
                       "table and noted on stderr.",
                       epilog=f"example: {EXAMPLES['compare']}")
    _add_training_options(p)
    p.add_argument("--accountants", metavar="NAMES",
                   help="comma-separated accountants and/or references to compare (default: "
                        "every registered accountant and the installed references)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help=JSON_HELP)
    fmt.add_argument("--csv", action="store_true",
                     help="print CSV (inf for an infinite bound, empty when not computed)")
    p.add_argument("--no-references", action="store_true",
                   help="skip the dp-accounting / Opacus reference accountants")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (shown on stderr only if tqdm is installed and stderr "
                        "is a terminal)")

    p = sub.add_parser("epsilon", help="epsilon bounds for one accountant",
                       description="Certified epsilon bounds of one accountant (a registered "
                       "name, or a reference for comparison: dp_accounting.rdp, "
                       "dp_accounting.pld, opacus.rdp, opacus.prv) for a training run it "
                       "supports.", epilog=f"example: {EXAMPLES['epsilon']}")
    p.add_argument("--accountant", default="pld",
                   help="registry name (see 'dpplugins compare') or a reference name; "
                        "default pld")
    _add_training_options(p)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("noise", help="noise multiplier for a target epsilon",
                       description="The smallest noise multiplier whose certified epsilon is at "
                       "most the target, for one registered accountant and training run.",
                       epilog=f"example: {EXAMPLES['noise']}")
    p.add_argument("--accountant", default="pld", help="registry name; default pld")
    p.add_argument("--target-epsilon", type=_finite, required=True, metavar="EPS",
                   help="the epsilon to reach (> 0)")
    _add_training_options(p, noise=False)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("plot", help="epsilon against epochs (PNG, needs matplotlib)",
                       description="Epsilon against epochs, one line per accountant (dashed: "
                       "not valid for the sampler).", epilog=f"example: {EXAMPLES['plot']}")
    _add_training_options(p)
    p.add_argument("--accountants", default="pld", metavar="NAMES",
                   help="comma-separated accountants (references: dp_accounting.rdp, ...); "
                        "default pld")
    p.add_argument("--points", type=_integer, default=10,
                   help="number of epochs to evaluate (default 10)")
    p.add_argument("--tradeoff", action="store_true",
                   help="draw certified and CLT trade-off curves (fdp accountant) instead")
    p.add_argument("--output", required=True, help="PNG path (its directory must exist)")
    p.add_argument("--width", type=_finite, default=None,
                   help="inches (default 6.4; 10 with --tradeoff)")
    p.add_argument("--height", type=_finite, default=None,
                   help="inches (default 4; 4.8 with --tradeoff)")
    p.add_argument("--dpi", type=_integer, default=None,
                   help="dots per inch (default 100; 110 with --tradeoff)")
    from dpplugins import cli_shuffle

    cli_shuffle.add_parser(sub)
    return parser


#: parameter names of TrainingConfig's errors -> the flags that set them
_FLAGS = ("sampler", "dataset_size", "batch_size", "sample_rate", "epochs", "steps",
          "noise_multiplier", "delta", "steps_per_epoch", "checkin_probability", "participations",
          "checkin_variant", "window", "drop_last", "lipschitz", "diameter", "learning_rate",
          "pnsgd_variant", "contraction", "smoothness")


class _Failure(Exception):
    """A failure whose message is already the one line to print."""


def _config(args: argparse.Namespace, noise_multiplier: float | None = None):
    """The TrainingConfig of the options; its parameter errors name the flags."""
    try:
        return _make_config(args, noise_multiplier)
    except ParameterError as error:
        raise _Failure(str(_flag_error(error, _FLAGS))) from None


def _make_config(args: argparse.Namespace, noise_multiplier: float | None):
    from dpplugins.report import TrainingConfig

    sigma = getattr(args, "noise_multiplier", None)
    return TrainingConfig(
        args.dataset_size, args.batch_size, args.epochs,
        noise_multiplier if sigma is None else sigma, args.delta, args.sampler,
        num_steps=args.steps, poisson_sample_rate=args.sample_rate,
        num_slots=args.steps_per_epoch, checkin_probability=args.checkin_probability,
        checkin_variant=args.checkin_variant, window=args.window, drop_last=args.drop_last,
        participations=args.participations,
        lipschitz=args.lipschitz, diameter=args.diameter, learning_rate=args.learning_rate,
        pnsgd_variant=args.pnsgd_variant, contraction=args.contraction,
        smoothness=args.smoothness)


def _names(text: str) -> list[str]:
    # each name once, in the order given ('pld,pld' printed the same row twice)
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:   # (',' gave an empty table and status 0)
        raise ParameterError("--accountants", text, "a comma-separated list of accountant names")
    return names


def _refuse_pair(name: str, config, reason: str) -> ParameterError:
    from dpplugins.accountants import supporting

    names = ", ".join(supporting(config.event())) or "none"
    what = "projected noisy SGD" if config.is_pnsgd else f"sampler {config.sampler!r}"
    return ParameterError("accountant", name, f"an accountant that supports {what}; {name} "
                          f"needs {reason}", f"accountants that support it: {names}")


def _out(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(text + end)


def _run_compare(args) -> int:
    from dpplugins import report

    config = _config(args)
    names = _names(args.accountants) if args.accountants else None
    rows = report.compare(config, accountants=names,
                          references=not (args.no_references or args.accountants),
                          progress=not args.no_progress)
    if args.json:
        _out(report.to_json(rows))
    elif args.csv:
        _out(report.to_csv(rows), end="")
    else:
        _out(config.describe())
        _out(report.format_table(rows))
    # a failing dpplugins accountant valid for the sampler, or a valid reference the user
    # named, fails the command; a default reference (another library) that fails is only
    # reported: its error is not ours and the table is complete without it; so is a number
    # shown for information only (not valid for the sampler: random allocation over 1e15
    # epochs exited 2 because pld's Poisson number beside the valid rows could not be computed)
    failed = [r for r in rows
              if r.error and r.valid and (r.kind != "reference" or args.accountants)]
    if failed:
        raise _RowErrors(failed)
    others = [r for r in rows if r.error and r.kind == "reference" and r.valid]
    if others:
        print(f"dpplugins compare: note: {len(others)} reference accountant(s) of other "
              f"libraries failed ({', '.join(r.accountant for r in others)}); see the table",
              file=sys.stderr)
    shown_only = [r for r in rows if r.error and not r.valid]
    if shown_only:
        print(f"dpplugins compare: note: {len(shown_only)} number(s) shown for information "
              f"only (not valid for this sampler) could not be computed "
              f"({', '.join(r.accountant for r in shown_only)}); see the table", file=sys.stderr)
    return 0


class _RowErrors(_Failure):
    def __init__(self, rows) -> None:
        first = rows[0]
        more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
        super().__init__(f"{len(rows)} accountant(s) failed -- {first.accountant}: "
                         f"{first.error}{more}; see the table")


def _check_pair(name: str, config, *, references: bool) -> None:
    """Refuse (ParameterError / ImportError) an unknown accountant or one that does not support
    the configuration's event, before anything is computed."""
    from dpplugins import report
    from dpplugins.accountants import UnsupportedEventError, available, create

    known = list(available()) + (list(report.REFERENCES) if references else [])
    if name not in known:
        raise ParameterError("accountant", name, "one of " + ", ".join(known))
    event = config.event()
    if name in report.REFERENCES:
        ref = report.REFERENCES[name]
        if not report._installed(ref.module):
            raise ImportError(f"the reference {name} needs {ref.module} ({ref.install})")
        if report.poisson_runs(event) is None:
            raise _refuse_pair(name, config, "Poisson sampling (Chua et al. 2024)")
        return
    try:
        create(name).check(event)
    except UnsupportedEventError as error:
        raise _refuse_pair(name, config, error.reason or "it refuses the event") from None


def _run_epsilon(args) -> int:
    import json

    from dpplugins import report

    config = _config(args)
    _check_pair(args.accountant, config, references=True)
    row = report.evaluate(config, args.accountant, catch=False)
    if args.json:
        out = report.row_to_dict(row)
        out.update(delta=config.delta, sampler=config.sampler, steps=config.steps,
                   event=config.event().to_dict())
        _out(json.dumps(out, indent=2, allow_nan=False))
        return 0
    neighbouring = f", {row.neighbouring}" if row.neighbouring else ""
    _out(f"accountant {args.accountant} ({row.bound_type}{neighbouring})")
    # rounded outward: the printed interval holds the certified one
    lower = "-" if row.lower is None else lower_text(row.lower)
    _out(f"epsilon in [{lower}, {upper_text(row.epsilon)}] at delta={config.delta!r}")
    _out(config.describe())
    return 0


def _run_noise(args) -> int:
    import json

    from dpplugins import report
    from dpplugins.accountants import available
    from dpplugins.calibration import find_noise_multiplier

    name = args.accountant
    if name in report.REFERENCES:
        raise ParameterError("accountant", name, "a registered accountant (" + ", ".join(
            available()) + ")", "references are for 'dpplugins epsilon' and 'compare'")
    config = _config(args, noise_multiplier=1.0)
    _check_pair(name, config, references=False)
    sigma = find_noise_multiplier(target_epsilon=args.target_epsilon, delta=config.delta,
                                  accountant=name, event_for_noise=config.event)
    if args.json:
        _out(json.dumps({"noise_multiplier": sigma, "target_epsilon": args.target_epsilon,
                         "delta": config.delta, "accountant": name, "sampler": config.sampler,
                         "steps": config.steps}, indent=2, allow_nan=False))
        return 0
    # rounded up: a noise multiplier printed below the one found may miss the target
    _out(f"noise multiplier {upper_text(sigma)} (epsilon <= {args.target_epsilon!r} at "
         f"delta={config.delta!r}, accountant {name}, sampler {config.sampler}, "
         f"{config.steps} steps)")
    return 0


def _flag_error(error: ParameterError, names) -> _Failure | ParameterError:
    """``error`` with its parameter named as the flag (``points`` -> ``--points``) when it is
    one of ``names`` (:func:`~dpplugins.cli_types.named_by_flag`)."""
    renamed = named_by_flag(error, names)
    return error if renamed is error else _Failure(str(renamed))


#: (width, height, dpi) a plot has when the flags do not set them: one panel against epochs,
#: two side by side for --tradeoff
_EPOCHS_FIGURE, _TRADEOFF_FIGURE = (6.4, 4.0, 100), (10.0, 4.8, 110)


def _run_plot(args) -> int:
    from dpplugins.plots import (check_figure_size, check_output_path, check_points,
                                 plot_epsilon_against_epochs)

    default = _TRADEOFF_FIGURE if args.tradeoff else _EPOCHS_FIGURE
    width, height, dpi = (default[i] if value is None else value
                          for i, value in enumerate((args.width, args.height, args.dpi)))
    try:  # every option checked before anything is computed
        output = check_output_path(args.output)
        size, dpi = check_figure_size((width, height), dpi)
        check_points(args.points)
    except ParameterError as error:
        raise _flag_error(error, ("output", "width", "height", "dpi", "points")) from None
    config = _config(args)
    if args.tradeoff:
        from dpplugins.accountants import UnsupportedEventError, create
        acc = create("fdp")
        try:
            acc.compose(config.event())
        except UnsupportedEventError as error:
            raise _refuse_pair("fdp", config, error.reason) from None
        acc.plot_tradeoff(output, size=size, dpi=dpi)
    else:
        plot_epsilon_against_epochs(config, _names(args.accountants), output,
                                    points=args.points, size=size, dpi=dpi)
    _out(f"wrote {output}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from dpplugins import cli_shuffle

    runner = {"compare": _run_compare, "epsilon": _run_epsilon, "noise": _run_noise,
              "plot": _run_plot, "shuffle": cli_shuffle.run}[args.command]
    status = runner(args)
    sys.stdout.flush()   # a closed pipe fails here, inside main's error handling
    return status


def _message(error: BaseException) -> str:
    if isinstance(error, BrokenPipeError):
        return "the output was closed before everything was written (broken pipe)"
    if isinstance(error, ParameterError):
        # the accountants come from --accountant / --accountants in every command
        return str(named_by_flag(error, ("accountant", "accountants")))
    if isinstance(error, (NumericalError, ImportError, _Failure)):
        return str(error)
    if isinstance(error, OSError):
        return f"{error.strerror or error}" + (f": {error.filename}" if error.filename else "")
    if isinstance(error, ArithmeticError):
        return (f"numerical failure ({type(error).__name__}: {error}); the inputs are outside "
                "what the accountant can compute (e.g. a noise multiplier or a count far "
                "outside the usual range)")
    return f"unexpected {type(error).__name__}: {error}"


#: the most warnings a successful command prints (one line each)
_MAX_WARNING_LINES = 5


def _print_warnings(command: str, caught) -> None:
    """The warnings of a successful command, one line each on stderr, each distinct one once
    (Python's own format took two lines, with a line of our source, and numpy's and the
    reference libraries' warnings came in several); a failed command prints its error alone."""
    seen: list[str] = []
    for item in caught:
        origin = "" if item.category.__module__.startswith("dpplugins") else \
            f" (from {item.filename.rsplit('site-packages/', 1)[-1]})"
        line = f"{item.category.__name__}: {' '.join(str(item.message).split())}{origin}"
        if line not in seen:
            seen.append(line)
    for line in seen[:_MAX_WARNING_LINES]:
        print(f"dpplugins {command}: note: {line}", file=sys.stderr)
    if len(seen) > _MAX_WARNING_LINES:
        print(f"dpplugins {command}: note: {len(seen) - _MAX_WARNING_LINES} more warning(s)",
              file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status (2 on any failure, with one
    line on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if sys.stdout is None:   # started with standard output closed (e.g. ">&-")
        print(f"dpplugins {args.command}: error: standard output is closed, so nothing could "
              "be written; redirect it to a file instead (e.g. > result.txt)", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # other libraries' deprecation notices are for their developers (Python hides
            # them by default); "always" let matplotlib's style loader log pyparsing's on every
            # plot, eight lines outside this capture (a failing plot printed nine lines)
            warnings.filterwarnings("ignore", category=DeprecationWarning,
                                    module=r"(?!dpplugins)")
            status = _run(args)
        _print_warnings(args.command, caught)
        return status
    except KeyboardInterrupt:
        print(f"dpplugins {args.command}: interrupted", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 -- the one place errors become exit status 2
        if isinstance(error, BrokenPipeError):
            try:   # nothing more can reach the closed pipe; keep the interpreter from trying
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
        print(f"dpplugins {args.command}: error: {' '.join(_message(error).split())}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
