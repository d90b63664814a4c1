"""DP-SGD on scikit-learn's digits with the certified PLD accountant (numpy only, no download).

A softmax regression is trained with DP-SGD exactly as Opacus does it -- Poisson sampling of each
example with rate q, per-example gradient clipping to norm C, Gaussian noise of standard deviation
sigma * C on the summed gradient -- and privacy is tracked with ``dpplugins``' ``pld`` accountant.
The noise multiplier is calibrated for the target epsilon first, then every epoch prints the test
accuracy and the certified (lower, upper) epsilon.

    python examples/quickstart_digits.py --epochs 15 --target-epsilon 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpplugins.accountants import create
from dpplugins.calibration import find_noise_multiplier
from dpplugins.display import interval_text, upper_text


def load_digits_split(seed: int):
    from sklearn.datasets import load_digits  # ships with scikit-learn; no download

    data = load_digits()
    x = data.data / 16.0
    x = np.hstack([x, np.ones((len(x), 1))])  # bias feature
    y = data.target
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def per_example_gradients(weights, x, y):
    """Gradients of the cross-entropy of a softmax regression, one row per example."""
    logits = x @ weights
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    probs[np.arange(len(y)), y] -= 1.0
    return np.einsum("bi,bk->bik", x, probs).reshape(len(y), -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64, help="expected Poisson batch size")
    parser.add_argument("--target-epsilon", type=float, default=3.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = load_digits_split(args.seed)
    n = len(x_train)
    q = args.batch_size / n
    steps_per_epoch = int(round(1 / q))
    total_steps = steps_per_epoch * args.epochs
    start = time.perf_counter()
    sigma = find_noise_multiplier(target_epsilon=args.target_epsilon, delta=args.delta,
                                  sample_rate=q, steps=total_steps, accountant="pld")
    print(f"{n} training examples, q={q:.4f}, {total_steps} steps: noise multiplier "
          f"{upper_text(sigma, decimals=4)} for epsilon <= {args.target_epsilon} at "
          f"delta={args.delta:g} "
          f"(calibrated in {time.perf_counter() - start:.2f}s)")

    rng = np.random.default_rng(args.seed)
    weights = np.zeros((x_train.shape[1], 10))
    accountant = create("pld")
    for epoch in range(1, args.epochs + 1):
        for _ in range(steps_per_epoch):
            batch = np.flatnonzero(rng.random(n) < q)  # Poisson sampling
            grad_sum = np.zeros(weights.size)
            if len(batch):
                grads = per_example_gradients(weights, x_train[batch], y_train[batch])
                norms = np.linalg.norm(grads, axis=1, keepdims=True)
                grads *= np.minimum(1.0, args.clip / np.maximum(norms, 1e-12))
                grad_sum = grads.sum(axis=0)
            noisy = grad_sum + rng.normal(0.0, sigma * args.clip, size=weights.size)
            weights -= args.lr * noisy.reshape(weights.shape) / args.batch_size
            accountant.step(noise_multiplier=sigma, sample_rate=q)
        accuracy = float(np.mean((x_test @ weights).argmax(axis=1) == y_test))
        lower, upper = accountant.get_epsilon_bounds(args.delta)
        print(f"epoch {epoch:2d}  test accuracy {accuracy:.3f}  epsilon in "
              f"{interval_text(lower, upper, decimals=4)} (certified, delta={args.delta:g})")


if __name__ == "__main__":
    main()
