"""Projected noisy SGD (PNSGD) for PyTorch: the algorithm the ``"pnsgd"`` accountant describes.

One record per step (Feldman et al. 2018; Asoodeh et al. 2020; Sordello, Bu, Dong 2021 -- the
seed ``papers/pnsgd-iteration.txt``, update rule as reconstructed in
:mod:`dpplugins.amplification.iteration`):

    w_t = Pi_K( w_{t-1} - eta * (clip_L(g_t) + Z_t) ),   Z_t ~ N(0, (noise_multiplier * L)^2 I)

* ``g_t`` is the gradient of the loss on **one** example (the caller computes it, e.g.
  ``loss_fn(model(x[i:i+1]), y[i:i+1]).backward()``), over *all* parameters of the optimizer
  taken as one vector ``w``;
* ``clip_L`` rescales it to norm at most ``L = max_grad_norm``.  The theorems need an L-Lipschitz
  loss (A's argument ``2L / sigma`` bounds how far two neighbouring records move one step).  For a
  loss that is not L-Lipschitz, clipping is what enforces L: the clipped step is a step on a loss
  whose gradient has norm <= L (for a convex loss the clipped map is no longer a gradient of a
  convex function in general, so the convexity/contraction claim ``M = 1`` is then the caller's
  responsibility -- for losses that are already L-Lipschitz, such as logistic regression on rows
  of norm <= L, clipping is a no-op);
* ``Z_t`` is Gaussian with standard deviation ``noise_multiplier * max_grad_norm`` (Opacus'
  units), so the iterate receives noise of standard deviation ``lr * noise_multiplier * L``;
* ``Pi_K`` is the Euclidean projection of all parameters jointly onto the ball of diameter
  ``diameter`` (radius ``diameter / 2``) centred at 0 -- the constraint set ``K`` with
  ``D_K = diameter``.

Only the final iterate (or the iterate at the end of a pass) may be released: amplification by
iteration assumes the intermediate iterates stay hidden.  Pair the optimizer with a
:class:`~dpplugins.accountants.pnsgd.PNSGDAccountant` built by :func:`make_pnsgd_accountant`
(one source of truth for L, D_K and eta); the optimizer then records one step per call.  For the
``"shuffled"`` variant visit the records in a fresh uniform permutation every pass
(:func:`shuffled_order`).

Example::

    >>> import torch
    >>> from dpplugins.integrations.pnsgd import (ProjectedNoisySGD, make_pnsgd_accountant,
    ...                                           shuffled_order)
    >>> x, y = torch.randn(100, 3) / 2, torch.randint(0, 2, (100,)).float()
    >>> w = torch.zeros(3, requires_grad=True)
    >>> opt = ProjectedNoisySGD([w], lr=0.5, noise_multiplier=2.0, max_grad_norm=1.0,
    ...                         diameter=4.0)
    >>> accountant = make_pnsgd_accountant(opt, dataset_size=100)
    >>> g = torch.Generator().manual_seed(0)
    >>> for i in shuffled_order(100, g).tolist():          # one pass
    ...     opt.zero_grad()
    ...     torch.nn.functional.binary_cross_entropy_with_logits(x[i] @ w, y[i]).backward()
    ...     opt.step()
    >>> len(accountant.history)
    1
"""

from __future__ import annotations

try:
    import torch
except ImportError as error:  # pragma: no cover - exercised only without torch
    raise ImportError("dpplugins.integrations.pnsgd needs PyTorch: "
                      "pip install 'dpplugins[opacus]'") from error

from typing import Callable, Iterable, Optional

from dpplugins.accountants.pnsgd import PNSGDAccountant
from dpplugins.errors import ParameterError, check_count, check_positive

__all__ = ["project_onto_ball", "ProjectedNoisySGD", "make_pnsgd_accountant", "shuffled_order"]


class ProjectedNoisySGD(torch.optim.Optimizer):
    """Projected noisy SGD with one record per step (see the module docstring for the update).

    Parameters (keyword-only, all finite and > 0):

    * ``lr`` -- the step size ``eta`` (fixed: the accountant assumes a constant ``eta``; changing
      a group's ``lr`` afterwards, e.g. with a scheduler, makes :meth:`step` raise);
    * ``noise_multiplier`` -- gradient-noise standard deviation divided by ``max_grad_norm``;
    * ``max_grad_norm`` -- the clipping norm = the Lipschitz constant ``L``;
    * ``diameter`` -- ``D_K``: the parameters are projected onto the centred L2 ball of radius
      ``diameter / 2``;
    * ``accountant`` -- optional :class:`PNSGDAccountant` with the same ``lipschitz``,
      ``diameter`` and ``learning_rate`` (checked) and Gaussian noise; :meth:`step` then calls
      ``accountant.step(noise_multiplier=..., sample_rate=1/accountant.dataset_size)``;
    * ``generator`` -- optional ``torch.Generator`` for the noise (reproducible runs).

    Parameters without a gradient count as a zero gradient (they still receive noise and take
    part in the projection: the theorems are about the whole vector ``w``).  Each call of
    :meth:`step` must follow a backward pass on a single example.

    The projection scales onto the ball of radius ``(diameter / 2) * (1 - 4 eps_dtype)``, a
    subset of K, so rounding never leaves the iterate outside K (a projection onto a smaller
    ball inside K is still non-expansive, and its diameter is <= D_K).
    """

    def __init__(self, params: Iterable, *, lr: float, noise_multiplier: float,
                 max_grad_norm: float, diameter: float,
                 accountant: Optional[PNSGDAccountant] = None,
                 generator: Optional[torch.Generator] = None) -> None:
        self.lr = check_positive("lr", lr)
        self.noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
        self.max_grad_norm = check_positive("max_grad_norm", max_grad_norm)
        self.diameter = check_positive("diameter", diameter)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ParameterError("generator", generator, "a torch.Generator or None")
        self.generator = generator
        super().__init__(params, dict(lr=self.lr))
        if not any(True for group in self.param_groups for _ in group["params"]):
            raise ParameterError("params", [], "a non-empty iterable of tensors")
        self._accountant: Optional[PNSGDAccountant] = None
        self.accountant = accountant

    # -- pickling ------------------------------------------------------------------------------
    _OWN = ("lr", "noise_multiplier", "max_grad_norm", "diameter", "generator", "_accountant")

    def __getstate__(self) -> dict:
        """torch's optimizers pickle only defaults, state and param groups: a ``torch.save``d
        ProjectedNoisySGD lost its constants and its accountant, and its first step raised
        AttributeError (a hostile sweep).  They are kept."""
        state = super().__getstate__()
        state.update({key: self.__dict__[key] for key in self._OWN if key in self.__dict__})
        return state

    # -- the accountant -----------------------------------------------------------------------
    @property
    def accountant(self) -> Optional[PNSGDAccountant]:
        """The attached :class:`PNSGDAccountant` (or None); assignment checks its constants."""
        return self._accountant

    @accountant.setter
    def accountant(self, accountant: Optional[PNSGDAccountant]) -> None:
        if accountant is not None:
            _check_matches(self, accountant)
        self._accountant = accountant

    # -- the update ---------------------------------------------------------------------------
    @property
    def radius(self) -> float:
        """Radius of the constraint ball, ``diameter / 2``."""
        return self.diameter / 2.0

    def _parameters(self) -> list[torch.Tensor]:
        for group in self.param_groups:
            if group["lr"] != self.lr:
                raise ParameterError("lr", group["lr"],
                                     f"the constructor's lr = {self.lr!r} in every group",
                                     "the accountant assumes a constant step size; create a "
                                     "new optimizer (and accountant) to change it")
        return [p for group in self.param_groups for p in group["params"]]

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], torch.Tensor]] = None):
        """Clip the one-example gradient to ``max_grad_norm``, add Gaussian noise of standard
        deviation ``noise_multiplier * max_grad_norm``, step with ``lr``, project onto the ball
        and record the step with the accountant (if any).  Returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = self._parameters()
        if self._accountant is not None:
            # the constants may have been reassigned since the accountant was made (diameter,
            # max_grad_norm, lr in every group and on the optimizer): 9.38 was reported for a
            # run at diameter 1000 whose accountant says 15.46 (a hostile sweep)
            _check_matches(self, self._accountant, changed=True)
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]

        # clip: g <- g * min(1, L / ||g||), the norm over all parameters jointly
        norm = torch.sqrt(sum(torch.sum(g.double() ** 2) for g in grads))
        scale = min(1.0, self.max_grad_norm / float(norm)) if float(norm) > 0 else 1.0

        # noise in the order of the parameters, then the step
        std = self.noise_multiplier * self.max_grad_norm
        for p, g in zip(params, grads):
            noise = torch.randn(p.shape, generator=self.generator, dtype=p.dtype,
                                device=p.device)
            p.add_(g * scale + std * noise, alpha=-self.lr)

        project_onto_ball(params, 2 * self.radius)

        if self._accountant is not None:
            self._accountant.step(noise_multiplier=self.noise_multiplier,
                                  sample_rate=1.0 / self._accountant.dataset_size)
        return loss


@torch.no_grad()
def project_onto_ball(params, diameter: float) -> None:
    """Project all ``params`` jointly (one vector) onto the centred L2 ball of diameter
    ``diameter``, in place.  The radius is shrunk by 4 units of round-off of the parameters' dtype
    so that the rounded result is inside the ball (still a non-expansive map into K)."""
    params = list(params)
    diameter = check_positive("diameter", diameter)   # -1 flipped every parameter's sign
    if not params:
        raise ParameterError("params", params, "a non-empty sequence of tensors")
    norm = float(torch.sqrt(sum(torch.sum(p.double() ** 2) for p in params)))
    radius = diameter / 2
    if norm > radius:
        margin = 4 * max(torch.finfo(p.dtype).eps for p in params)
        shrink = radius * (1.0 - margin) / norm
        for p in params:
            p.mul_(shrink)


def _check_matches(optimizer: ProjectedNoisySGD, accountant, changed: bool = False) -> None:
    """Raise ParameterError unless the accountant describes this optimizer (``changed``: at a
    step, after the two agreed when the accountant was attached)."""
    if not isinstance(accountant, PNSGDAccountant):
        raise ParameterError("accountant", accountant, "a PNSGDAccountant or None",
                             "create it with make_pnsgd_accountant(optimizer, dataset_size)")
    if accountant.noise != "gaussian":
        raise ParameterError("accountant.noise", accountant.noise, "'gaussian'",
                             "ProjectedNoisySGD adds Gaussian noise")
    pairs = (("lipschitz", "max_grad_norm"), ("diameter", "diameter"),
             ("learning_rate", "lr"))
    for ours, theirs in pairs:
        value, expected = getattr(accountant, ours), getattr(optimizer, theirs)
        if value != expected:
            hint = ("the optimizer's constants changed after its accountant was attached; the "
                    "accountant describes the run with the constants it was made with: create a "
                    "new optimizer and accountant to change them" if changed else
                    "create it with make_pnsgd_accountant(optimizer, dataset_size)")
            raise ParameterError(f"accountant.{ours}", value,
                                 f"equal to the optimizer's {theirs} = {expected!r}", hint)


def make_pnsgd_accountant(optimizer: ProjectedNoisySGD, dataset_size: int, *,
                          variant: str = "shuffled", smoothness: Optional[float] = None,
                          attach: bool = True) -> PNSGDAccountant:
    """The :class:`PNSGDAccountant` for ``optimizer``: ``lipschitz = max_grad_norm``,
    ``diameter = diameter``, ``learning_rate = lr``, Gaussian noise, one pass = ``dataset_size``
    steps.  ``smoothness`` (beta) lets the accountant check ``lr <= 2 / beta``.  With ``attach``
    (default) the accountant is attached to the optimizer, which then records every step.

    Example::

        >>> import torch
        >>> opt = ProjectedNoisySGD([torch.zeros(2, requires_grad=True)], lr=0.1,
        ...                         noise_multiplier=1.0, max_grad_norm=1.0, diameter=2.0)
        >>> acc = make_pnsgd_accountant(opt, dataset_size=50)
        >>> (acc.lipschitz, acc.diameter, acc.learning_rate, opt.accountant is acc)
        (1.0, 2.0, 0.1, True)
    """
    if not isinstance(optimizer, ProjectedNoisySGD):
        raise ParameterError("optimizer", optimizer, "a ProjectedNoisySGD")
    if attach and optimizer.accountant is not None:
        raise ParameterError("optimizer", optimizer, "an optimizer without an accountant",
                             "it already records its steps; pass attach=False for a copy")
    accountant = PNSGDAccountant(lipschitz=optimizer.max_grad_norm,
                                 diameter=optimizer.diameter, learning_rate=optimizer.lr,
                                 dataset_size=dataset_size, variant=variant,
                                 smoothness=smoothness)
    if attach:
        optimizer.accountant = accountant
    return accountant


def shuffled_order(n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A fresh uniform random permutation of ``0..n-1`` (one pass of shuffled PNSGD; call it
    again for every pass).

    Example::

        >>> sorted(shuffled_order(5, torch.Generator().manual_seed(1)).tolist())
        [0, 1, 2, 3, 4]
    """
    n = check_count("n", n, minimum=1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ParameterError("generator", generator, "a torch.Generator or None")
    return torch.randperm(n, generator=generator)
