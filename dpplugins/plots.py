"""Plots (matplotlib is an optional extra: ``pip install dpplugins[plot]``)."""

from __future__ import annotations

import math
from dataclasses import replace
from numbers import Real
from pathlib import Path

import numpy as np

from dpplugins.errors import ParameterError, check_count
from dpplugins.report import TrainingConfig, compare

__all__ = ["plot_epsilon_against_epochs", "check_output_path", "check_figure_size",
           "check_points", "MAX_POINTS"]


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
    computed."""
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
    return out


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
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out
