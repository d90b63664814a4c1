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

2. :func:`as_tf_dataset` turns one pass of a :class:`~dpplugins.samplers.ShuffledEpochs` or
   :class:`~dpplugins.samplers.RandomCheckIn` schedule into a ``tf.data.Dataset`` of ``(x, y)``
   batches, so ``fit`` trains with the sampler the accountant assumes.

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

from dpplugins.accountants import create
from dpplugins.errors import ParameterError, check_choice, check_count, check_open_unit, \
    check_positive

__all__ = ["PrivacyCallback", "as_tf_dataset", "noise_multiplier_of", "CALLBACK_SAMPLERS",
           "CALLBACK_ACCOUNTANTS"]

#: samplers the callback accounts for, and the accountants valid for each
CALLBACK_ACCOUNTANTS = {"poisson": ("pld", "fdp"), "shuffled_epochs": ("shuffle",)}
CALLBACK_SAMPLERS = tuple(CALLBACK_ACCOUNTANTS)


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


class PrivacyCallback(tf.keras.callbacks.Callback):
    """Log DP-SGD's epsilon after every epoch, computed by one of our accountants.

    Parameters (keyword only):

    * ``delta``: target delta in (0, 1).
    * ``noise_multiplier``: noise std / clipping norm.  ``None`` reads it from the model's
      TF-Privacy optimizer (:func:`noise_multiplier_of`) when training starts.
    * ``batch_size``, ``num_examples``: the (expected) batch size and the dataset size.
    * ``sampler``: the sampler training actually uses.  ``"shuffled_epochs"``: every epoch is a
      fresh permutation cut into batches -- what Keras ``fit`` does with ``shuffle=True`` and what
      :func:`as_tf_dataset` does with a :class:`~dpplugins.samplers.ShuffledEpochs`.
      ``"poisson"``: every example enters every batch independently with probability
      ``batch_size / num_examples``; Keras ``fit`` does **not** do this by itself, so claim it only
      when the data pipeline really samples that way.
    * ``accountant``: ``"pld"`` (default) or ``"fdp"`` for ``"poisson"``; ``"shuffle"`` (the
      default there) for ``"shuffled_epochs"``.  Other pairs raise :class:`ParameterError`.
    * ``steps_per_epoch``: DP-SGD steps per epoch, default ``ceil(num_examples / batch_size)``
      (TF-Privacy's ``compute_dp_sgd_privacy_statement`` counts Poisson steps the same way,
      up to rounding of the total).
    * ``used_microbatching``: ``True`` when a microbatch holds more than one example; the noise
      multiplier is then halved before accounting, as TF-Privacy's statement does (one example
      moves a clipped microbatch mean by up to twice the clipping norm; Ponomareva et al. 2023,
      "How to DP-fy ML", Sec. 5.6).  ``None`` (default) decides from the optimizer: ``True`` iff
      its ``num_microbatches`` is set and smaller than ``batch_size``.
    * ``log_key``: key of ``logs`` / ``history.history`` (default ``"epsilon"``).
    * ``writer``: an optional ``tf.summary`` writer; epsilon is written as scalar ``log_key`` at
      step ``epoch``.
    * ``accountant_options``: extra options for the accountant.

    What is accounted (per finished epoch, ``T = steps_per_epoch``, ``sigma`` after microbatching):

    * ``"poisson"``: ``T`` steps of the Poisson-subsampled Gaussian with ``sample_rate =
      batch_size / num_examples``.
    * ``"shuffled_epochs"``: ``T`` steps recorded with ``sample_rate = 1 / T`` (the shuffle
      accountant's convention) in ``create("shuffle", batch_size=..., dataset_size=...)``.

    After each epoch ``logs[log_key]`` is ``accountant.get_epsilon(delta)`` (the certified upper
    bound, see ``callback.accountant.bound_type``), also kept in :attr:`epsilons`.  The number of
    training batches Keras reports in an epoch is checked against ``T``: more batches than
    ``T`` would be under-counted, so a ``RuntimeWarning`` is issued (set ``steps_per_epoch``).
    Optimizers with ``gradient_accumulation_steps > 1`` are refused (one optimizer step then spans
    several Keras batches).

    Example::

        >>> cb = PrivacyCallback(delta=1e-5, noise_multiplier=1.1, batch_size=32,
        ...                      num_examples=256, sampler="poisson")
        >>> cb.accountant.name, cb.sample_rate, cb.steps_per_epoch
        ('pld', 0.125, 8)
    """

    def __init__(self, *, delta: float, noise_multiplier: Optional[float] = None,
                 batch_size: int, num_examples: int, accountant: Optional[str] = None,
                 sampler: str = "poisson", steps_per_epoch: Optional[int] = None,
                 used_microbatching: Optional[bool] = None, log_key: str = "epsilon",
                 writer: Any = None, accountant_options: Optional[dict] = None) -> None:
        super().__init__()
        self.delta = check_open_unit("delta", delta)
        self.noise_multiplier = (None if noise_multiplier is None
                                 else check_positive("noise_multiplier", noise_multiplier))
        self.num_examples = check_count("num_examples", num_examples, minimum=1)
        self.batch_size = check_count("batch_size", batch_size, minimum=1)
        if self.batch_size > self.num_examples:
            raise ParameterError("batch_size", batch_size,
                                 f"<= num_examples={self.num_examples}")
        self.sampler = check_choice("sampler", sampler, CALLBACK_SAMPLERS)
        valid = CALLBACK_ACCOUNTANTS[self.sampler]
        self.accountant_name = valid[0] if accountant is None else accountant
        if self.accountant_name not in valid:
            raise ParameterError("accountant", accountant,
                                 " or ".join(repr(v) for v in valid)
                                 + f" for sampler={self.sampler!r}")
        default_steps = math.ceil(self.num_examples / self.batch_size)
        self.steps_per_epoch = (default_steps if steps_per_epoch is None
                                else check_count("steps_per_epoch", steps_per_epoch, minimum=1))
        if used_microbatching is not None and not isinstance(used_microbatching, bool):
            raise ParameterError("used_microbatching", used_microbatching, "None, True or False")
        self.used_microbatching = used_microbatching
        if not isinstance(log_key, str) or not log_key:
            raise ParameterError("log_key", log_key, "a non-empty string")
        self.log_key = log_key
        if writer is not None and not hasattr(writer, "as_default"):
            raise ParameterError("writer", writer, "None or a tf.summary writer "
                                 "(tf.summary.create_file_writer(logdir))")
        self.writer = writer
        options = dict(accountant_options or {})
        if self.sampler == "shuffled_epochs":
            options.setdefault("batch_size", self.batch_size)
            options.setdefault("dataset_size", self.num_examples)
        self.accountant = create(self.accountant_name, **options)
        self.epsilons: list[float] = []
        self._batches_this_epoch = 0

    @property
    def sample_rate(self) -> float:
        """The ``sample_rate`` recorded per step (Opacus' history format)."""
        if self.sampler == "poisson":
            return self.batch_size / self.num_examples
        return 1.0 / self.steps_per_epoch

    @property
    def accounted_noise_multiplier(self) -> Optional[float]:
        """The noise multiplier recorded in the accountant (halved with microbatching)."""
        if self.noise_multiplier is None:
            return None
        return self.noise_multiplier / 2.0 if self.used_microbatching else self.noise_multiplier

    def on_train_begin(self, logs=None) -> None:
        optimizer = getattr(self.model, "optimizer", None) if self.model is not None else None
        if optimizer is not None and getattr(optimizer, "gradient_accumulation_steps", 1) > 1:
            raise ParameterError("optimizer.gradient_accumulation_steps",
                                 optimizer.gradient_accumulation_steps, "1",
                                 "PrivacyCallback counts one DP-SGD step per Keras batch")
        if self.noise_multiplier is None:
            if optimizer is None:
                raise ParameterError("noise_multiplier", None, "a number > 0",
                                     "the model has no optimizer to read it from")
            self.noise_multiplier = noise_multiplier_of(optimizer)
        if self.used_microbatching is None:
            micro = getattr(optimizer, "_num_microbatches", None) if optimizer is not None else None
            self.used_microbatching = bool(micro is not None and int(micro) < self.batch_size)

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._batches_this_epoch = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        self._batches_this_epoch += 1

    def on_epoch_end(self, epoch, logs=None) -> None:
        if self._batches_this_epoch > self.steps_per_epoch:
            warnings.warn(f"Keras ran {self._batches_this_epoch} batches this epoch but "
                          f"PrivacyCallback accounts {self.steps_per_epoch} steps per epoch; "
                          "pass steps_per_epoch= (epsilon would be under-counted)",
                          RuntimeWarning, stacklevel=2)
        self.accountant.step(noise_multiplier=self.accounted_noise_multiplier,
                             sample_rate=self.sample_rate, count=self.steps_per_epoch)
        epsilon = float(self.accountant.get_epsilon(self.delta))
        self.epsilons.append(epsilon)
        if logs is not None:
            logs[self.log_key] = epsilon
        if self.writer is not None:
            with self.writer.as_default():
                tf.summary.scalar(self.log_key, epsilon, step=epoch)
            self.writer.flush()


def as_tf_dataset(sampler: Any, features: Any, labels: Any, *, skip_empty: bool = False
                  ) -> "tf.data.Dataset":
    """One pass of ``sampler`` as a ``tf.data.Dataset`` of ``(x, y)``.

    Each element is ``(features[idx], labels[idx])`` for one index array ``idx`` of the sampler,
    in the sampler's order; the batch dimension is ``None`` in the output signature, so batches
    may differ in size.  Every iteration of the dataset (every Keras epoch) iterates the sampler
    again, i.e. draws a fresh permutation / fresh check-ins from the sampler's generator.
    ``features`` and ``labels`` are numpy arrays (or array-likes) with the examples on axis 0.

    Empty check-in slots (``RandomCheckIn`` / ``SlidingWindowCheckIn``) give zero-length batches.
    Plain Keras ``fit`` (TF 2.15) runs them without error (the batch adds no loss).  TF-Privacy
    0.9.0's DP optimizers do **not** handle them: they split the loss into as many microbatches
    as examples (0) and divide by that number, and the weights silently become NaN.
    ``skip_empty=True`` drops the empty slots from the dataset.  Accounting with skipping:

    * ``RandomCheckIn(variant="averaged")``: an empty slot releases nothing about any example and
      Balle et al. (2020), Thm 4.1 lets the server skip it; keep accounting the full pass
      (``len(sampler)`` slots, never the number of batches run).
    * ``variant="fixed"`` and ``SlidingWindowCheckIn``: Thm 3.2 / Thm 4.3 assume the dummy
      (noise-only) update of an empty slot is released.  Skipping it reveals which slots were
      empty, which is not a post-processing of the protocol's output, so ``skip_empty=True`` is
      refused with :class:`ParameterError` for these samplers (they cannot be trained with a
      TF-Privacy DP optimizer through this function; a noise-only dummy batch is not provided).

    Example::

        >>> from dpplugins.samplers import ShuffledEpochs
        >>> ds = as_tf_dataset(ShuffledEpochs(10, 4, rng=0), np.zeros((10, 3)), np.zeros(10))
        >>> [int(x.shape[0]) for x, _ in ds]
        [4, 4, 2]
    """
    if getattr(sampler, "scheme", None) not in ("shuffled_epochs", "random_checkin",
                                                "sliding_window"):
        raise ParameterError("sampler", type(sampler).__name__,
                             "a dpplugins sampler (ShuffledEpochs, RandomCheckIn, "
                             "SlidingWindowCheckIn)")
    if not isinstance(skip_empty, (bool, np.bool_)):
        raise ParameterError("skip_empty", skip_empty, "True or False")
    if skip_empty and (sampler.scheme == "sliding_window" or
                       getattr(sampler, "variant", None) == "fixed"):
        raise ParameterError("skip_empty", skip_empty, f"False for {sampler!r}",
                             "its theorem (Balle et al. 2020, Thm 3.2 / 4.3) assumes every "
                             "dummy update is released; only variant='averaged' may skip "
                             "empty slots (Thm 4.1)")
    x = np.asarray(features)
    y = np.asarray(labels)
    if x.ndim < 1 or x.shape[0] != sampler.num_examples:
        raise ParameterError("features", f"array of shape {x.shape}",
                             f"an array with num_examples={sampler.num_examples} rows")
    if y.ndim < 1 or y.shape[0] != sampler.num_examples:
        raise ParameterError("labels", f"array of shape {y.shape}",
                             f"an array with num_examples={sampler.num_examples} rows")

    def generate():
        for idx in sampler:
            idx = np.asarray(idx, dtype=np.int64)
            if skip_empty and idx.size == 0:
                continue
            yield x[idx], y[idx]

    signature = (tf.TensorSpec(shape=(None,) + x.shape[1:], dtype=tf.as_dtype(x.dtype)),
                 tf.TensorSpec(shape=(None,) + y.shape[1:], dtype=tf.as_dtype(y.dtype)))
    return tf.data.Dataset.from_generator(generate, output_signature=signature)
