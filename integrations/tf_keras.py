"""Keras side of the TF-Privacy integration: a callback that logs our epsilon after every epoch,
and tf.data pipelines that train with our samplers.

1. :class:`PrivacyCallback` records each finished epoch's DP-SGD steps in one of our accountants
   (:func:`dpplugins.accountants.create`) and writes epsilon into ``logs[log_key]``, so it lands in
   ``history.history[log_key]`` (and in a ``tf.summary`` writer when one is given)::

       from dpplugins.integrations.tf_keras import PrivacyCallback
       optimizer = tensorflow_privacy.DPKerasSGDOptimizer(l2_norm_clip=1.0,
                                                          noise_multiplier=1.1, learning_rate=0.1)
       model.compile(optimizer=optimizer, loss=loss_with_reduction_none)
       callback = PrivacyCallback(delta=1e-5, batch_size=256, num_examples=60000,
                                  sampler="shuffled_epochs")      # what Keras fit does
       history = model.fit(x, y, batch_size=256, epochs=3, callbacks=[callback])
       history.history["epsilon"]                                 # certified upper bounds

   With one of our samplers, pass the sampler object instead of a name; the callback then takes
   the dataset size, batch size and steps per epoch from it.  Random check-ins, for example::

       sampler = RandomCheckIn(60000, num_slots=600, checkin_probability=0.01)
       callback = PrivacyCallback(delta=1e-5, sampler=sampler)      # accountant "checkin"

   The callback composes each epoch's event (``sampler.event(noise_multiplier, 1)``; Poisson
   steps for ``"poisson"``) in the accountant, and any registered accountant that supports the
   event may be named (``create(name).supports(event)``).
       model.fit(as_tf_dataset(sampler, x, y, empty="dummy"), epochs=3, callbacks=[callback])

2. :func:`as_tf_dataset` turns one pass of a :class:`~dpplugins.samplers.ShuffledEpochs`,
   :class:`~dpplugins.samplers.RandomCheckIn` or :class:`~dpplugins.samplers.SlidingWindowCheckIn`
   schedule into a ``tf.data.Dataset`` of batches, so ``fit`` trains with the sampler the
   accountant assumes; empty check-in slots are kept, skipped or turned into dummy (noise-only)
   updates (``empty=``).

3. Non-finite examples.  One example whose gradient is not finite (an infinite or NaN input, a
   diverged loss) made TF-Privacy 0.9.0's noisy update NaN -- and only when that example was in
   the batch, so the released model showed whether it was sampled.  TF-Privacy's DP optimizers
   take per-example gradients from one backward pass over the batch, where such an example
   makes *every* example's gradient NaN, so it cannot be counted as zero alone (as our Opacus
   integration does); :func:`guard_non_finite` refuses such a step before it is applied, and
   :class:`PrivacyCallback` installs it on the model's TF-Privacy optimizer.

TensorFlow is imported when this module is imported (it is only importable as
``dpplugins.integrations.tf_keras``; the core never imports it).  Tested with TensorFlow 2.15.1 and
TF-Privacy 0.9.0.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import numpy as np

try:
    import tensorflow as tf
except ImportError as _error:  # pragma: no cover - exercised only without TensorFlow
    raise ImportError("the Keras integration needs TensorFlow: pip install tensorflow==2.15.1 "
                      "tensorflow-privacy==0.9.0") from _error

from dpplugins.accountants import create, supporting
from dpplugins.accountants.checkin import CheckInAccountant as _CoreCheckIn
from dpplugins.errors import ParameterError, check_choice, check_count, check_open_unit, \
    check_positive
from dpplugins.events import Event, GaussianEvent, PoissonSampledEvent
from dpplugins.samplers import ShuffledEpochs

__all__ = ["PrivacyCallback", "as_tf_dataset", "noise_multiplier_of", "guard_non_finite",
           "CALLBACK_SAMPLERS", "EMPTY_SLOTS"]

#: the samplers that may be given by name (the others carry their protocol: pass the object)
CALLBACK_SAMPLERS = ("poisson", "shuffled_epochs")
#: the accountant when ``accountant=None``: the first of these that supports the epoch's event
#: (then any registered accountant that does, in registry order)
_PREFERRED = ("pld", "shuffle", "checkin")
#: what ``as_tf_dataset`` does with empty check-in slots
EMPTY_SLOTS = ("keep", "skip", "dummy")


def noise_multiplier_of(optimizer: Any) -> float:
    """The noise multiplier of a TF-Privacy Keras DP optimizer (TF-Privacy 0.9.0).

    ``DPKerasSGDOptimizer`` (``make_keras_optimizer_class``) keeps no ``_noise_multiplier``; it
    adds Gaussian noise of standard deviation ``_dp_sum_query._stddev = l2_norm_clip *
    noise_multiplier`` (a ``GaussianSumQuery``), so the multiplier is ``_stddev / _l2_norm_clip``.
    The vectorized and sparse optimizers keep ``_noise_multiplier``.  Raises
    :class:`ParameterError` when the optimizer is not one of these.

    Example::

        >>> from tensorflow_privacy import DPKerasSGDOptimizer      # doctest: +SKIP
        >>> noise_multiplier_of(DPKerasSGDOptimizer(1.0, 1.1))      # doctest: +SKIP
        1.1
    """
    sigma = getattr(optimizer, "_noise_multiplier", None)
    if sigma is None:
        query = getattr(optimizer, "_dp_sum_query", None)
        stddev = getattr(query, "_stddev", None)
        clip = getattr(query, "_l2_norm_clip", None)
        if stddev is None or not clip:
            raise ParameterError("optimizer", type(optimizer).__name__,
                                 "a TF-Privacy Keras DP optimizer (e.g. DPKerasSGDOptimizer)",
                                 "or pass noise_multiplier= to PrivacyCallback")
        sigma = float(stddev) / float(clip)
    return check_positive("noise_multiplier", float(sigma))



# -- non-finite per-example gradients -----------------------------------------------------------
_NON_FINITE_MESSAGE = (
    "dpplugins: the noisy DP-SGD update of this step is not finite (an example with an infinite "
    "or NaN input, activation or loss); the step was refused before it was applied.  TF-Privacy's "
    "DP optimizers compute per-example gradients from one backward pass over the whole batch, so "
    "one such example makes every example's gradient NaN; fix the data (or the loss), or train "
    "with an Opacus model, where dpplugins counts such an example as zero")


def guard_non_finite(optimizer: Any) -> Any:
    """Make a TF-Privacy Keras DP optimizer refuse a step whose noisy update is not finite: the
    step raises ``tf.errors.InvalidArgumentError`` (from ``tf.debugging.assert_all_finite``)
    before the update is applied, so no NaN model is released.  Returns ``optimizer``.

    Why refuse instead of counting the example as zero: ``DPKerasSGDOptimizer`` and
    ``VectorizedDPKerasSGDOptimizer`` take per-example gradients as the Jacobian of the batch's
    losses (``tape.jacobian``), i.e. from one backward pass over the whole batch; for a weight
    ``W`` that pass computes ``X^T G_i`` for every example ``i``, and one non-finite row of ``X``
    gives ``0 * inf = NaN`` in every example's row.  Zeroing the non-finite rows would then zero
    the whole batch -- an update that depends on the other examples through the bad one, whose
    sensitivity is no longer the clipping norm.  Refusing releases no NaN model; training stops,
    and that halt itself shows that a sampled example was not finite, so fix the data (or the
    loss) before training again.  The guard is traced into the training step: call it before
    the first ``fit`` (:class:`PrivacyCallback` installs it at the start of every ``fit`` and
    has the training step traced again).  Finite steps are unchanged, bit for bit.

    Example::

        >>> from tensorflow_privacy import DPKerasSGDOptimizer               # doctest: +SKIP
        >>> optimizer = guard_non_finite(DPKerasSGDOptimizer(1.0, 1.1))       # doctest: +SKIP
    """
    if getattr(optimizer, "_dpplugins_finite_guard", False):
        return optimizer
    compute = getattr(optimizer, "_compute_gradients", None)
    if compute is None or getattr(optimizer, "_dp_sum_query", None) is None:
        raise ParameterError("optimizer", type(optimizer).__name__,
                             "a TF-Privacy Keras DP optimizer (e.g. DPKerasSGDOptimizer)")

    def _compute_gradients(loss, var_list, grad_loss=None, tape=None):
        pairs = compute(loss, var_list, grad_loss=grad_loss, tape=tape)
        return [(g if g is None else tf.debugging.assert_all_finite(g, _NON_FINITE_MESSAGE), v)
                for g, v in pairs]

    optimizer._compute_gradients = _compute_gradients
    get_gradients = getattr(optimizer, "get_gradients", None)
    if get_gradients is not None:
        def _get_gradients(loss, params):
            return [g if g is None else tf.debugging.assert_all_finite(g, _NON_FINITE_MESSAGE)
                    for g in get_gradients(loss, params)]
        optimizer.get_gradients = _get_gradients
    optimizer._dpplugins_finite_guard = True
    return optimizer


class PrivacyCallback(tf.keras.callbacks.Callback):
    """Log DP-SGD's epsilon after every epoch, computed by one of our accountants.

    Parameters (keyword only):

    * ``delta``: target delta in (0, 1).
    * ``noise_multiplier``: noise std / clipping norm.  ``None`` reads it from the model's
      TF-Privacy optimizer (:func:`noise_multiplier_of`) when training starts.
    * ``sampler`` (required): the sampler training actually uses, by name or as one of our
      sampler objects.  There is no default: the callback cannot see how ``fit`` draws its
      batches, and the default ``"poisson"`` of earlier versions gave Poisson accounting to a
      plain ``fit``, which shuffles (2 epochs of 64 examples in batches of 8: 4.02 reported,
      where the shuffled epochs that ran have a certified lower bound of 6.39).

      - ``"shuffled_epochs"`` (or a :class:`~dpplugins.samplers.ShuffledEpochs`): every epoch is
        a fresh permutation cut into batches -- what Keras ``fit`` does with ``shuffle=True`` and
        what :func:`as_tf_dataset` does with a ``ShuffledEpochs``.
      - ``"poisson"``: every example enters every batch independently with probability
        ``batch_size / num_examples``; Keras ``fit`` does **not** do this by itself, so claim it
        only when the data pipeline really samples that way.
      - a sampler object: anything with ``event(noise_multiplier, epochs)``, ``num_examples``,
        ``max_batch_size`` and ``len()`` -- e.g. :class:`~dpplugins.samplers.RandomCheckIn` or
        :class:`~dpplugins.samplers.SlidingWindowCheckIn` (random check-ins; train on
        ``as_tf_dataset(sampler, ..., empty="dummy")``, see :func:`as_tf_dataset` for the empty
        slots).  One Keras epoch is one pass of the sampler.

    * ``batch_size``, ``num_examples``: the (expected) batch size and the dataset size; required
      with a sampler name, taken from a sampler object (if given too, they must agree).
    * ``accountant``: the registry name of any accountant (:func:`dpplugins.accountants.create`,
      including one you registered) that supports the event of an epoch
      (:meth:`epoch_event`): ``create(accountant).supports(event)``, else
      :class:`ParameterError` naming the accountants that do.  ``None`` (default): the first of
      ``"pld"``, ``"shuffle"``, ``"checkin"`` that supports it, else the first registered one.
      E.g. ``"pld"``/``"fdp"`` for Poisson, ``"shuffle"`` for shuffled epochs, ``"checkin"`` for
      random check-ins and, for ``RandomCheckIn(variant="averaged", checkin_probability=1)``
      without ``max_batch_size`` (every example in exactly one step per epoch: random
      allocation), ``"balls_and_bins"``.
    * ``steps_per_epoch``: DP-SGD steps per epoch, default ``ceil(num_examples / batch_size)``
      (TF-Privacy's ``compute_dp_sgd_privacy_statement`` counts Poisson steps the same way,
      up to rounding of the total), or ``len(sampler)`` for a sampler object (then it must not
      differ).  For ``"shuffled_epochs"`` it is ``ceil(n / b)``, or ``floor(n / b)`` when the
      last short batch is dropped.
    * ``used_microbatching``: ``True`` when a microbatch holds more than one example.  ``None``
      (default) decides from the optimizer: ``True`` iff its ``num_microbatches`` is set and
      smaller than the (largest) batch size.  Under add/remove (zero-out) adjacency -- the
      ``pld``, ``fdp``, ``shuffle`` and ``balls_and_bins`` accountants by default -- the noise
      multiplier is then halved before accounting, as TF-Privacy's statement does (one example
      moves a clipped microbatch mean by up to twice the clipping norm; Ponomareva et al. 2023,
      "How to DP-fy ML", Sec. 5.6).  Under replace-one adjacency the accountant already uses
      sensitivity twice the clipping norm, which covers a microbatch, so nothing is halved.  The
      ``checkin`` accountant treats each example's clipped gradient (plus its share of the noise)
      as a local randomizer, which clipping several examples together breaks, so microbatching
      is refused there.
    * ``log_key``: key of ``logs`` / ``history.history`` (default ``"epsilon"``).
    * ``writer``: an optional ``tf.summary`` writer; epsilon is written as scalar ``log_key`` at
      step ``epoch``.
    * ``accountant_options``: extra options for the accountant.

    What is accounted (per finished epoch, ``T = steps_per_epoch``, ``sigma`` after
    microbatching): the epoch's event (:meth:`epoch_event`) -- ``T`` steps of
    ``PoissonSampledEvent(batch_size / num_examples, GaussianEvent(sigma))`` for ``"poisson"``,
    one epoch of ``ShuffledEpochs(num_examples, batch_size).event(sigma)`` for
    ``"shuffled_epochs"``, ``sampler.event(sigma, 1)`` for a sampler object -- is composed in
    the accountant, whose history is these events.

    After each epoch ``logs[log_key]`` is ``accountant.get_epsilon(delta)`` (the certified upper
    bound, see ``callback.accountant.bound_type``), also kept in :attr:`epsilons`.  Every
    ``fit`` is checked when it starts: the optimizer's noise multiplier is read again (and must
    equal ``noise_multiplier`` when that was given; a plain Keras optimizer is refused), and
    more batches per epoch than ``T`` (Keras' ``steps``) are refused with
    :class:`ParameterError`, as they would be under-counted.  When Keras does not know the
    number (a generator), the batches that ran are counted: Poisson steps are accounted as they
    ran (with a ``RuntimeWarning``), more than a sampler's pass is refused.
    Optimizers with ``gradient_accumulation_steps > 1`` are refused (one optimizer step then spans
    several Keras batches).

    Example::

        >>> cb = PrivacyCallback(delta=1e-5, noise_multiplier=1.1, batch_size=32,
        ...                      num_examples=256, sampler="poisson")
        >>> cb.accountant.name, cb.sample_rate, cb.steps_per_epoch
        ('pld', 0.125, 8)
        >>> from dpplugins.samplers import RandomCheckIn
        >>> cb = PrivacyCallback(delta=1e-5, noise_multiplier=2.0,
        ...                      sampler=RandomCheckIn(256, 64, checkin_probability=0.5))
        >>> cb.accountant.name, cb.num_examples, cb.steps_per_epoch
        ('checkin', 256, 64)
    """

    def __init__(self, *, delta: float, noise_multiplier: Optional[float] = None,
                 batch_size: Optional[int] = None, num_examples: Optional[int] = None,
                 accountant: Optional[str] = None, sampler: Any = None,
                 steps_per_epoch: Optional[int] = None,
                 used_microbatching: Optional[bool] = None, log_key: str = "epsilon",
                 writer: Any = None, accountant_options: Optional[dict] = None) -> None:
        super().__init__()
        self.delta = check_open_unit("delta", delta)
        self.noise_multiplier = (None if noise_multiplier is None
                                 else check_positive("noise_multiplier", noise_multiplier))
        self._given_noise_multiplier = self.noise_multiplier
        if sampler is None:
            raise ParameterError(
                "sampler", None, "'shuffled_epochs', 'poisson' or a sampler object: the sampler "
                "training really uses, which the callback cannot see",
                "Keras fit on arrays or a shuffled tf.data pipeline: sampler='shuffled_epochs' "
                "(a fresh permutation cut into batches every epoch); 'poisson' only for a "
                "pipeline that takes every example into every batch independently; for random "
                "check-ins pass the sampler object and train on as_tf_dataset(sampler, ...)")
        self.sampler_object = None if isinstance(sampler, str) else sampler
        if self.sampler_object is None:
            self.sampler = check_choice("sampler", sampler, CALLBACK_SAMPLERS)
        else:
            if not callable(getattr(sampler, "event", None)):
                raise ParameterError("sampler", type(sampler).__name__,
                                     "'poisson', 'shuffled_epochs' or a sampler object with "
                                     "event(noise_multiplier, epochs) (ShuffledEpochs, "
                                     "RandomCheckIn, SlidingWindowCheckIn)")
            self.sampler = getattr(sampler, "scheme", type(sampler).__name__)
        self.num_examples = self._size("num_examples", num_examples, "num_examples")
        self.batch_size = self._size("batch_size", batch_size, "max_batch_size")
        if self.batch_size > self.num_examples:
            raise ParameterError("batch_size", batch_size,
                                 f"<= num_examples={self.num_examples}")
        if self.sampler_object is not None:
            default_steps = len(self.sampler_object)
            if steps_per_epoch is not None and steps_per_epoch != default_steps:
                raise ParameterError("steps_per_epoch", steps_per_epoch,
                                     f"None or len(sampler) = {default_steps}")
        else:
            default_steps = math.ceil(self.num_examples / self.batch_size)
        self.steps_per_epoch = (default_steps if steps_per_epoch is None
                                else check_count("steps_per_epoch", steps_per_epoch, minimum=1))
        self._shuffled = self._shuffled_sampler()
        if used_microbatching is not None and not isinstance(used_microbatching, bool):
            raise ParameterError("used_microbatching", used_microbatching, "None, True or False")
        self.used_microbatching = used_microbatching
        self._given_microbatching = used_microbatching
        if not isinstance(log_key, str) or not log_key:
            raise ParameterError("log_key", log_key, "a non-empty string")
        self.log_key = log_key
        if writer is not None and not hasattr(writer, "as_default"):
            raise ParameterError("writer", writer, "None or a tf.summary writer "
                                 "(tf.summary.create_file_writer(logdir))")
        self.writer = writer
        self._options = dict(accountant_options or {})
        self.accountant = self._make_accountant(accountant)
        self.accountant_name = self.accountant.name
        self._check_microbatching()
        self.epsilons: list[float] = []
        self._batches_this_epoch = 0

    # -- set-up ------------------------------------------------------------------------------------
    def _size(self, name: str, given: Optional[int], attribute: str) -> int:
        """``num_examples`` / ``batch_size`` from the argument or the sampler object."""
        if self.sampler_object is None:
            if given is None:
                raise ParameterError(name, None, "an integer >= 1",
                                     f"required with sampler={self.sampler!r}")
            return check_count(name, given, minimum=1)
        value = int(getattr(self.sampler_object, attribute))
        if given is not None and given != value:
            raise ParameterError(name, given, f"None or {value} as in {self.sampler_object!r}")
        return value

    def _shuffled_sampler(self) -> Optional[ShuffledEpochs]:
        """The shuffled-epochs sampler of ``sampler="shuffled_epochs"`` (``drop_last`` when
        ``steps_per_epoch`` is ``floor(n / b)``)."""
        if self.sampler != "shuffled_epochs" or self.sampler_object is not None:
            return None
        n, b, t = self.num_examples, self.batch_size, self.steps_per_epoch
        if t == math.ceil(n / b):
            return ShuffledEpochs(n, b, rng=0)
        if t == n // b:
            return ShuffledEpochs(n, b, drop_last=True, rng=0)
        raise ParameterError("steps_per_epoch", t, f"{math.ceil(n / b)} (or {n // b} with the "
                             f"last short batch dropped) for shuffled epochs of {n} examples in "
                             f"batches of {b}")

    def epoch_event(self, noise_multiplier: Optional[float] = None) -> tuple[Event, int]:
        """``(event, count)``: what one Keras epoch releases, composed ``count`` times, with
        ``noise_multiplier`` (default: :attr:`accounted_noise_multiplier`, after microbatching)."""
        sigma = self.accounted_noise_multiplier if noise_multiplier is None else noise_multiplier
        if sigma is None:
            raise ParameterError("noise_multiplier", None, "a number > 0",
                                 "known when training starts (read from the optimizer)")
        if self.sampler == "poisson" and self.sampler_object is None:
            return (PoissonSampledEvent(self.batch_size / self.num_examples,
                                        GaussianEvent(sigma)), self.steps_per_epoch)
        sampler = self._shuffled if self._shuffled is not None else self.sampler_object
        return sampler.event(sigma, 1), 1

    def _make_accountant(self, name: Optional[str]):
        """The accountant named ``name`` (or the default), checked against the epoch's event."""
        event, _ = self.epoch_event(self.noise_multiplier or 1.0)
        if name is not None:
            accountant = create(name, **self._options)
            if not accountant.supports(event):
                names = ", ".join(supporting(event)) or "none"
                raise ParameterError("accountant", name, f"an accountant that supports "
                                     f"sampler={self.sampler!r} ({type(event).__name__})",
                                     f"accountants that support it: {names}")
            return accountant
        refused = {}
        supported = tuple(supporting(event))   # each accountant decides, with default options
        for candidate in _PREFERRED + supported:
            try:
                accountant = create(candidate, **self._options)
            except (ParameterError, TypeError) as error:
                refused[candidate] = error
                continue
            if accountant.supports(event):
                return accountant
        supporters = [name for name in dict.fromkeys(_PREFERRED + supported)
                      if name in refused and name in supported]
        if self._options and supporters:
            # (the sampler was blamed for options no supporting accountant takes:
            # accountant_options={"bogus": 1} read "sampler='poisson' is invalid")
            raise ParameterError("accountant_options", self._options,
                                 f"options the accountants that support sampler={self.sampler!r} "
                                 f"({', '.join(supporters)}) take; {supporters[0]}: "
                                 f"{refused[supporters[0]]}")
        raise ParameterError("sampler", self.sampler, "a sampler some registered accountant "
                             f"supports (its event: {event!r})")

    def _check_microbatching(self) -> None:
        if self.used_microbatching and isinstance(self.accountant, _CoreCheckIn):
            raise ParameterError(
                "used_microbatching", True, "False for the checkin accountant",
                "its theorems need every example's clipped gradient to be its own local "
                "randomizer; use num_microbatches=None (one microbatch per example)")

    @property
    def sample_rate(self) -> float:
        """The per-step sampling rate: ``batch_size / num_examples`` for Poisson, ``1 / T``
        (each example in one step per epoch) otherwise."""
        if self.sampler == "poisson":
            return self.batch_size / self.num_examples
        return 1.0 / self.steps_per_epoch

    @property
    def accounted_noise_multiplier(self) -> Optional[float]:
        """The noise multiplier recorded in the accountant (halved with microbatching under
        add/remove adjacency)."""
        if self.noise_multiplier is None:
            return None
        halve = self.used_microbatching and self.accountant.neighbouring == "add_remove"
        return self.noise_multiplier / 2.0 if halve else self.noise_multiplier

    # -- Keras hooks -------------------------------------------------------------------------------
    def on_train_begin(self, logs=None) -> None:
        """Set-up of every ``fit``: the optimizer is read again (a second ``fit`` may run another
        one, or the model may have been recompiled), and the steps Keras will run per epoch are
        checked against the accounted ones."""
        optimizer = getattr(self.model, "optimizer", None) if self.model is not None else None
        if optimizer is not None and getattr(optimizer, "gradient_accumulation_steps", 1) > 1:
            raise ParameterError("optimizer.gradient_accumulation_steps",
                                 optimizer.gradient_accumulation_steps, "1",
                                 "PrivacyCallback counts one DP-SGD step per Keras batch")
        self.noise_multiplier = self._training_noise_multiplier(optimizer)
        if (getattr(optimizer, "_dp_sum_query", None) is not None
                and callable(getattr(optimizer, "_compute_gradients", None))
                and not getattr(optimizer, "_dpplugins_finite_guard", False)):
            guard_non_finite(optimizer)
            # a training step traced before (a fit without this callback) would not see it
            make = getattr(self.model, "make_train_function", None)
            if make is not None:
                self.model.train_function = make(force=True)
        micro = getattr(optimizer, "_num_microbatches", None) if optimizer is not None else None
        read = bool(micro is not None and int(micro) < self.batch_size)
        if self._given_microbatching is None:
            self.used_microbatching = read
        elif read and not self._given_microbatching \
                and self.accountant.neighbouring == "add_remove":
            # (used_microbatching=False with num_microbatches=1 accounted the full noise
            # multiplier where one example moves a microbatch's clipped mean twice as far;
            # replace-one charges that sensitivity either way)
            raise ParameterError("used_microbatching", False,
                                 f"True (or None): the optimizer's num_microbatches={int(micro)} "
                                 f"puts several of the {self.batch_size} examples of a batch in "
                                 "one microbatch", "the accountant must record the noise "
                                 "relative to the sensitivity that training has")
        self._check_microbatching()
        self.accountant.check(self.epoch_event()[0])
        if (getattr(self.sampler_object, "_dpplugins_skips_empty_slots", False)
                and self.accountant.neighbouring == "add_remove"):
            raise ParameterError(
                "accountant", self.accountant_name,
                "an accountant under replace-one adjacency (checkin) for a sampler whose empty "
                "slots as_tf_dataset skips",
                "under add/remove adjacency an example's presence can decide whether its slot "
                "is empty, so skipping empty slots is not a post-processing of the released "
                "steps; use as_tf_dataset(..., empty='dummy') (noise-only updates)")
        steps = (getattr(self, "params", None) or {}).get("steps")
        if steps is not None and int(steps) > self.steps_per_epoch:
            raise ParameterError(
                "steps_per_epoch", self.steps_per_epoch,
                f"at least the {int(steps)} batches Keras runs per epoch (the extra ones would "
                "not be accounted)", "pass the batch size and steps_per_epoch that fit() uses")

    def _training_noise_multiplier(self, optimizer) -> float:
        """The noise multiplier of this ``fit``: the optimizer's (:func:`noise_multiplier_of`),
        which must equal ``noise_multiplier=`` when that was given.  Given, it is also taken for
        an optimizer that cannot be read (a custom DP optimizer) -- but not for one of Keras' own
        optimizers, which add no noise."""
        given = self._given_noise_multiplier
        try:
            read = None if optimizer is None else noise_multiplier_of(optimizer)
        except ParameterError:
            read = None
            if given is None or type(optimizer).__module__.split(".")[0] in ("keras",
                                                                             "tensorflow"):
                raise ParameterError(
                    "optimizer", type(optimizer).__name__,
                    "a TF-Privacy Keras DP optimizer (e.g. DPKerasSGDOptimizer)",
                    "a plain Keras optimizer adds no noise: nothing would be private") from None
        if read is None:
            if given is None:
                raise ParameterError("noise_multiplier", None, "a number > 0",
                                     "the model has no optimizer to read it from")
            return given
        if given is not None and not math.isclose(read, given, rel_tol=1e-6):
            raise ParameterError("noise_multiplier", given,
                                 f"the optimizer's noise multiplier {read:g} (or None to read "
                                 "it)", "the accountant must record the noise that is added")
        return read

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._batches_this_epoch = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        self._batches_this_epoch += 1

    def on_epoch_end(self, epoch, logs=None) -> None:
        event, count = self.epoch_event()
        ran = self._batches_this_epoch
        if ran > self.steps_per_epoch:
            # (a dataset whose length Keras did not know at set-up) Poisson steps are accounted
            # as they ran; a protocol's pass has no more steps than its sampler's
            if not isinstance(event, PoissonSampledEvent):
                raise ParameterError(
                    "steps_per_epoch", self.steps_per_epoch,
                    f"at least the {ran} batches Keras ran this epoch (a pass of "
                    f"{self.sampler!r} has {self.steps_per_epoch})",
                    "train on one pass of the sampler per epoch (as_tf_dataset)")
            warnings.warn(f"Keras ran {ran} batches this epoch where PrivacyCallback expected "
                          f"{self.steps_per_epoch}; all {ran} are accounted", RuntimeWarning,
                          stacklevel=2)
            count = ran
        self.accountant.compose(event, count)
        epsilon = float(self.accountant.get_epsilon(self.delta))
        self.epsilons.append(epsilon)
        if logs is not None:
            logs[self.log_key] = epsilon
        if self.writer is not None:
            with self.writer.as_default():
                tf.summary.scalar(self.log_key, epsilon, step=epoch)
            self.writer.flush()


def as_tf_dataset(sampler: Any, features: Any, labels: Any, *, skip_empty: bool = False,
                  empty: Optional[str] = None) -> "tf.data.Dataset":
    """One pass of ``sampler`` as a ``tf.data.Dataset`` of batches.

    Each element is ``(features[idx], labels[idx])`` for one index array ``idx`` of the sampler,
    in the sampler's order (``(x, y, sample_weight)`` with ``empty="dummy"``); the batch dimension
    is ``None`` in the output signature, so batches may differ in size.  Every iteration of the
    dataset (every Keras epoch) iterates the sampler again, i.e. draws a fresh permutation /
    fresh check-ins from the sampler's generator.  ``features`` and ``labels`` are numpy arrays
    (or array-likes) with the examples on axis 0.

    Empty check-in slots (``RandomCheckIn`` / ``SlidingWindowCheckIn``) and empty steps of
    ``RandomAllocation`` (every step is released; an empty one as a noise-only update), by
    ``empty``:

    * ``"keep"`` (default): zero-length batches.  Plain Keras ``fit`` (TF 2.15) runs them (the
      batch adds no loss), but TF-Privacy 0.9.0's DP optimizers do **not**: they split the loss
      into as many microbatches as examples (0), divide by that number, and the weights silently
      become NaN.
    * ``"skip"`` (or ``skip_empty=True``): drop the empty slots.  Valid only for
      ``RandomCheckIn(variant="averaged")``: an empty slot releases nothing about any example and
      Balle et al. (2020), Thm 4.1 lets the server skip it (keep accounting the full pass,
      ``len(sampler)`` slots -- :class:`PrivacyCallback` does).  That argument is for the
      ``checkin`` accountant's replace-one adjacency, where which slots are empty does not depend
      on the data; with the ``balls_and_bins`` accountant under add/remove adjacency the presence
      of an example can decide whether its slot is empty, so use ``"dummy"`` there (the
      sampler is marked: a :class:`PrivacyCallback` over it with an add/remove accountant
      refuses to start training).
      ``variant="fixed"`` and ``SlidingWindowCheckIn`` (Thm 3.2 / Thm 4.3) assume the dummy
      update of an empty slot is released; skipping it reveals which slots were empty, which is
      not a post-processing of the protocol's output, so ``"skip"`` is refused with
      :class:`ParameterError` for them, and for ``RandomAllocation`` (add/remove adjacency, as
      for ``balls_and_bins`` above).
    * ``"dummy"``: every element carries a third component, the Keras ``sample_weight``: 1 for
      every example of a non-empty slot, and an empty slot becomes a one-row batch of zeros
      (features and labels) with weight 0.  Its weighted loss is identically 0, so its gradient
      is 0, clipping keeps 0, and a TF-Privacy DP optimizer releases a noise-only update: the
      dummy update of Thm 3.2 / 4.3, valid for every check-in variant.  (The model's loss must be
      finite at the all-zero input; a zero-weight row adds 0 to the gradient only then.)

    Example::

        >>> from dpplugins.samplers import ShuffledEpochs
        >>> ds = as_tf_dataset(ShuffledEpochs(10, 4, rng=0), np.zeros((10, 3)), np.zeros(10))
        >>> [int(x.shape[0]) for x, _ in ds]
        [4, 4, 2]
    """
    if getattr(sampler, "scheme", None) not in ("shuffled_epochs", "random_checkin",
                                                "sliding_window", "random_allocation"):
        raise ParameterError("sampler", type(sampler).__name__,
                             "a dpplugins sampler (ShuffledEpochs, RandomCheckIn, "
                             "SlidingWindowCheckIn, RandomAllocation)")
    if not isinstance(skip_empty, (bool, np.bool_)):
        raise ParameterError("skip_empty", skip_empty, "True or False")
    if empty is None:
        empty = "skip" if skip_empty else "keep"
    else:
        empty = check_choice("empty", empty, EMPTY_SLOTS)
        if skip_empty and empty != "skip":
            raise ParameterError("skip_empty", skip_empty, f"False with empty={empty!r}")
    if empty == "skip" and sampler.scheme == "random_allocation":
        raise ParameterError("skip_empty" if skip_empty else "empty",
                             skip_empty if skip_empty else empty, f"not skipping for {sampler!r}",
                             "random allocation is accounted under add/remove adjacency "
                             "(balls_and_bins), where an example's presence can decide whether "
                             "its step is empty: skipping empty steps is not a post-processing "
                             "of the released steps; use empty='dummy' (noise-only updates)")
    if empty == "skip" and (sampler.scheme == "sliding_window" or
                            getattr(sampler, "variant", None) == "fixed"):
        raise ParameterError("skip_empty" if skip_empty else "empty",
                             skip_empty if skip_empty else empty, f"not skipping for {sampler!r}",
                             "its theorem (Balle et al. 2020, Thm 3.2 / 4.3) assumes every "
                             "dummy update is released; use empty='dummy' (noise-only updates); "
                             "only variant='averaged' may skip empty slots (Thm 4.1)")
    if empty == "skip":
        # which accountants may account a pipeline that skips empty slots depends on their
        # adjacency: PrivacyCallback reads this mark (a callback over this sampler with an
        # add/remove accountant, e.g. balls_and_bins, is refused when training starts)
        sampler._dpplugins_skips_empty_slots = True
    x = np.asarray(features)
    y = np.asarray(labels)
    if x.ndim < 1 or x.shape[0] != sampler.num_examples:
        raise ParameterError("features", f"array of shape {x.shape}",
                             f"an array with num_examples={sampler.num_examples} rows")
    if y.ndim < 1 or y.shape[0] != sampler.num_examples:
        raise ParameterError("labels", f"array of shape {y.shape}",
                             f"an array with num_examples={sampler.num_examples} rows")
    dummy_x = np.zeros((1,) + x.shape[1:], dtype=x.dtype)
    dummy_y = np.zeros((1,) + y.shape[1:], dtype=y.dtype)

    def generate():
        for idx in sampler:
            idx = np.asarray(idx, dtype=np.int64)
            if idx.size == 0 and empty == "skip":
                continue
            if empty != "dummy":
                yield x[idx], y[idx]
            elif idx.size == 0:
                yield dummy_x, dummy_y, np.zeros(1, dtype=np.float32)
            else:
                yield x[idx], y[idx], np.ones(idx.size, dtype=np.float32)

    signature = (tf.TensorSpec(shape=(None,) + x.shape[1:], dtype=tf.as_dtype(x.dtype)),
                 tf.TensorSpec(shape=(None,) + y.shape[1:], dtype=tf.as_dtype(y.dtype)))
    if empty == "dummy":
        signature += (tf.TensorSpec(shape=(None,), dtype=tf.float32),)
    return tf.data.Dataset.from_generator(generate, output_signature=signature)
