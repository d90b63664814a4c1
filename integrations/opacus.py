"""Opacus integration: our accountants by registry name in ``PrivacyEngine(accountant=...)``.

Usage (the only change to an existing Opacus script)::

    from dpplugins.integrations.opacus import register
    register()                                    # once, before creating the engine
    privacy_engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = privacy_engine.make_private_with_epsilon(..., target_epsilon=3)
    privacy_engine.get_epsilon(delta=1e-5)        # certified upper bound

``register()`` adds an adapter (a subclass of ``opacus.accountants.IAccountant``) for every
accountant in :func:`dpplugins.accountants.available` through Opacus' own
``register_accountant``, which ``PrivacyEngine``, ``get_noise_multiplier`` and
``make_private_with_epsilon`` all read.  Opacus' ``rdp``, ``gdp`` and ``prv`` are left untouched.
Where Opacus asks for a noise multiplier for one of our accountants (``make_private_with_epsilon``,
``opacus.accountants.utils.get_noise_multiplier``) our calibration is used
(:func:`dpplugins.calibration.find_noise_multiplier`: Brent's method, result verified <= target).

Opacus calls accountants with no constructor arguments, so adapters are created with our
defaults; accountants that need protocol parameters get them with :func:`configure`.
"""

from __future__ import annotations

import warnings
from typing import Any

from dpplugins.accountants import available, create, get_class

__all__ = ["register", "configure", "attach", "check_sampler", "make_data_loader",
           "torch_batch_sampler", "make_private_pnsgd", "OURS", "DPPluginsAccountant"]

#: registry names of our accountants that Opacus users can pass to PrivacyEngine
OURS: tuple[str, ...] = ()
_ORIGINAL_GET_NOISE_MULTIPLIER = None
_MIN_OPACUS = (1, 5)


def _opacus():
    try:
        import opacus
        from opacus import accountants
    except ImportError as error:
        raise ImportError("the Opacus integration needs opacus: pip install 'dpplugins[opacus]' "
                          "(install torch==2.13.0 first on CPU machines)") from error
    version = tuple(int(p) for p in opacus.__version__.split(".")[:2] if p.isdigit())
    if version < _MIN_OPACUS or not hasattr(accountants, "register_accountant"):
        raise ImportError(f"opacus {opacus.__version__} has no accountant registry; "
                          f"dpplugins needs opacus >= {'.'.join(map(str, _MIN_OPACUS))}")
    return opacus


class DPPluginsAccountant:
    """Mixin that makes one of our accountants speak Opacus' ``IAccountant`` interface.

    The concrete classes are built by :func:`register` as ``(DPPluginsAccountant, IAccountant)``
    subclasses with ``_dpplugins_name`` set; the wrapped accountant is ``self.inner``.
    """

    _dpplugins_name = ""

    def __init__(self, **options: Any) -> None:
        # Opacus creates accountants with no arguments; accountants that need protocol
        # parameters (shuffle: batch_size, checkin: the protocol) wait for configure()/attach()
        from dpplugins.errors import ParameterError
        self._pending: list = []
        try:
            self.inner = create(self._dpplugins_name, **options)
            self._missing = None
        except (ParameterError, TypeError) as error:  # TypeError: required options missing
            self.inner = None
            self._missing = error

    def _require(self):
        if self.inner is None:
            raise ValueError(
                f"the {self._dpplugins_name!r} accountant needs protocol parameters "
                f"({self._missing}); call dpplugins.integrations.opacus.attach(privacy_engine, "
                f"data_loader) after make_private, or configure(privacy_engine.accountant, ...)")
        return self.inner

    # Opacus' history is our history (Opacus' get_noise_multiplier assigns to it)
    @property
    def history(self):
        return self._pending if getattr(self, "inner", None) is None else self.inner.history

    @history.setter
    def history(self, value) -> None:
        from dpplugins.accountants import validate_history
        if getattr(self, "inner", None) is None:
            self._pending = validate_history(value)
        else:
            self.inner.history = value

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        if self.inner is None:
            from dpplugins.accountants import validate_history
            self._pending = validate_history(self._pending + [(noise_multiplier, sample_rate, 1)])
        else:
            self.inner.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate)

    def get_epsilon(self, delta: float, **kwargs: Any) -> float:
        if kwargs:
            raise TypeError(f"{self.mechanism()} accountant takes no options in get_epsilon, "
                            f"got {sorted(kwargs)}")
        return self._require().get_epsilon(delta)

    def get_optimizer_hook_fn(self, sample_rate: float):
        """Opacus' step hook (records ``sample_rate * accumulated_iterations``), plus: a
        ``shuffle`` accountant that was created without a batch size takes it from the optimizer
        on the first step, so ``PrivacyEngine(accountant="shuffle")`` needs nothing else.

        Opacus only knows ``expected_batch_size = int(N / steps_per_epoch)``, which is at most
        the real batch size; a smaller batch size keeps the shuffle bounds valid (the upper bound
        is the same for every batch size above 1, and the lower bound assumes a smaller chance
        that the example is used).  When that number is 1 we use 2, i.e. no amplification (call
        :func:`attach` with the real sampler to get the batch-size-1 amplification).
        """
        def hook_fn(optim) -> None:
            if self.inner is None and self._dpplugins_name == "shuffle":
                configure(self, batch_size=max(2, int(optim.expected_batch_size)))
            self.step(noise_multiplier=optim.noise_multiplier,
                      sample_rate=sample_rate * optim.accumulated_iterations)

        return hook_fn

    def get_epsilon_bounds(self, delta: float):
        """Certified (lower, upper) epsilon bounds (our extension of Opacus' interface)."""
        return self._require().get_epsilon_bounds(delta)

    def __len__(self) -> int:
        return sum(h[2] for h in self.history)

    @classmethod
    def mechanism(cls) -> str:
        return cls._dpplugins_name

    def state_dict(self, destination=None):
        """Opacus' keys (``history``, ``mechanism``) plus our options and version."""
        state = {} if destination is None else destination
        ours = self._require().state_dict()
        state["history"] = [tuple(entry) for entry in ours["history"]]
        state["mechanism"] = self.mechanism()
        state["dpplugins"] = {"options": ours["options"], "version": ours["version"]}
        return state

    def load_state_dict(self, state_dict) -> None:
        if not state_dict or "history" not in state_dict:
            raise ValueError("state_dict has no 'history'; it cannot be loaded into the "
                             f"{self.mechanism()} accountant")
        if state_dict.get("mechanism", self.mechanism()) != self.mechanism():
            raise ValueError(f"state_dict of {state_dict['mechanism']} cannot be loaded into "
                             f"the {self.mechanism()} accountant")
        extra = state_dict.get("dpplugins", {})
        if extra.get("options") and (self.inner is None or extra["options"] != self.inner.options()):
            self.inner = create(self._dpplugins_name, **extra["options"])
        self.history = [tuple(entry) for entry in state_dict["history"]]


def configure(accountant, **options: Any) -> None:
    """Re-create the wrapped accountant of an Opacus adapter with ``options`` (keeps history),
    e.g. ``configure(privacy_engine.accountant, eps_tolerance=1e-4)``."""
    if not isinstance(accountant, DPPluginsAccountant):
        raise TypeError(f"{type(accountant).__name__} is not a dpplugins accountant")
    history = list(accountant.history)
    accountant.inner = create(accountant.mechanism(), **options)
    accountant.inner.history = history


def _get_noise_multiplier(*, target_epsilon, target_delta, sample_rate, epochs=None, steps=None,
                          accountant="rdp", epsilon_tolerance=0.01, **kwargs):
    """Opacus' ``get_noise_multiplier`` signature; our accountants use our calibration."""
    if accountant not in OURS:
        return _ORIGINAL_GET_NOISE_MULTIPLIER(
            target_epsilon=target_epsilon, target_delta=target_delta, sample_rate=sample_rate,
            epochs=epochs, steps=steps, accountant=accountant,
            epsilon_tolerance=epsilon_tolerance, **kwargs)
    if (steps is None) == (epochs is None):
        raise ValueError("get_noise_multiplier takes as input EITHER a number of steps or a "
                         "number of epochs")
    if steps is None:
        steps = int(epochs / sample_rate)
    from dpplugins.calibration import find_noise_multiplier
    # Opacus passes no protocol parameters; for shuffled epochs calibrate on the bound that holds
    # for every batch size above 1 (no amplification), which is valid for the real batch size
    options = {"batch_size": 2} if accountant == "shuffle" else {}
    return find_noise_multiplier(target_epsilon=target_epsilon, delta=target_delta,
                                 sample_rate=sample_rate, steps=steps, accountant=accountant,
                                 **options)


def register() -> tuple[str, ...]:
    """Register our accountants with Opacus (idempotent); returns the names registered."""
    global OURS, _ORIGINAL_GET_NOISE_MULTIPLIER
    _opacus()
    from opacus import privacy_engine
    from opacus.accountants import IAccountant, registry, utils

    names = []
    for name in available():
        existing = registry._ACCOUNTANTS.get(name)
        if existing is not None and not issubclass(existing, DPPluginsAccountant):
            continue  # never shadow Opacus' own accountants
        if existing is None:
            cls = type(f"Opacus{get_class(name).__name__}", (DPPluginsAccountant, IAccountant),
                       {"_dpplugins_name": name, "__doc__": get_class(name).__doc__})
            registry.register_accountant(name, cls)
        names.append(name)
    OURS = tuple(names)
    if _ORIGINAL_GET_NOISE_MULTIPLIER is None:
        _ORIGINAL_GET_NOISE_MULTIPLIER = utils.get_noise_multiplier
        # privacy_engine imported the function by name; point both places at the dispatcher
        utils.get_noise_multiplier = _get_noise_multiplier
        privacy_engine.get_noise_multiplier = _get_noise_multiplier
    return OURS


#: which accountants are valid for which sampling scheme
_VALID_FOR = {"poisson": {"pld", "fdp", "rdp", "gdp", "prv"},
              "shuffled_epochs": {"shuffle", "swap", "pnsgd"},
              "random_checkin": {"checkin", "balls_and_bins"},
              "sliding_window": {"checkin"}}


def check_sampler(accountant_name: str, data_loader) -> None:
    """Warn once when a Poisson accountant is used with a loader that does not sample Poisson.

    Opacus' ``DPDataLoader`` (``poisson_sampling=True``) is Poisson; our samplers declare their
    ``scheme``; any other loader is taken to be shuffled fixed-size batches.  A check-in
    accountant with a Poisson loader raises, because its guarantee would not apply.
    """
    from opacus.data_loader import DPDataLoader

    sampler = getattr(data_loader, "batch_sampler", None)
    scheme = getattr(sampler, "scheme", None)
    if scheme is None:
        scheme = "poisson" if isinstance(data_loader, DPDataLoader) else "shuffled_epochs"
    valid = _VALID_FOR.get(scheme, set())
    if accountant_name in valid:
        return
    if scheme == "poisson" and accountant_name in _VALID_FOR["random_checkin"]:
        raise ValueError(f"the {accountant_name!r} accountant assumes random check-ins, but the "
                         "data loader samples Poisson batches; use accountant='pld'")
    right = ", ".join(sorted(valid - {"swap", "pnsgd"})) or "none available yet"
    if scheme == "shuffled_epochs":
        right += " (swap or pnsgd when every step uses a single example)"
    warnings.warn(f"accountant {accountant_name!r} is not valid for a {scheme} data loader; "
                  f"its epsilon is not a guarantee for this training. Valid: {right}",
                  UserWarning, stacklevel=2)


# -- samplers ---------------------------------------------------------------------------------
def torch_batch_sampler(sampler):
    """A ``torch.utils.data.Sampler`` of index lists over one of our samplers
    (:mod:`dpplugins.samplers`): ``len`` = steps per epoch, ``scheme`` is passed through, and an
    empty step (a check-in dummy update) is an empty list."""
    import torch

    class _BatchSampler(torch.utils.data.Sampler):
        def __init__(self, inner):
            self.inner = inner
            self.scheme = inner.scheme

        def __len__(self) -> int:
            return len(self.inner)

        def __iter__(self):
            for batch in self.inner:
                yield [int(i) for i in batch]

    return _BatchSampler(sampler)


def make_data_loader(dataset, sampler, *, collate_fn=None, **loader_options):
    """A ``DataLoader`` that draws its batches from one of our samplers, for
    ``make_private(..., poisson_sampling=False)``.  Empty batches (dummy updates) become
    zero-length tensors shaped like the dataset's items, so Opacus adds noise only."""
    import torch
    from opacus.data_loader import wrap_collate_with_empty
    from torch.utils.data.dataloader import default_collate

    if len(dataset) != sampler.num_examples:
        from dpplugins.errors import ParameterError
        raise ParameterError("sampler.num_examples", sampler.num_examples,
                             f"equal to len(dataset) = {len(dataset)}")
    first = dataset[0]
    items = first if isinstance(first, (tuple, list)) else (first,)
    shapes = [(0, *torch.as_tensor(x).shape) for x in items]  # zero-length batch per item
    dtypes = [torch.as_tensor(x).dtype for x in items]
    wrapped = wrap_collate_with_empty(collate_fn=collate_fn or default_collate,
                                      sample_empty_shapes=shapes, dtypes=dtypes)
    return torch.utils.data.DataLoader(dataset, batch_sampler=torch_batch_sampler(sampler),
                                       collate_fn=wrapped, **loader_options)


def attach(privacy_engine, data_loader) -> None:
    """One-line hook-up after ``make_private``: give our accountant the protocol parameters of
    the loader's sampler (no second source of truth) and check that the accountant is valid for
    the sampler (:func:`check_sampler`)."""
    accountant = privacy_engine.accountant
    name = accountant.mechanism()
    sampler = getattr(getattr(data_loader, "batch_sampler", None), "inner", None)
    if isinstance(accountant, DPPluginsAccountant) and sampler is not None:
        if name == "shuffle" and sampler.scheme == "shuffled_epochs":
            configure(accountant, batch_size=sampler.batch_size,
                      dataset_size=sampler.num_examples)
        elif name == "checkin" and sampler.scheme == "random_checkin":
            configure(accountant, num_examples=sampler.num_examples, variant=sampler.variant,
                      num_slots=sampler.num_slots,
                      checkin_probability=sampler.checkin_probability,
                      max_batch_size=(sampler.max_batch_size if sampler.variant == "averaged"
                                      else None))
        elif name == "checkin" and sampler.scheme == "sliding_window":
            configure(accountant, num_examples=sampler.num_examples, variant="sliding",
                      window=sampler.window)
    check_sampler(name, data_loader)


# -- PNSGD under Opacus ---------------------------------------------------------------------------
def make_private_pnsgd(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                       max_grad_norm: float, diameter: float, variant: str = "shuffled",
                       smoothness: float | None = None):
    """Projected noisy SGD with Opacus' per-sample gradients and the ``pnsgd`` accountant.

    The engine must have been created with ``PrivacyEngine(accountant="pnsgd")`` and the loader
    must give one example per step in a shuffled order (``batch_size=1, shuffle=True``).  Opacus
    clips the example's gradient to ``max_grad_norm`` (= L), adds ``N(0, (noise_multiplier L)^2)``
    and the wrapped SGD steps with its ``lr`` (= eta); after every step the parameters are
    projected onto the centred ball of diameter ``diameter`` (= D_K), which is the algorithm of
    :mod:`dpplugins.amplification.iteration`.  The accountant is configured from these same
    numbers (one source of truth).  Returns ``(module, optimizer, data_loader)`` like
    ``make_private``.
    """
    from dpplugins.errors import ParameterError
    from dpplugins.integrations.pnsgd import project_onto_ball

    if privacy_engine.accountant.mechanism() != "pnsgd":
        raise ParameterError("privacy_engine.accountant", privacy_engine.accountant.mechanism(),
                             "'pnsgd' (create the engine with PrivacyEngine(accountant='pnsgd'))")
    if data_loader.batch_size != 1:
        raise ParameterError("data_loader.batch_size", data_loader.batch_size,
                             "1 (PNSGD processes one example per step)")
    learning_rates = {group["lr"] for group in optimizer.param_groups}
    if len(learning_rates) != 1 or not isinstance(optimizer, __import__("torch").optim.SGD):
        raise ParameterError("optimizer", type(optimizer).__name__,
                             "torch.optim.SGD with one learning rate (the theory's eta)")
    module, optimizer, data_loader = privacy_engine.make_private(
        module=module, optimizer=optimizer, data_loader=data_loader,
        noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, poisson_sampling=False)
    configure(privacy_engine.accountant, lipschitz=max_grad_norm, diameter=diameter,
              learning_rate=learning_rates.pop(), dataset_size=len(data_loader.dataset),
              variant=variant, smoothness=smoothness)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    original_step = optimizer.step

    def step_then_project(*args, **kwargs):
        result = original_step(*args, **kwargs)
        project_onto_ball(params, diameter)
        return result

    optimizer.step = step_then_project
    return module, optimizer, data_loader
