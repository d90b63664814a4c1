"""Plots (matplotlib is an optional extra: ``pip install dpplugins[plot]``)."""

from __future__ import annotations

import numpy as np

from dpplugins.report import OURS, REFERENCES, TrainingConfig

__all__ = ["plot_epsilon_against_epochs"]


def _matplotlib():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("plotting needs matplotlib: pip install 'dpplugins[plot]'") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_epsilon_against_epochs(config: TrainingConfig, accountants: list[str], path: str, *,
                                points: int = 10, size=(6.4, 4.0), dpi: int = 100) -> None:
    """Epsilon (upper bound; certified bounds shaded where known) against epochs, one line per
    accountant; invalid accountants for the sampler are drawn dashed and labelled."""
    from dataclasses import replace

    plt = _matplotlib()
    epochs = np.linspace(config.epochs / points, config.epochs, points)
    fig, ax = plt.subplots(figsize=size, dpi=dpi)
    for name in accountants:
        if name in OURS:
            samplers, runner, _ = OURS[name]
            valid = config.sampler in samplers
        elif name in REFERENCES:
            runner, valid = REFERENCES[name][1], config.sampler == "poisson"
        else:
            from dpplugins.errors import ParameterError
            raise ParameterError("accountants", name, "one of " + ", ".join([*OURS, *REFERENCES]))
        uppers, lowers = [], []
        for e in epochs:
            eps, lower, _, _ = runner(replace(config, epochs=float(e)))
            uppers.append(eps)
            lowers.append(lower if lower is not None else np.nan)
        label = name if valid else f"{name} (not valid for {config.sampler})"
        line, = ax.plot(epochs, uppers, "--" if not valid else "-", marker="o", ms=3, label=label)
        if not np.all(np.isnan(lowers)):
            ax.fill_between(epochs, lowers, uppers, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("epochs")
    ax.set_ylabel(f"epsilon at delta={config.delta:g}")
    ax.set_title(f"n={config.dataset_size}, batch={config.batch_size}, "
                 f"sigma={config.noise_multiplier:g}, sampler={config.sampler}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
