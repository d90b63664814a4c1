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

Gradient accumulation.  Opacus adds the noise once per ``optimizer.step()`` to the clipped
gradients of every physical batch since the last ``zero_grad`` (``optim.accumulated_iterations``
of them), so one *logical* step is the union of ``k`` consecutive physical batches.  For the
accountants whose guarantee is per pass of a sampler (``shuffle``, ``checkin``) the step hook
learns ``k`` from the optimizer on the first step (no second source of truth), re-describes the
sampler's protocol in logical batches (:func:`logical_sampler`), configures the accountant with
it and records one logical step per optimizer step (sample rate ``1 / logical steps per pass``).
Every later step must follow :func:`accumulation_plan` -- ``k`` batches per step and, when ``k``
does not divide the batches per pass, the remaining ``r`` at the end of each pass -- otherwise
the hook raises :class:`~dpplugins.errors.ParameterError` (a step that mixes two passes, or a
changed ``k``, is not a protocol these accountants describe).  What is supported:

* ``ShuffledEpochs(n, b)`` -> ``ShuffledEpochs(n, k b)``, ``ceil(T / k)`` logical steps per
  epoch (with ``drop_last=True`` only when ``k`` divides ``T``);
* ``RandomCheckIn`` with ``checkin_probability=1`` and ``k`` dividing ``num_slots`` ->
  the averaged protocol (Balle et al. 2020, Alg. 2 / Thm 4.1) with ``num_slots / k`` slots;
* not supported (refused): check-ins with ``checkin_probability < 1``, the sliding window, and
  any accumulation with ``swap`` / ``pnsgd`` (one example per noisy step).

Poisson accountants keep Opacus' convention (``sample_rate * accumulated_iterations``).
"""

from __future__ import annotations

import warnings
from typing import Any

from dpplugins.accountants import available, create, get_class
from dpplugins.errors import ParameterError, check_count

__all__ = ["register", "configure", "attach", "check_sampler", "make_data_loader",
           "torch_batch_sampler", "make_private_pnsgd", "logical_sampler", "accumulation_plan",
           "OURS", "DPPluginsAccountant"]

#: registry names of our accountants that Opacus users can pass to PrivacyEngine
OURS: tuple[str, ...] = ()
_ORIGINAL_GET_NOISE_MULTIPLIER = None
_MIN_OPACUS = (1, 5)
#: our accountants whose guarantee is per pass of a sampler: the step hook records logical steps
_PASS_ACCOUNTANTS = frozenset({"shuffle", "checkin", "balls_and_bins"})
#: our accountants whose theorem needs one example per noisy step (no accumulation)
_ONE_EXAMPLE_PER_STEP = frozenset({"swap", "pnsgd"})
#: relative tolerance for "Opacus' sample_rate is 1 / (batches per pass)"
_RATE_TOLERANCE = 1e-9


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
        self._pending: list = []
        self._sampler = None        # our sampler, set by attach()
        self._accumulation = None   # physical batches per optimizer step, learned on step 1
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
        """Opacus' step hook.  Poisson accountants record ``sample_rate *
        accumulated_iterations`` (Opacus' convention); ``swap`` and ``pnsgd`` refuse
        accumulation; ``shuffle`` and ``checkin`` record one *logical* step per optimizer step
        (see the module docstring and :meth:`_logical_rate`).

        A ``shuffle`` accountant that knows no sampler takes its batch size from the optimizer on
        the first step, so ``PrivacyEngine(accountant="shuffle")`` needs nothing else: Opacus
        only knows ``expected_batch_size = int(N / steps_per_epoch)``, which is at most the real
        batch size; a smaller batch size keeps the shuffle bounds valid (the upper bound is the
        same for every batch size above 1, and the lower bound assumes a smaller chance that the
        example is used).  With accumulation the logical batch is ``k`` times that.  When the
        number is 1 we use 2, i.e. no amplification (call :func:`attach` with the real sampler
        to get the batch-size-1 amplification).
        """
        def hook_fn(optim) -> None:
            accumulated = int(optim.accumulated_iterations)
            name = self._dpplugins_name
            if name in _ONE_EXAMPLE_PER_STEP and accumulated != 1:
                raise ParameterError(
                    "optimizer.accumulated_iterations", accumulated,
                    f"1 for the {name!r} accountant (its theorem needs one example per noisy "
                    "step; an accumulated step adds one noise draw to several examples)",
                    hint="call optimizer.step() after every batch, or use accountant='shuffle'")
            rate = (self._logical_rate(optim, sample_rate, accumulated)
                    if name in _PASS_ACCOUNTANTS else sample_rate * accumulated)
            self.step(noise_multiplier=optim.noise_multiplier, sample_rate=rate)

        return hook_fn

    # -- gradient accumulation for per-pass accountants ---------------------------------------
    def _protocol_sampler(self):
        """The attached sampler, if its protocol is one this accountant describes."""
        if self._sampler is None or _protocol_options(self._dpplugins_name,
                                                      self._sampler) is None:
            return None
        return self._sampler

    def _reconfigure(self, protocol: dict) -> None:
        """Replace the protocol options of the wrapped accountant, keep its other options."""
        options = {} if self.inner is None else self.inner.options()
        options.update(protocol)
        configure(self, **options)

    def _apply_protocol(self) -> None:
        """Configure the wrapped accountant from the attached sampler's logical protocol."""
        sampler = self._protocol_sampler()
        if sampler is not None:
            logical = logical_sampler(sampler, self._accumulation or 1,
                                      name="optimizer.accumulated_iterations")
            self._reconfigure(_protocol_options(self._dpplugins_name, logical))

    def _physical_steps(self, sample_rate: float) -> int:
        """Physical batches per pass: ``len(sampler)``, checked against Opacus' sample rate
        (``1 / len(data_loader)``), or ``1 / sample_rate`` when no sampler is attached."""
        sampler = self._protocol_sampler()
        steps = len(sampler) if sampler is not None else round(1.0 / sample_rate)
        if steps < 1 or abs(steps * sample_rate - 1.0) > _RATE_TOLERANCE:
            raise ParameterError(
                "sample_rate", sample_rate,
                f"1/{steps} (1 / batches per pass, as make_private sets it from "
                "len(data_loader))", hint="pass attach() the loader that make_private returned")
        return steps

    def _learn_accumulation(self, accumulation: int, optim) -> None:
        """First step: fix ``k`` and describe the protocol in logical batches."""
        name = self._dpplugins_name
        if self._protocol_sampler() is not None:
            self._accumulation = accumulation
            try:
                if accumulation != 1:   # attach() already described the physical protocol
                    self._apply_protocol()
            except ParameterError:
                self._accumulation = None   # nothing learned; the step is not recorded
                raise
        elif name == "shuffle" and self.inner is None:
            configure(self, batch_size=max(2, accumulation * int(optim.expected_batch_size)))
            self._accumulation = accumulation
        elif accumulation != 1:
            raise ParameterError(
                "optimizer.accumulated_iterations", accumulation,
                f"1 for the {name!r} accountant unless it knows the sampler (it cannot tell "
                "whether its configured protocol describes physical or accumulated batches)",
                hint="call dpplugins.integrations.opacus.attach(privacy_engine, data_loader) "
                     "with one of our samplers before training")
        else:
            self._accumulation = 1

    def _logical_rate(self, optim, sample_rate: float, accumulated: int) -> float:
        """Check that this optimizer step follows :func:`accumulation_plan` and return the
        sample rate to record, ``1 / logical steps per pass``.

        The position in the pass is the number of logical steps recorded so far modulo the
        logical steps per pass -- the same assumption the accountants make when they cut the
        history into passes (every pass is run to its end).
        """
        physical = self._physical_steps(sample_rate)
        if self._accumulation is None:
            if accumulated > physical:
                raise ParameterError(
                    "optimizer.accumulated_iterations", accumulated,
                    f"at most {physical} (the batches of one pass): this step mixes two passes",
                    hint="call optimizer.step() at least once per pass (epoch)")
            self._learn_accumulation(accumulated, optim)
        plan = accumulation_plan(physical, self._accumulation)
        position = len(self) % len(plan)
        if accumulated != plan[position]:
            k, r = self._accumulation, physical % self._accumulation
            tail = f"; the last step of a pass takes the remaining {r}" if r else ""
            raise ParameterError(
                "optimizer.accumulated_iterations", accumulated,
                f"{plan[position]} at logical step {position + 1} of {len(plan)} of this pass "
                f"({physical} batches per pass, {k} per optimizer step as on the first "
                f"step{tail})",
                hint=f"call optimizer.step() (then zero_grad) after every k = {k} batches and "
                     "after the last batch of every pass, with the same k throughout; a step "
                     "that mixes batches of two passes is not the protocol the accountant "
                     "describes")
        return 1.0 / len(plan)

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
        state["dpplugins"] = {"options": ours["options"], "version": ours["version"],
                              "accumulation": self._accumulation}
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
        if "accumulation" in extra:   # the history counts logical steps of this many batches
            self._accumulation = extra["accumulation"]
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


def _protocol_options(name: str, sampler) -> dict | None:
    """Options of our accountant ``name`` that describe ``sampler``'s protocol (one source of
    truth), or None when that accountant does not describe this sampler's scheme."""
    scheme = getattr(sampler, "scheme", None)
    if name == "shuffle" and scheme == "shuffled_epochs":
        return dict(batch_size=sampler.batch_size, dataset_size=sampler.num_examples)
    if name == "checkin" and scheme == "random_checkin":
        return dict(num_examples=sampler.num_examples, variant=sampler.variant,
                    num_slots=sampler.num_slots, window=None,
                    checkin_probability=sampler.checkin_probability,
                    max_batch_size=(sampler.max_batch_size if sampler.variant == "averaged"
                                    else None))
    if name == "checkin" and scheme == "sliding_window":
        return dict(num_examples=sampler.num_examples, variant="sliding", num_slots=None,
                    window=sampler.window, checkin_probability=1.0, max_batch_size=None)
    return None


def attach(privacy_engine, data_loader) -> None:
    """One-line hook-up after ``make_private``: give our accountant the protocol parameters of
    the loader's sampler (no second source of truth) and check that the accountant is valid for
    the sampler (:func:`check_sampler`).  Options of the accountant that do not describe the
    protocol (e.g. ``lower_bound``) are kept.  With gradient accumulation the accountant is
    re-described in logical batches on the first optimizer step (module docstring)."""
    accountant = privacy_engine.accountant
    name = accountant.mechanism()
    sampler = getattr(getattr(data_loader, "batch_sampler", None), "inner", None)
    if isinstance(accountant, DPPluginsAccountant) and sampler is not None \
            and _protocol_options(name, sampler) is not None:
        accountant._sampler = sampler
        accountant._apply_protocol()
    check_sampler(name, data_loader)


# -- gradient accumulation -------------------------------------------------------------------
def accumulation_plan(physical_steps: int, accumulation: int) -> tuple[int, ...]:
    """Physical batches in each optimizer step of one pass when ``accumulation`` (k) batches
    are accumulated per step and the pass of ``physical_steps`` (T) batches ends with a step:
    ``floor(T/k)`` steps of k, then one of ``T mod k`` if that is not 0 -- ``ceil(T/k)`` steps.

    Example::

        >>> accumulation_plan(7, 2)
        (2, 2, 2, 1)
    """
    T = check_count("physical_steps", physical_steps, minimum=1)
    k = check_count("accumulation", accumulation, minimum=1)
    return (k,) * (T // k) + ((T % k,) if T % k else ())


def logical_sampler(sampler, accumulation: int, *, name: str = "accumulation"):
    """The sampler whose batches are the *logical* batches when ``accumulation`` (k) consecutive
    batches of ``sampler`` go into one noisy optimizer step (:func:`accumulation_plan`: the last
    step of a pass takes the remaining batches).  It describes the protocol for accounting; it
    is not used to draw batches.  Raises :class:`ParameterError` (naming ``name``) when the
    accumulated protocol is not one our accountants describe.

    * ``ShuffledEpochs(n, b)``: logical batch ``j`` is entries ``[j k b, (j+1) k b)`` of the
      epoch's permutation (consecutive physical batches of consecutive entries), which is
      ``ShuffledEpochs(n, k b)``; its ``ceil(n / (k b)) = ceil(ceil(n / b) / k)`` steps per
      epoch (nested ceilings, Graham, Knuth, Patashnik, *Concrete Mathematics*, eq. (3.11)) are
      ``len(accumulation_plan(T, k))``.  With ``drop_last=True`` this holds only when ``k``
      divides ``T = floor(n / b)``; otherwise the last logical batch has ``(T mod k) b``
      examples and ``n - T b`` are dropped, which is not a ``ShuffledEpochs`` pass: refused.
    * ``RandomCheckIn`` with ``checkin_probability = 1`` and ``k`` dividing ``m = num_slots``:
      an example's logical slot ``floor(slot / k)`` is uniform on ``m / k`` slots, and a logical
      step releases one noisy sum over the examples kept from its ``k`` slots -- a subset of the
      examples checked into the logical slot chosen independently of their data (the slots'
      uniform choice / random drop within the logical slot), i.e. a post-processing of the
      averaged protocol (Balle et al. 2020, Alg. 2, Thm 4.1; every client checks in) with
      ``m / k`` slots and at most ``k * max_batch_size`` examples per step (``k`` for the fixed
      variant, one example per slot).  Refused: ``checkin_probability < 1`` (Thm 4.1 needs every
      client to check in, and Thm 3.2 covers one example per step), ``k`` not dividing ``m``
      (the last logical slot would be less likely than the others, not a uniform check-in).
    * ``SlidingWindowCheckIn``: refused (Thm 4.3 covers one example per step in windows of
      slots; merged slots are neither).

    Example::

        >>> from dpplugins.samplers import ShuffledEpochs
        >>> logical_sampler(ShuffledEpochs(200, 32), 2).batch_size
        64
    """
    k = check_count(name, accumulation, minimum=1)
    if k == 1:
        return sampler
    from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

    steps = len(sampler)
    if sampler.scheme == "shuffled_epochs":
        if sampler.drop_last and steps % k:
            raise ParameterError(
                name, k, f"a divisor of the {steps} batches per epoch of {sampler!r} "
                "(with drop_last=True a shorter last accumulation is not a shuffled-epochs "
                "pass of larger batches)", hint="use drop_last=False or such a k")
        logical = ShuffledEpochs(sampler.num_examples, k * sampler.batch_size,
                                 drop_last=sampler.drop_last, rng=0)
    elif sampler.scheme == "random_checkin":
        if sampler.checkin_probability != 1.0:
            raise ParameterError(
                name, k, f"1 for {sampler!r}: a merged step holds up to {k} "
                "examples, which Thm 3.2 (one example per step) does not cover, and Thm 4.1 "
                "(averaged updates) needs checkin_probability = 1",
                hint="do not accumulate, or use checkin_probability=1.0")
        if steps % k:
            raise ParameterError(
                name, k, f"a divisor of num_slots={steps} (otherwise the last merged "
                "slot is less likely than the others: not a uniform check-in)",
                hint="choose num_slots as a multiple of the accumulation")
        logical = RandomCheckIn(sampler.num_examples, steps // k, checkin_probability=1.0,
                                variant="averaged", max_batch_size=k * sampler.max_batch_size,
                                rng=0)
    else:
        raise ParameterError(
            name, k, f"1 for {sampler!r} (Balle et al. 2020, Thm 4.3 covers one "
            "example per step; merged sliding-window slots are not that protocol)",
            hint="do not accumulate gradients with the sliding-window sampler")
    if len(logical) != len(accumulation_plan(steps, k)):  # pragma: no cover - identity above
        raise AssertionError(f"logical steps {len(logical)} != ceil({steps}/{k})")
    return logical


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
