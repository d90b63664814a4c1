"""Plots (matplotlib is an optional extra: ``pip install dpplugins[plot]``)."""

from __future__ import annotations

import math
from dataclasses import replace
from numbers import Real
from pathlib import Path

import numpy as np

from dpplugins.errors import ParameterError, check_count
from dpplugins.report import TrainingConfig, compare

__all__ = ["plot_epsilon_against_epochs", "plot_shuffle_against_users", "check_output_path",
           "check_figure_size", "check_points", "MAX_POINTS"]


def _matplotlib():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("plotting needs matplotlib: pip install 'dpplugins[plot]'") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


#: most points of a plot against epochs: each is one certified query per accountant
MAX_POINTS = 200
#: figure sizes in inches, and dots per inch, a plot accepts (matplotlib's canvas is at most
#: 2^16 pixels a side; a zero size raised a LinAlgError from its layout)
MAX_INCHES, DPI_RANGE = 100.0, (10, 1200)
#: the most pixels a side of a figure may have (matplotlib refuses 2^16 and more)
MAX_PIXELS = 2**16 - 1


def _image_formats() -> set[str]:
    """File suffixes matplotlib can write (empty when it is not installed)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return set()
    return set(FigureCanvasBase.get_supported_filetypes())


def check_output_path(path) -> Path:
    """``path`` as a :class:`~pathlib.Path` whose directory exists and whose suffix (if any) is
    an image format matplotlib writes (ParameterError otherwise), checked before anything is
    computed; a name without a suffix gets ``.png``, the file matplotlib writes for it, unless
    it names an existing special file (``/dev/null``, a pipe): that is written as it is, in
    PNG (:func:`image_format`)."""
    out = Path(path)
    if out.name == "" or out.is_dir():
        raise ParameterError("output", str(path), "a file name (e.g. eps.png), not a directory")
    if not out.parent.is_dir():
        raise ParameterError("output", str(path), f"a path in an existing directory (no "
                             f"directory {str(out.parent)!r})", "create the directory first")
    suffix = out.suffix.lower().lstrip(".")
    formats = _image_formats()
    if suffix and formats and suffix not in formats:
        raise ParameterError("output", str(path), "a file name ending in an image format: "
                             + ", ".join("." + f for f in sorted(formats)))
    if suffix or (out.exists() and not out.is_file()):
        return out
    # without a suffix matplotlib writes PNG to the name plus ".png": say so (the command
    # line reported "wrote p" for the file p.png)
    return out.with_name(out.name + ".png")


def image_format(out: Path) -> str:
    """The format an image is written in: its suffix's, PNG without one (a special file such
    as ``/dev/null``: matplotlib would otherwise write ``/dev/null.png``)."""
    return out.suffix.lower().lstrip(".") or "png"


def check_points(points) -> int:
    """The number of epochs a plot evaluates: an integer in ``[1, MAX_POINTS]``
    (ParameterError otherwise).

    Example::

        >>> check_points(10)
        10
    """
    try:
        value = check_count("points", points, minimum=1)
    except ParameterError:
        value = None
    if value is None or value > MAX_POINTS:
        raise ParameterError("points", points, f"an integer in [1, {MAX_POINTS}] (each point is "
                             "one certified query per accountant)")
    return value


def check_figure_size(size, dpi) -> tuple[tuple[float, float], int]:
    """``((width, height), dpi)`` of a figure: sizes in ``(0, MAX_INCHES]`` inches, ``dpi`` an
    integer in ``DPI_RANGE`` (ParameterError naming the bad one otherwise).

    Example::

        >>> check_figure_size((6.4, 4.0), 100)
        ((6.4, 4.0), 100)
    """
    out = []
    for name, value in zip(("width", "height"), size):
        if isinstance(value, bool) or not isinstance(value, Real) or \
                not 0 < float(value) <= MAX_INCHES:
            raise ParameterError(name, value, f"a size in inches in (0, {MAX_INCHES:g}]")
        out.append(float(value))
    dpi = check_count("dpi", dpi, minimum=DPI_RANGE[0])
    if dpi > DPI_RANGE[1]:
        raise ParameterError("dpi", dpi, f"an integer in [{DPI_RANGE[0]}, {DPI_RANGE[1]}]")
    for name, inches in zip(("width", "height"), out):
        # matplotlib draws 1 to 2^16 - 1 pixels a side (width 1e-320 gave a NaN, and 100
        # inches at 1000 dpi "Image size ... is too large")
        if not 1 <= inches * dpi <= MAX_PIXELS:
            raise ParameterError(name, inches, f"1 to {MAX_PIXELS:,} pixels at dpi={dpi}, i.e. "
                                 f"{1 / dpi:.3g} to {min(MAX_INCHES, MAX_PIXELS / dpi):.4g} inches")
    return (out[0], out[1]), dpi


def plot_epsilon_against_epochs(config: TrainingConfig, accountants: list[str], path, *,
                                points: int = 10, size=(6.4, 4.0), dpi: int = 100) -> Path:
    """Epsilon (upper bound; certified bounds shaded where a positive lower bound is known)
    against epochs, one line per accountant, from the rows of
    :func:`dpplugins.report.compare`.  Accountants that are not valid for the sampler but give
    a Poisson number are drawn dashed and labelled "not valid for <sampler>"; an accountant with
    no number for this configuration, or one whose computation fails, raises (nothing is drawn
    for it silently).  Returns the path written."""
    out = check_output_path(path)
    points = check_points(points)
    size, dpi = check_figure_size(size, dpi)
    if config.epochs is None:
        raise ParameterError("epochs", None, "given for a plot against epochs (not steps)")
    if not accountants:
        raise ParameterError("accountants", accountants, "at least one accountant name")
    plt = _matplotlib()
    epochs = np.linspace(config.epochs / points, config.epochs, points)
    uppers = {name: [] for name in accountants}
    lowers = {name: [] for name in accountants}
    valid = {}
    for e in epochs:
        rows = compare(replace(config, epochs=float(e)), accountants=list(accountants),
                       references=False)
        for row in rows:
            if row.error:
                raise ParameterError("accountants", row.accountant,
                                     f"an accountant that can compute this configuration "
                                     f"({row.error})")
            if row.epsilon is None:
                raise ParameterError("accountants", row.accountant,
                                     f"an accountant with a number for this configuration "
                                     f"({row.reason})")
            valid[row.accountant] = row.valid
            upper = row.epsilon if math.isfinite(row.epsilon) else np.nan
            lower = row.lower if row.lower is not None and math.isfinite(row.lower) else np.nan
            uppers[row.accountant].append(upper)
            lowers[row.accountant].append(lower if lower > 0 else np.nan)
    what = "projected noisy SGD" if config.is_pnsgd else config.sampler
    fig, ax = plt.subplots(figsize=size, dpi=dpi)
    try:
        for name in accountants:
            label = name if valid[name] else f"{name} (not valid for {what})"
            line, = ax.plot(epochs, uppers[name], "-" if valid[name] else "--", marker="o",
                            ms=3, label=label)
            low = np.asarray(lowers[name], dtype=float)
            if not np.all(np.isnan(low)):
                ax.fill_between(epochs, low, uppers[name], color=line.get_color(), alpha=0.2)
        ax.set_xlabel("epochs")
        ax.set_ylabel(f"epsilon at delta={config.delta:g}")
        parts = [f"n={config.dataset_size}" if config.dataset_size is not None else
                 f"q={config.sample_rate:g}"]
        if config.batch_size is not None:
            parts.append(f"batch={config.batch_size}")
        parts += [f"sigma={config.noise_multiplier:g}", f"sampler={what}"]
        ax.set_title(", ".join(parts))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out, format=image_format(out))
    finally:
        plt.close(fig)
    return out


def _finite_or_nan(value) -> float:
    return float(value) if value is not None and math.isfinite(value) else np.nan


def plot_shuffle_against_users(reports: list[dict], path, *, size=(6.4, 4.0),
                               dpi: int = 100) -> Path:
    """Epsilon against the number of users for one shuffled randomizer, from the reports of
    :func:`dpplugins.cli_shuffle.bounds` (one per number of users, the same randomizer,
    ``eps0`` and ``delta``): FMT21's bound (dashed), the randomizer's best certified upper
    bound (solid), the band from the certified lower bound up to it (shaded: the true epsilon
    lies in it), Wang et al.'s number where there is one (dotted, labelled not certified) and
    eps0 (no amplification).  Axes are logarithmic; an infinite bound leaves a gap.  Returns
    the path written.

    Example::

        >>> import argparse, tempfile, pathlib
        >>> from dpplugins import cli_shuffle
        >>> args = argparse.Namespace(eps0=2.0, delta=1e-6, randomizer="rr", k=None, d=None,
        ...                           g=None, delta0=0.0, groups=None)
        >>> reports = [cli_shuffle.bounds(argparse.Namespace(**vars(args), n=n))
        ...            for n in (100, 1000, 10000)]
        >>> out = plot_shuffle_against_users(reports, pathlib.Path(tempfile.mkdtemp()) / "s.png")
        >>> out.stat().st_size > 0
        True
    """
    out = check_output_path(path)
    size, dpi = check_figure_size(size, dpi)
    if not reports:
        raise ParameterError("reports", reports, "at least one report")
    first = reports[0]
    for report in reports:
        if any(report[key] != first[key] for key in ("randomizer", "eps0", "delta", "delta0",
                                                     "parameters")):
            raise ParameterError("reports", report["randomizer"], "reports of one randomizer, "
                                 "eps0 and delta (only the number of users may change)")
    reports = sorted(reports, key=lambda report: report["n"])
    users = [report["n"] for report in reports]
    rows = [report["rows"] for report in reports]
    # the first three rows of every report: FMT21, the randomizer's bound, the lower bound
    fmt21 = [_finite_or_nan(r[0]["epsilon"]) for r in rows]
    upper = [_finite_or_nan(r[1]["epsilon"]) for r in rows]
    lower = [_finite_or_nan(r[2]["epsilon"]) for r in rows]
    vr = [next((_finite_or_nan(row["epsilon"]) for row in r if row["kind"] == "not certified"),
               np.nan) for r in rows]
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=size, dpi=dpi)
    try:
        ax.plot(users, fmt21, "--", marker="o", ms=3, color="tab:gray",
                label=rows[0][0]["bound"])
        line, = ax.plot(users, upper, "-", marker="o", ms=3, color="tab:blue",
                        label=rows[0][1]["bound"].replace("family: ", "") + " (certified upper)")
        low = np.asarray(lower, dtype=float)
        ax.fill_between(users, np.where(low > 0, low, np.nan), upper, color=line.get_color(),
                        alpha=0.2, label="certified lower bound to upper bound")
        if not np.all(np.isnan(vr)):
            ax.plot(users, vr, ":", color="tab:red", label="Wang et al. 2024 (not certified)")
        ax.axhline(first["eps0"], color="black", lw=0.8, label="eps0 (no amplification)")
        ax.set_xscale("log")
        positive = [v for v in fmt21 + upper + lower if np.isfinite(v) and v > 0]
        if positive:
            ax.set_yscale("log")
        ax.set_xlabel("number of users n")
        ax.set_ylabel(f"epsilon at delta={first['delta']:g}")
        params = "".join(f", {k}={v}" for k, v in first["parameters"].items())
        ax.set_title(f"shuffle model: {first['randomizer']}{params}, eps0={first['eps0']:g}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out, format=image_format(out))
    finally:
        plt.close(fig)
    return out
