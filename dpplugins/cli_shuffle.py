"""The ``dpplugins shuffle`` subcommand: one round of the shuffle model, bounds side by side.

``dpplugins shuffle --eps0 E --n N --delta D --randomizer R [--k K] [--d D] [--g G] [--delta0
D0] [--json] [--plot PATH [--points P]]`` prints, for n users each running the local randomizer
R before a shuffler, three certified numbers: FMT21's bound (Feldman, McMillan, Talwar, FOCS
2021, arXiv:2012.12803, Thm 3.1; valid for every eps0-DP randomizer), the best bound we certify
for the family R (:mod:`dpplugins.amplification.shuffle_model`,
:mod:`dpplugins.amplification.shuffle_model_families`) and a certified lower bound (exact
shuffled privacy on specific datasets); then the family's other certified upper bounds (e.g.
FMT23's stronger clone, the errata's Lemma 7.3, the privacy blanket) and Wang et al.'s
variation-ratio number, labelled "not certified" (it is violated for several families; the
modules say where).  Every other number is labelled upper or lower bound; none is an estimate.
``--json`` prints strict JSON (an infinite number is null and named in ``"infinite"``).
``--plot PATH`` also draws these bounds against the number of users (:func:`plot_users`), the
certified band between the lower and the upper bound shaded.

Users with their own local epsilons (binary or k-ary RR only): ``--groups EPS:USERS,...``
replaces ``--eps0`` and ``--n``; the rows are then FMT21 at the largest epsilon (its Thm 3.1
allows a different eps0-DP randomizer per user), the per-group bound of
:mod:`dpplugins.amplification.shuffle_model_heterogeneous` and its certified lower bound.

Wiring (in :mod:`dpplugins.cli`): ``cli_shuffle.add_parser(sub)`` in ``build_parser`` and
``"shuffle": cli_shuffle.run`` in the runner table.

Example::

    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="dpplugins")
    >>> _ = add_parser(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["shuffle", "--eps0", "2", "--n", "10000", "--delta", "1e-6",
    ...                           "--randomizer", "rr", "--json"])
    >>> run(args, out=lambda text: None)
    0
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable

import numpy as np

from dpplugins.cli_types import finite_number, integer, named_by_flag
from dpplugins.display import lower_text, upper_text
from dpplugins.errors import ParameterError
from dpplugins.pld.distribution import certified_bounds

RANDOMIZERS = ("general", "rr", "krr", "sue", "oue", "subset", "olh", "laplace")

EXAMPLE = "dpplugins shuffle --eps0 4 --n 100000 --delta 1e-6 --randomizer oue --d 64"
EXAMPLE_GROUPS = "dpplugins shuffle --groups 1:5000,4:5000 --delta 1e-6 --randomizer krr --k 4"

_DESCRIPTION = ("One round of the shuffle model: n users each run the local randomizer before a "
                "shuffler.  Prints FMT21's bound (valid for every eps0-DP randomizer), the best "
                "bound certified for the chosen randomizer and a certified lower bound (exact "
                "shuffled privacy on specific datasets), then the randomizer's other certified "
                "upper bounds and Wang et al.'s (VLDB 2024) number, labelled 'not certified'; "
                "every other number is an upper or a lower bound, none is an estimate.  "
                "Neighbouring datasets differ in one user's value.")

_HELP = {
    "general": "any eps0-DP (or (eps0, delta0)-DP with --delta0) local randomizer",
    "rr": "binary randomized response",
    "krr": "k-ary randomized response (--k)",
    "sue": "symmetric unary encoding / basic RAPPOR on a domain of size --d",
    "oue": "optimized unary encoding on a domain of size --d",
    "subset": "k-subset selection (--k) on a domain of size --d",
    "olh": "optimized local hashing into --g buckets (pairwise independent hash)",
    "laplace": "Laplace mechanism with scale 1/eps0 on input in [0, 1]",
}


_number = finite_number
_count = integer


def groups_argument(text: str) -> tuple[tuple[float, int], ...]:
    """``"EPS:USERS,EPS:USERS"`` as ``((eps, users), ...)``; the values are checked later
    (:func:`~dpplugins.amplification.shuffle_model_heterogeneous.epsilon_bounds`).

    Example::

        >>> groups_argument("1:5000,4:2.5e3")
        ((1.0, 5000), (4.0, 2500))
    """
    pairs = []
    for item in text.split(","):
        eps, sep, users = item.partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(
                f"must be EPS:USERS pairs separated by commas (e.g. 1:5000,4:5000), got {text!r}")
        pairs.append((finite_number(eps.strip()), integer(users.strip())))
    return tuple(pairs)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``shuffle`` subcommand to ``subparsers`` (an ``add_subparsers()`` result) and
    return its parser."""
    p = subparsers.add_parser(
        "shuffle", help="shuffle model: FMT21, the family's bound and a lower bound",
        description=_DESCRIPTION,
        epilog=f"examples: {EXAMPLE}; {EXAMPLE_GROUPS}\nrandomizers: "
               + "; ".join(f"{k}: {v}" for k, v in _HELP.items()))
    p.add_argument("--eps0", type=_number,
                   help="local privacy level eps0 > 0 (required unless --groups)")
    p.add_argument("--n", type=_count,
                   help="number of users, 2 to 1e8 (the bound at 1e8 holds for more users; "
                        "required unless --groups)")
    p.add_argument("--groups", type=groups_argument, metavar="EPS:USERS[,EPS:USERS...]",
                   help="users with their own local epsilon, by group (binary or k-ary RR "
                        "only; replaces --eps0 and --n), e.g. 1:5000,4:5000")
    p.add_argument("--delta", type=_number, required=True, help="target delta in (0, 1)")
    p.add_argument("--randomizer", choices=RANDOMIZERS, default="general",
                   help="the local randomizer (default: general)")
    p.add_argument("--k", type=_count, help="k of k-RR (>= 2) or the subset size (>= 1)")
    p.add_argument("--d", type=_count, help="domain size of unary encoding / subset selection")
    p.add_argument("--g", type=_count, help="number of hash buckets of local hashing (>= 2)")
    p.add_argument("--delta0", type=_number, default=0.0,
                   help="delta0 of an (eps0, delta0)-DP general randomizer (default 0)")
    p.add_argument("--json", action="store_true",
                   help="strict JSON (an infinite number is null and listed in 'infinite')")
    p.add_argument("--plot", metavar="PATH",
                   help="also draw epsilon against the number of users (log-spaced from "
                        "min(100, n/100) to n) to this image file, e.g. shuffle.png (needs "
                        "matplotlib; not with --groups)")
    p.add_argument("--points", type=_count, default=8,
                   help="numbers of users the plot evaluates (2 to 50, default 8; each is "
                        "one report)")
    return p


#: the randomizer options each randomizer uses (the others are refused, not ignored)
_OPTIONS_USED = {"general": ("delta0",), "rr": (), "krr": ("k",), "sue": ("d",), "oue": ("d",),
                 "subset": ("d", "k"), "olh": ("g",), "laplace": ()}


def _refuse_unused_options(args) -> None:
    """ParameterError for a randomizer option the chosen randomizer does not use (``--randomizer
    rr --d 9`` was answered as if ``--d`` had not been given)."""
    used = _OPTIONS_USED.get(args.randomizer, ())
    for name in ("k", "d", "g", "delta0"):
        value = getattr(args, name, None)
        if value is None or (name == "delta0" and value == 0) or name in used:
            continue
        users = sorted(r for r, names in _OPTIONS_USED.items() if name in names)
        raise ParameterError(f"--{name}", value, f"not given for --randomizer "
                             f"{args.randomizer} (it is used by {', '.join(users)})",
                             hint=f"Drop --{name}, or choose a randomizer that uses it")


def _require(args, name: str, minimum: int) -> int:
    value = getattr(args, name)
    if value is None:
        raise ParameterError(name, None, f"an integer >= {minimum} for --randomizer "
                             f"{args.randomizer}", hint=f"pass --{name}")
    return value


def bounds(args: argparse.Namespace) -> dict:
    """The rows of the report as a dict (numbers may be ``inf``; see :func:`to_json`)."""
    from dpplugins.amplification import shuffle_model as sm
    from dpplugins.amplification import shuffle_model_families as fam

    _refuse_unused_options(args)
    if getattr(args, "groups", None) is not None:
        return _grouped_bounds(args)
    for name in ("eps0", "n"):
        if getattr(args, name) is None:
            raise ParameterError(name, None, "given (it is required unless --groups is used)",
                                 hint=f"pass --{name}, or --groups EPS:USERS,... for users "
                                      "with their own local epsilons")
    r, eps0, n, delta = args.randomizer, args.eps0, args.n, args.delta
    general_spec = ("general", eps0, args.delta0) if args.delta0 else ("general", eps0)
    params: dict = {}
    family = None
    if r not in ("general", "rr", "krr"):
        # the family first: its own range of eps0 is the one to name (FMT21's wider one was
        # named, then the family refused the values it allowed)
        if r in ("sue", "oue", "subset"):
            params["d"] = _require(args, "d", 3)
        if r == "subset":
            params["k"] = _require(args, "k", 1)
        if r == "olh":
            params["g"] = _require(args, "g", 2)
        family = fam.FAMILIES[r](eps0, **params)
    fmt21 = sm.epsilon(general_spec, n, delta)
    if family is None:
        if r == "krr":
            params["k"] = _require(args, "k", 2)
        spec = {"general": general_spec, "rr": ("binary_rr", eps0),
                "krr": ("krr", eps0, params.get("k"))}[r]
        up = fmt21 if r == "general" else sm.epsilon(spec, n, delta)
        low = sm.lower_bound(spec, n, delta)
        name = {"general": "general", "rr": "binary RR", "krr": f"{params.get('k')}-RR"}[r]
    else:
        up, low = fam.epsilon(family, n, delta), fam.lower_bound(family, n, delta)
        name = family.name
    fmt21_value = fmt21.candidates.get("fmt21", fmt21.epsilon)
    if args.delta0:
        fmt21_value = fmt21.epsilon     # FMT21 has no (eps0, delta0) form here: Balle et al.
    rows = [
        {"bound": "FMT21 (every eps0-DP randomizer)" if not args.delta0 else
         "general (eps0, delta0)-DP", "kind": "upper", "epsilon": float(fmt21_value),
         "method": "fmt21" if not args.delta0 else fmt21.method},
        {"bound": f"family: {name}", "kind": "upper", "epsilon": float(up.epsilon),
         "method": up.method},
        {"bound": "exact shuffled lower bound", "kind": "lower",
         "epsilon": float(certified_bounds(low.epsilon, up.epsilon,
                                           f"epsilon at delta={delta!r}").lower),
         "method": low.method},
    ]
    # every certified candidate of the family's bound (FMT23's stronger clone: binary and k-ary
    # RR, the errata's class E_eps0, and any one randomizer run by every user), then Wang et
    # al.'s number
    candidates = dict(up.candidates)
    if r in ("rr", "krr"):
        from dpplugins.amplification import shuffle as sh
        candidates.setdefault("fmt23", sh.fmt23_epsilon(
            eps0, n, delta, randomizer="binary_rr" if r == "rr" else ("krr", params["k"]))
            .epsilon)
    for method, value in sorted(candidates.items(), key=lambda item: item[1]):
        if method != up.method and method != "fmt21":
            rows.append({"bound": f"  other upper bound: {method}", "kind": "upper",
                         "epsilon": float(min(value, eps0)), "method": method})
    # (eps0 = 0: the reports do not depend on the data, epsilon is 0 and the variation-ratio
    # parameters degenerate, p = 1: it raised "p=1.0 is invalid")
    vr = None if args.delta0 or eps0 == 0 else _variation_ratio(r, eps0, n, delta, family,
                                                                  params)
    if vr is not None:
        rows.append({"bound": "variation ratio (Wang et al. 2024)", "kind": "not certified",
                     "epsilon": vr, "method": "variation_ratio"})
    return {"eps0": eps0, "n": n, "delta": delta, "delta0": args.delta0, "randomizer": r,
            "parameters": params, "neighbouring": "replace_one", "rows": rows}


def _grouped_bounds(args: argparse.Namespace) -> dict:
    """The rows for ``--groups``: FMT21 at the largest local epsilon, the per-group bound and
    its certified lower bound (:mod:`dpplugins.amplification.shuffle_model_heterogeneous`)."""
    from dpplugins.amplification import shuffle_model as sm
    from dpplugins.amplification import shuffle_model_heterogeneous as het

    r = args.randomizer
    if r not in ("rr", "krr"):
        raise ParameterError("randomizer", r, "rr or krr with --groups",
                             hint="per-group local epsilons are bounded for binary and k-ary "
                                  "randomized response only")
    for name in ("eps0", "n"):
        if getattr(args, name) is not None:
            raise ParameterError(name, getattr(args, name), "omitted with --groups",
                                 hint="the groups give every user's eps0 and the number of "
                                      "users")
    k = 2 if r == "rr" else _require(args, "k", 2)
    spec = het.GroupedKRR(args.groups, k)     # checks and merges the groups
    b = het.epsilon_bounds(spec.groups, k, args.delta)
    eps_max, n = spec.eps0, spec.users
    fmt21 = sm.epsilon(("general", eps_max), n, args.delta)
    name = "binary RR" if k == 2 else f"{k}-RR"
    rows = [
        {"bound": "FMT21 at the largest eps0", "kind": "upper",
         "epsilon": float(fmt21.candidates.get("fmt21", fmt21.epsilon)), "method": "fmt21"},
        {"bound": f"family: {name} per group", "kind": "upper", "epsilon": float(b.upper),
         "method": "blanket_per_group"},
        {"bound": "exact shuffled lower bound", "kind": "lower", "epsilon": float(b.lower),
         "method": "count_pair_per_group"},
    ]
    return {"eps0": eps_max, "n": n, "delta": args.delta, "delta0": 0.0, "randomizer": r,
            "parameters": {"k": k} if r == "krr" else {},
            "groups": [[eps, users] for eps, users in spec.groups],
            "neighbouring": "replace_one", "rows": rows}


def _variation_ratio(r: str, eps0: float, n: int, delta: float, family, params: dict):
    """Wang et al.'s (VLDB 2024, arXiv:2304.05007) number with their parameters for ``r``:
    **not certified** -- the module docstring of
    :mod:`dpplugins.amplification.shuffle_model` shows it violated for k-RR, k >= 3, and
    :mod:`dpplugins.amplification.shuffle_model_families` for unary encoding, subset selection
    and local hashing; for binary RR and general randomizers it is FMT23's stronger clone.
    None for (eps0, delta0) randomizers."""
    from dpplugins.amplification import shuffle_model as sm
    if family is not None:
        p, beta, q = family.vr
    elif r == "general":
        p, beta, q = sm.variation_ratio_parameters(("general", eps0))
    elif r == "rr":
        p, beta, q = sm.variation_ratio_parameters(("binary_rr", eps0))
    else:
        p, beta, q = sm.variation_ratio_parameters(("krr", eps0, params["k"]))
    return float(min(sm.variation_ratio_pair(p, beta, q, n).epsilon(delta, eps0), eps0))


def to_json(report: dict) -> str:
    """Strict JSON: every non-finite epsilon becomes null and its row is named in
    ``"infinite"``."""
    out = dict(report)
    rows, infinite = [], []
    for row in report["rows"]:
        row = dict(row)
        if not math.isfinite(row["epsilon"]):
            infinite.append(row["bound"])
            row["epsilon"] = None
        rows.append(row)
    out["rows"] = rows
    out["infinite"] = infinite
    if infinite:
        out["reason"] = "no amplification bound applies (epsilon unbounded)"
    return json.dumps(out, indent=2, allow_nan=False)


def to_text(report: dict) -> str:
    """A small table, one row per bound."""
    params = "".join(f", {k}={v}" for k, v in report["parameters"].items())
    if "groups" in report:
        params += ", groups=" + ",".join(f"{eps:g}:{users}" for eps, users in report["groups"])
    head = (f"shuffle model: n={report['n']}, eps0={report['eps0']:g}, "
            f"delta={report['delta']!r}, randomizer={report['randomizer']}{params} "
            f"(neighbouring: replace one)")
    lines = [head, f"{'bound':40s} {'kind':>13s} {'epsilon':>12s}  method"]
    for row in report["rows"]:
        # certified bounds rounded outward; an estimate to nearest
        value = (lower_text(row["epsilon"]) if row["kind"] == "lower"
                 else upper_text(row["epsilon"]) if row["kind"] == "upper"
                 else f"{row['epsilon']:.6g}")
        lines.append(f"{row['bound']:40s} {row['kind']:>13s} {value:>12s}  {row['method']}")
    return "\n".join(lines)


#: most numbers of users a plot evaluates (each is one report: up to seconds at n = 1e8)
MAX_PLOT_POINTS = 50


def plot_users(n: int, points: int) -> list[int]:
    """The numbers of users a plot evaluates: ``points`` log-spaced integers from
    ``min(100, n // 100)`` (at least 2) to ``n`` (fewer where they coincide).

    Example::

        >>> plot_users(100_000, 4), plot_users(400, 3)
        ([100, 1000, 10000, 100000], [4, 40, 400])
    """
    lo = max(2, min(100, n // 100))
    values = np.unique(np.round(np.geomspace(lo, n, points)).astype(np.int64))
    return [int(v) for v in values]


def _check_plot(args: argparse.Namespace):
    """The plot's output path and points, and matplotlib, checked before anything is computed
    (ImportError naming the extra to install)."""
    from dpplugins.plots import _matplotlib, check_output_path

    if getattr(args, "groups", None) is not None:
        raise ParameterError("plot", args.plot, "omitted with --groups",
                             hint="plot one randomizer with --eps0 and --n")
    points = getattr(args, "points", 8)
    if not isinstance(points, int) or not 2 <= points <= MAX_PLOT_POINTS:
        raise ParameterError("points", points, f"an integer in [2, {MAX_PLOT_POINTS}]")
    try:
        path = check_output_path(args.plot)
    except ParameterError as error:     # named by the option, as every other error here
        raise ParameterError("plot", args.plot, error.valid, error.hint) from None
    _matplotlib()
    return path, points


#: the parameters whose errors name this command's options (the library's ``eps0=...`` is the
#: option ``--eps0``)
_OPTIONS = ("eps0", "n", "groups", "delta", "randomizer", "k", "d", "g", "delta0", "plot",
            "points")


def run(args: argparse.Namespace, out: Callable[[str], object] | None = None) -> int:
    """Run the subcommand; returns the exit status (0).  Bad input raises
    :class:`~dpplugins.errors.ParameterError` naming the option (the ``dpplugins`` entry point
    turns it into one line on stderr and status 2).  With ``--plot`` the report at each number
    of users of :func:`plot_users` is drawn by
    :func:`dpplugins.plots.plot_shuffle_against_users` (progress on stderr when it is a
    terminal)."""
    try:
        return _run(args, out)
    except ParameterError as error:
        raise named_by_flag(error, _OPTIONS) from None


def _run(args: argparse.Namespace, out: Callable[[str], object] | None) -> int:
    write = out or (lambda text: sys.stdout.write(text + "\n"))
    plot = getattr(args, "plot", None)
    if plot is not None:
        path, points = _check_plot(args)
    report = bounds(args)
    write(to_json(report) if args.json else to_text(report))
    if plot is not None:
        from dpplugins.plots import plot_shuffle_against_users

        users = plot_users(report["n"], points)
        reports = []
        for i, n in enumerate(users):
            if sys.stderr.isatty():
                sys.stderr.write(f"\rplot: {i + 1}/{len(users)} (n={n})")
                sys.stderr.flush()
            reports.append(report if n == report["n"] else
                           bounds(argparse.Namespace(**{**vars(args), "n": n})))
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        written = plot_shuffle_against_users(reports, path)
        if not args.json:
            write(f"wrote {written}")
    return 0
