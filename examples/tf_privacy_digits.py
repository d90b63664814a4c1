"""TF-Privacy on scikit-learn's digits with our sampler, callback and statement (no download).

A small Keras network is trained with TF-Privacy's ``DPKerasSGDOptimizer`` on batches drawn by
our ``ShuffledEpochs`` sampler (``as_tf_dataset``: a fresh permutation every epoch, cut into
batches -- what Keras ``fit`` does anyway, here made explicit and seedable), and our
``PrivacyCallback`` logs the shuffle accountant's certified epsilon after every epoch.  At the end
our privacy statement (``compute_dp_sgd_privacy_statement`` with ``accountant=`` and
``sampler="shuffled_epochs"``) is printed beside TF-Privacy's own for the same run: their
"once per epoch" line and ours bound the same training; their Poisson line (and ours, for
comparison) assumes a sampler this training did not use.

    python examples/tf_privacy_digits.py --epochs 5
    python examples/tf_privacy_digits.py --epochs 5 --accountant rdp --max-examples-per-user 2
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # before TensorFlow is imported

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_privacy  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib  # noqa: E402

from dpplugins.display import upper_text  # noqa: E402
from dpplugins.integrations.tf_keras import PrivacyCallback, as_tf_dataset  # noqa: E402
from dpplugins.integrations.tf_privacy import (  # noqa: E402
    compute_dp_sgd_privacy_statement, statement_accountants)
from dpplugins.samplers import ShuffledEpochs  # noqa: E402


def digits_arrays(seed: int):
    """Digits scaled to [0, 1], split 80/20 with a seeded permutation."""
    data = load_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int64")
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def dp_model(noise_multiplier: float, l2_norm_clip: float, learning_rate: float):
    """64 -> 32 -> 10 network with TF-Privacy's DP-SGD (one microbatch per example)."""
    model = tf.keras.Sequential([tf.keras.Input((64,)),
                                 tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    optimizer = tensorflow_privacy.DPKerasSGDOptimizer(
        l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier, num_microbatches=None,
        learning_rate=learning_rate)
    # per-example losses: TF-Privacy clips each example's gradient
    loss = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--noise-multiplier", type=float, default=1.0)
    parser.add_argument("--l2-norm-clip", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=0.5)
    parser.add_argument("--delta", type=float, default=1e-5)
    # any registered accountant that supports shuffled epochs or Poisson sampling (or "rdp")
    parser.add_argument("--accountant", default="shuffle",
                        help="accountant of our statement: of the shuffled-epochs line if it "
                             "supports shuffled epochs ('shuffle'), else of the Poisson "
                             "comparison line ('pld', 'fdp', 'rdp')")
    parser.add_argument("--tf-accountant", choices=("RDP", "PLD"), default="RDP",
                        help="accountant of TF-Privacy's statement")
    parser.add_argument("--max-examples-per-user", type=int, default=None,
                        help="adds user-level lines (group privacy) to both statements")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tf.keras.utils.set_random_seed(args.seed)

    (x_train, y_train), (x_test, y_test) = digits_arrays(args.seed)
    n = len(x_train)
    # which accountant computes which line of the statement (refuses a wrong one before training)
    lines = statement_accountants(n, args.batch_size, args.epochs, args.noise_multiplier,
                                  accountant=args.accountant, sampler="shuffled_epochs")
    sampler = ShuffledEpochs(n, args.batch_size, rng=args.seed)
    model = dp_model(args.noise_multiplier, args.l2_norm_clip, args.learning_rate)
    # dataset size, batch size and steps per epoch come from the sampler, the noise multiplier
    # from the optimizer (when training starts)
    callback = PrivacyCallback(delta=args.delta, sampler=sampler)
    print(f"DP-SGD on {n} digits, {len(sampler)} shuffled batches of <= {args.batch_size} per "
          f"epoch, noise multiplier {args.noise_multiplier:g}, delta {args.delta:g}")
    start = time.perf_counter()
    history = model.fit(as_tf_dataset(sampler, x_train, y_train), epochs=args.epochs, verbose=0,
                        callbacks=[callback])
    for epoch, (loss, eps) in enumerate(zip(history.history["loss"],
                                            history.history["epsilon"]), start=1):
        print(f"epoch {epoch}: loss {loss:.3f}, epsilon[{callback.accountant.name}] "
              f"{upper_text(eps, decimals=3)} "
              f"({callback.accountant.bound_type})")
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"test accuracy {accuracy:.3f} (chance 0.1), {time.perf_counter() - start:.1f} s")

    # no microbatching: num_microbatches=None clips every example on its own
    common = (n, args.batch_size, args.epochs, args.noise_multiplier, args.delta, False,
              args.max_examples_per_user)
    print("\n== dpplugins: compute_dp_sgd_privacy_statement(..., "
          f"accountant={args.accountant!r}, sampler='shuffled_epochs') "
          f"[lines: {', '.join(f'{k}={v}' for k, v in lines.items())}] ==\n")
    print(compute_dp_sgd_privacy_statement(*common, accountant=args.accountant,
                                           sampler="shuffled_epochs"))
    print(f"== TF-Privacy: compute_dp_sgd_privacy_statement(..., "
          f"accountant_type={args.tf_accountant}) ==\n")
    print(compute_dp_sgd_privacy_lib.compute_dp_sgd_privacy_statement(
        *common, accountant_type=compute_dp_sgd_privacy_lib.AccountantType[args.tf_accountant]))


if __name__ == "__main__":
    main()
