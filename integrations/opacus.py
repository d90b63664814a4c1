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

Random allocation (``balls_and_bins``).  The accountant needs no options, but its guarantee holds
only for the protocol it describes: every example in exactly one uniformly random step of each
epoch, all examples of a step summed, one noise draw per step, empty steps released as noise-only
steps (never skipped: under add/remove the number of released steps would depend on the data).
Our sampler for it is ``RandomCheckIn(n, num_slots=t, checkin_probability=1.0,
variant="averaged")`` without ``max_batch_size`` (a cap would let an added example push another
one out of its step); :func:`make_data_loader` turns its empty slots into zero-length batches, on
which Opacus' optimizer adds the noise alone.  Call :func:`attach` after ``make_private``: it
checks the sampler (:func:`check_sampler`) and the step hook then checks Opacus' sample rate
against ``1 / num_slots``; training with this accountant without :func:`attach` warns once.

Gradient accumulation.  Opacus adds the noise once per ``optimizer.step()`` to the clipped
gradients of every physical batch since the last ``zero_grad`` (``optim.accumulated_iterations``
of them), so one *logical* step is the union of ``k`` consecutive physical batches.  For the
accountants whose guarantee is per pass of a sampler (``shuffle``, ``checkin``,
``balls_and_bins``) the step hook learns ``k`` from the optimizer on the first step (no second
source of truth), re-describes the sampler's protocol in logical batches
(:func:`logical_sampler`), configures the accountant with it and records one logical step per
optimizer step (sample rate ``1 / logical steps per pass``).
Every later step must follow :func:`accumulation_plan` -- ``k`` batches per step and, when ``k``
does not divide the batches per pass, the remaining ``r`` at the end of each pass -- otherwise
the hook raises :class:`~dpplugins.errors.ParameterError` (a step that mixes two passes, or a
changed ``k``, is not a protocol these accountants describe).  What is supported:

* ``ShuffledEpochs(n, b)`` -> ``ShuffledEpochs(n, k b)``, ``ceil(T / k)`` logical steps per
  epoch (with ``drop_last=True`` only when ``k`` divides ``T``);
* ``RandomCheckIn`` with ``checkin_probability=1`` and ``k`` dividing ``num_slots`` ->
  the averaged protocol (Balle et al. 2020, Alg. 2 / Thm 4.1) with ``num_slots / k`` slots; for
  ``balls_and_bins`` (uncapped averaged sampler) the merged steps are exactly random allocation
  into ``num_slots / k`` steps;
* not supported (refused): check-ins with ``checkin_probability < 1``, the sliding window, and
  any accumulation with ``swap`` / ``pnsgd`` (one example per noisy step).

Poisson sampling with accumulation (``pld``, ``fdp``).  Opacus' own hook records ``k`` Poisson
batches merged into one step as one step at rate ``k q``, which under-reports: an example can be
in several of the ``k`` batches, so the merged step is not a Poisson subsample at rate ``k q``
with sensitivity 1.  Our adapters record ``k`` steps ``(sigma / sqrt(k), q)`` instead: the merged
step (sum of the clipped gradients of ``k`` independent Poisson batches plus one
``N(0, sigma^2 C^2 I)``) has the law of the sum of ``k`` independent Poisson-subsampled Gaussian
steps with noise ``N(0, sigma^2 C^2 / k I)`` each, so it is a post-processing of their
composition (post-processing and composition: Dwork & Roth 2014, Prop. 2.1 and Thm 3.16).  With
Opacus' ``rdp``/``prv``/``gdp`` we cannot change what is recorded; :func:`attach` given the
optimizer warns once when such an accountant sees accumulated Poisson batches.  (Opacus'
``make_private(poisson_sampling=True)`` itself refuses accumulation; it happens with a Poisson
``DPDataLoader`` passed with ``poisson_sampling=False``.)
"""

from __future__ import annotations

import warnings
from typing import Any

from dpplugins.accountants import available, create, get_class
from dpplugins.errors import ParameterError, check_count

__all__ = ["register", "configure", "attach", "check_sampler", "valid_accountants",
           "is_random_allocation", "make_data_loader", "torch_batch_sampler",
           "make_private_pnsgd", "logical_sampler", "accumulation_plan",
           "poisson_accumulation_noise", "steps_for_epochs", "OURS", "DPPluginsAccountant"]

#: registry names of our accountants that Opacus users can pass to PrivacyEngine
OURS: tuple[str, ...] = ()
_ORIGINAL_GET_NOISE_MULTIPLIER = None
_MIN_OPACUS = (1, 5)
#: our accountants whose guarantee is per pass of a sampler: the step hook records logical steps
_PASS_ACCOUNTANTS = frozenset({"shuffle", "checkin", "balls_and_bins"})
#: our accountants whose theorem needs one example per noisy step (no accumulation)
_ONE_EXAMPLE_PER_STEP = frozenset({"swap", "pnsgd"})
#: our Poisson-sampling accountants: k accumulated batches are recorded as k steps (sigma/sqrt(k))
_POISSON_ACCOUNTANTS = frozenset({"pld", "fdp"})
#: our accountants whose guarantee depends on a sampler that only attach() can check
_NEEDS_ATTACH = frozenset({"balls_and_bins"})
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
        self._attached = False      # attach() has checked the data loader
        self._warned_unattached = False
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

    def step(self, *, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        """Record ``count`` steps (Opacus' interface has no ``count``; it defaults to 1)."""
        if self.inner is None:
            from dpplugins.accountants import validate_history
            self._pending = validate_history(self._pending
                                             + [(noise_multiplier, sample_rate, count)])
        else:
            self.inner.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate,
                            count=count)

    def get_epsilon(self, delta: float, **kwargs: Any) -> float:
        if kwargs:
            raise TypeError(f"{self.mechanism()} accountant takes no options in get_epsilon, "
                            f"got {sorted(kwargs)}")
        return self._require().get_epsilon(delta)

    def get_optimizer_hook_fn(self, sample_rate: float):
        """Opacus' step hook.  Poisson accountants (``pld``, ``fdp``) record an optimizer step
        over ``k = accumulated_iterations`` batches as ``k`` steps ``(sigma / sqrt(k),
        sample_rate)`` (module docstring; not Opacus' ``(sigma, k sample_rate)``); ``swap`` and
        ``pnsgd`` refuse accumulation; ``shuffle``, ``checkin`` and ``balls_and_bins`` record one
        *logical* step per optimizer step (see the module docstring and :meth:`_logical_rate`).
        ``balls_and_bins`` warns once when it trains without :func:`attach`.

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
            if name in _NEEDS_ATTACH and not self._attached and not self._warned_unattached:
                self._warned_unattached = True
                warnings.warn(
                    f"the {name!r} accountant is training without "
                    "dpplugins.integrations.opacus.attach(privacy_engine, data_loader): its "
                    "epsilon holds only if every example is in exactly one uniformly random step "
                    "of each epoch (RandomCheckIn(n, num_slots, checkin_probability=1.0, "
                    "variant='averaged')) and empty steps are run; attach() checks the sampler",
                    UserWarning, stacklevel=2)
            sigma = optim.noise_multiplier
            if name in _PASS_ACCOUNTANTS:
                self.step(noise_multiplier=sigma,
                          sample_rate=self._logical_rate(optim, sample_rate, accumulated))
            elif name in _POISSON_ACCOUNTANTS and accumulated > 1:
                self.step(noise_multiplier=poisson_accumulation_noise(sigma, accumulated),
                          sample_rate=sample_rate, count=accumulated)
            else:
                self.step(noise_multiplier=sigma, sample_rate=sample_rate * accumulated)

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


def steps_for_epochs(epochs: float, sample_rate: float) -> int:
    """Steps in ``epochs`` epochs at ``sample_rate = 1 / steps per epoch``, never too few.

    Opacus computes ``int(epochs / sample_rate)``, which floating point can put one below the
    steps actually run (``int(1 / (1 / 93)) == 92``), so a noise multiplier calibrated for it
    misses the target.  Here a quotient within ``1e-9`` (relative) of an integer is that
    integer, and any other is rounded up (a partial last epoch is run to its end or stopped;
    counting it in full is the conservative choice).

    Example::

        >>> steps_for_epochs(1, 1 / 93)
        93
    """
    import math

    quotient = epochs / sample_rate
    nearest = round(quotient)
    if abs(quotient - nearest) <= 1e-9 * max(1.0, quotient):
        return max(1, int(nearest))
    return max(1, math.ceil(quotient))


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
        steps = steps_for_epochs(epochs, sample_rate)
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


#: which accountants are valid for which sampling scheme (``balls_and_bins`` only for
#: :func:`is_random_allocation` samplers, see :func:`valid_accountants`)
_VALID_FOR = {"poisson": {"pld", "fdp", "rdp", "gdp", "prv"},
              "shuffled_epochs": {"shuffle", "swap", "pnsgd"},
              "random_checkin": {"checkin", "balls_and_bins"},
              "sliding_window": {"checkin"}}
#: listed first in warnings: the tightest valid accountant of a scheme
_PREFERRED = ("balls_and_bins", "pld", "shuffle", "checkin")


def is_random_allocation(sampler) -> bool:
    """True when ``sampler`` is the protocol of the ``balls_and_bins`` accountant: a
    ``RandomCheckIn`` with ``checkin_probability == 1`` (every example in exactly one uniformly
    random slot), ``variant="averaged"`` (every example of a slot is used) and no binding
    ``max_batch_size`` (no example is ever dropped from its slot)."""
    return (getattr(sampler, "scheme", None) == "random_checkin"
            and sampler.checkin_probability == 1.0 and sampler.variant == "averaged"
            and sampler.max_batch_size >= sampler.num_examples)


def _loader_sampler_and_scheme(data_loader):
    """(our sampler or None, scheme) of a data loader: our samplers declare their ``scheme``,
    Opacus' ``DPDataLoader`` is Poisson, any other loader is taken to be shuffled batches."""
    from opacus.data_loader import DPDataLoader

    batch_sampler = getattr(data_loader, "batch_sampler", None)
    scheme = getattr(batch_sampler, "scheme", None)
    if scheme is None:
        scheme = "poisson" if isinstance(data_loader, DPDataLoader) else "shuffled_epochs"
        return None, scheme
    return getattr(batch_sampler, "inner", batch_sampler), scheme


def valid_accountants(data_loader) -> tuple[str, ...]:
    """Registry names of the accountants whose guarantee covers ``data_loader``'s sampling,
    tightest first (``balls_and_bins`` only for :func:`is_random_allocation` samplers)."""
    sampler, scheme = _loader_sampler_and_scheme(data_loader)
    valid = set(_VALID_FOR.get(scheme, set()))
    if scheme == "random_checkin" and not is_random_allocation(sampler):
        valid.discard("balls_and_bins")
    order = {name: i for i, name in enumerate(_PREFERRED)}
    return tuple(sorted(valid, key=lambda name: (order.get(name, len(order)), name)))


def _allocation_mismatch(sampler) -> str:
    """Why a random check-in ``sampler`` is not random allocation (``balls_and_bins``)."""
    reasons = []
    if sampler.checkin_probability != 1.0:
        reasons.append(f"checkin_probability={sampler.checkin_probability:g} (it accounts for "
                       "every example taking part: 1.0)")
    if sampler.variant != "averaged":
        reasons.append(f"variant={sampler.variant!r} keeps one example per slot, so adding an "
                       "example can replace another (use variant='averaged')")
    elif sampler.max_batch_size < sampler.num_examples:
        reasons.append(f"max_batch_size={sampler.max_batch_size} drops examples from full "
                       "slots, so adding an example can push another out (use no cap)")
    return "; ".join(reasons)


def check_sampler(accountant_name: str, data_loader) -> None:
    """Warn once when an accountant is used with a loader whose sampling it does not describe,
    naming the valid ones (:func:`valid_accountants`); e.g. a Poisson accountant with
    ``poisson_sampling=False`` or with one of our samplers.

    Opacus' ``DPDataLoader`` (``poisson_sampling=True``) is Poisson; our samplers declare their
    ``scheme``; any other loader is taken to be shuffled fixed-size batches.  A check-in
    accountant (``checkin``, ``balls_and_bins``) with a Poisson loader raises, because its
    guarantee would not apply.  ``balls_and_bins`` with a check-in sampler that is not random
    allocation (:func:`is_random_allocation`) warns with the reason.
    """
    sampler, scheme = _loader_sampler_and_scheme(data_loader)
    valid = valid_accountants(data_loader)
    if accountant_name in valid:
        return
    if scheme == "poisson" and accountant_name in _VALID_FOR["random_checkin"]:
        raise ValueError(f"the {accountant_name!r} accountant assumes random check-ins, but the "
                         "data loader samples Poisson batches; use accountant='pld'")
    right = ", ".join(name for name in valid if name not in ("swap", "pnsgd")) \
        or "none available yet"
    if scheme == "shuffled_epochs":
        right += " (swap or pnsgd when every step uses a single example)"
    why = ""
    if accountant_name == "balls_and_bins" and scheme == "random_checkin":
        why = f" ({sampler!r}: {_allocation_mismatch(sampler)})"
    warnings.warn(f"accountant {accountant_name!r} is not valid for a {scheme} data loader{why}; "
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
    if name == "balls_and_bins" and is_random_allocation(sampler):
        return {}  # the protocol is all in the history: sample rate 1 / num_slots
    return None


def attach(privacy_engine, data_loader, optimizer=None) -> None:
    """One-line hook-up after ``make_private``: give our accountant the protocol parameters of
    the loader's sampler (no second source of truth) and check that the accountant is valid for
    the sampler (:func:`check_sampler`).  Options of the accountant that do not describe the
    protocol (e.g. ``lower_bound``) are kept.  With gradient accumulation the accountant is
    re-described in logical batches on the first optimizer step (module docstring); every step
    checks Opacus' sample rate against ``1 / len(sampler)``.

    ``optimizer`` (the ``DPOptimizer`` from ``make_private``, optional): with one of Opacus' own
    accountants and a Poisson loader, a step hook is chained (through Opacus' public
    ``attach_step_hook``) that warns once when an optimizer step accumulates several Poisson
    batches, which Opacus records as one step at rate ``k q`` (module docstring).

    Example::

        model, optimizer, loader = privacy_engine.make_private(
            module=model, optimizer=optimizer, noise_multiplier=1.0, max_grad_norm=1.0,
            data_loader=make_data_loader(dataset, RandomCheckIn(len(dataset), 100,
                                                                variant="averaged")),
            poisson_sampling=False)
        attach(privacy_engine, loader)   # PrivacyEngine(accountant="balls_and_bins")
    """
    accountant = privacy_engine.accountant
    name = accountant.mechanism()
    sampler, scheme = _loader_sampler_and_scheme(data_loader)
    ours = isinstance(accountant, DPPluginsAccountant)
    if ours and sampler is not None and _protocol_options(name, sampler) is not None:
        accountant._sampler = sampler
        accountant._apply_protocol()
    check_sampler(name, data_loader)
    if ours:
        accountant._attached = True
    elif optimizer is not None and scheme == "poisson":
        _warn_on_poisson_accumulation(optimizer, name)


def _warn_on_poisson_accumulation(optimizer, accountant_name: str) -> None:
    """Chain a step hook on ``optimizer`` that warns once when Opacus' accountant
    ``accountant_name`` records an optimizer step over several accumulated Poisson batches."""
    previous = getattr(optimizer, "step_hook", None)
    if getattr(previous, "_dpplugins_poisson_watch", False):
        return  # already watching

    def hook(optim) -> None:
        accumulated = int(optim.accumulated_iterations)
        if accumulated > 1 and not hook.warned:
            hook.warned = True
            warnings.warn(
                f"Opacus' {accountant_name!r} accountant records this optimizer step over "
                f"{accumulated} accumulated Poisson batches as one step at sample rate "
                f"{accumulated} * q, which may under-report the privacy loss (an example can be "
                f"in several of the batches); use accountant='pld' (dpplugins), which records "
                f"{accumulated} steps with noise multiplier sigma / sqrt({accumulated})",
                UserWarning, stacklevel=2)
        if previous is not None:
            previous(optim)

    hook.warned = False
    hook._dpplugins_poisson_watch = True
    optimizer.attach_step_hook(hook)


# -- gradient accumulation -------------------------------------------------------------------
def poisson_accumulation_noise(noise_multiplier: float, accumulation: int) -> float:
    """Noise multiplier ``sigma / sqrt(k)`` of each of the ``k`` Poisson steps whose composition
    dominates one optimizer step over ``k`` accumulated Poisson batches with noise multiplier
    ``sigma``: the step's output, ``sum of the k batches' clipped gradients + N(0, sigma^2 C^2
    I)``, has the law of the sum of ``k`` independent steps ``batch_i sum + N(0, sigma^2 C^2 / k
    I)``, a post-processing of their composition (Dwork & Roth 2014, Prop. 2.1).  The result
    is rounded down by one ulp (floating point never lowers the accounted noise); ``k = 1``
    returns ``sigma`` unchanged.

    Example::

        >>> round(poisson_accumulation_noise(1.0, 4), 12)
        0.5
    """
    import math

    from dpplugins.errors import check_positive
    sigma = check_positive("noise_multiplier", noise_multiplier)
    k = check_count("accumulation", accumulation, minimum=1)
    return sigma if k == 1 else math.nextafter(sigma / math.sqrt(k), 0.0)


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
      variant, one example per slot).  For the ``balls_and_bins`` accountant the sampler is
      uncapped and averaged (:func:`is_random_allocation`), the logical step sums *every*
      example of its ``k`` slots, and the logical protocol is exactly random allocation into
      ``m / k`` steps (the logical sampler is again uncapped).  Refused:
      ``checkin_probability < 1`` (Thm 4.1 needs every client to check in, and Thm 3.2 covers
      one example per step), ``k`` not dividing ``m`` (the last logical slot would be less
      likely than the others, not a uniform check-in).
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
