"""Federated learning on Flower with random check-ins vs Poisson vs fixed-size client sampling,
with the certified user-level epsilon after every round (no download, CPU, loopback only).

scikit-learn's digits are split over ``--clients`` simulated clients by label skew (the training
images sorted by label and cut into ``2 * clients`` shards, two shards per client), and a softmax
regression on 2x2-pooled images (16 features, a data-independent reduction) is trained with
Flower's simulation engine.  Each protocol runs with :class:`DPFedAvg` (server-side clipping of
every client's update to ``--clipping-norm`` and Gaussian noise ``noise_multiplier * C`` on the
sum) wrapped in :class:`PrivacyAccounting`, which prints the certified epsilon of every round:

* ``checkin``: random check-ins (Balle et al. 2020): each client decides itself, once per window
  of ``--window`` rounds, whether it checks in (probability ``--checkin-probability``) and into
  which round; ``--variant fixed`` uses one checked-in client per round (an empty round
  releases the noise alone), ``sliding`` the sliding window;
  ``averaged`` (probability 1) every client of the round.  Replace-one, accountant ``checkin``.
* ``poisson``: every client joins every round with probability ``q``.  Add/remove.
* ``fixed``: Flower's default, ``K`` clients per round without replacement.  Replace-one.

Same expected participation: ``q = E / n`` and ``K = max(1, round(E))`` where ``E`` is the
expected number of client updates the check-in protocol uses per round.  Note that add/remove
(Poisson) and replace-one numbers are for different neighbouring relations.

    python examples/flower_checkin.py                       # 20 clients, 40 rounds each
    python examples/flower_checkin.py --variant sliding --window 4 --rounds 17
    python examples/flower_checkin.py --variant averaged --window 5 --max-clients-per-round 8
    python examples/flower_checkin.py --protocols checkin --clients 40 --noise-multiplier 1.0
"""

from __future__ import annotations

import argparse
import logging
import os
import time

# loopback only: no telemetry from Flower or Ray, Ray bound to 127.0.0.1 (read at import time)
os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402,E501
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from dpplugins.display import upper_text  # noqa: E402
from dpplugins.integrations.flower import (DPFedAvg, FixedSizeSampling,  # noqa: E402
                                           PoissonSampling, PrivacyAccounting, RandomCheckIns,
                                           register_participation)

CLASSES, FEATURES = 10, 16


_DATA: dict = {}     # per process (the simulation's actors load the data themselves)


def dataset(num_clients: int, seed: int):
    """(client shards, test set): pooled digits, label-skew split of the training part."""
    if (num_clients, seed) in _DATA:
        return _DATA[(num_clients, seed)]
    data = load_digits()
    x = data.images.reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4)).reshape(-1, FEATURES) / 16.0
    y = data.target
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    train = train[np.argsort(y[train], kind="stable")]            # sorted by label
    shards = np.array_split(train, 2 * num_clients)
    owner = rng.permutation(2 * num_clients)
    clients = [np.concatenate([shards[owner[2 * j]], shards[owner[2 * j + 1]]])
               for j in range(num_clients)]
    out = _DATA[(num_clients, seed)] = ([(x[idx], y[idx]) for idx in clients],
                                        (x[test], y[test]))
    return out


def softmax_gradient(w, b, x, y):
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return x.T @ p / len(y), p.mean(axis=0)


def accuracy(arrays: ArrayRecord, test) -> float:
    w, b = arrays["w"].numpy(), arrays["b"].numpy()
    x, y = test
    return float(np.mean(np.argmax(x @ w + b, axis=1) == y))


def make_client_app(args) -> ClientApp:
    app = ClientApp()
    register_participation(app)          # each client draws its own decisions (OS entropy)

    @app.train()
    def train(msg, context):
        j = int(context.node_config["partition-id"])
        x, y = dataset(args.clients, args.seed)[0][j]
        arrays = msg.content["arrays"]
        w, b = arrays["w"].numpy().copy(), arrays["b"].numpy().copy()
        for _ in range(args.local_epochs):
            gw, gb = softmax_gradient(w, b, x, y)
            w -= args.local_lr * gw
            b -= args.local_lr * gb
        return Message(RecordDict({"arrays": ArrayRecord({"w": Array(w), "b": Array(b)}),
                                   "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    return app


def protocols(args):
    n = args.clients
    checkin = RandomCheckIns(n, args.window, args.checkin_probability, args.variant,
                             args.max_clients_per_round)
    expected = checkin.expected_updates
    return {"checkin": checkin,
            "poisson": PoissonSampling(n, min(1.0, expected / n), block_rounds=args.window),
            "fixed": FixedSizeSampling(n, max(1, round(expected)))}


def make_server_app(args) -> ServerApp:
    app = ServerApp()
    _, test = dataset(args.clients, args.seed)

    summary = []

    @app.main()
    def main(grid, context):
        chosen = protocols(args)
        for tag in args.protocols:
            protocol = chosen[tag]
            strategy = PrivacyAccounting(
                DPFedAvg(protocol, args.noise_multiplier, args.clipping_norm,
                         server_learning_rate=args.server_lr), delta=args.delta)
            acc = strategy.accountant
            print(f"\n== {tag}: {protocol!r}\n   {protocol.expected_updates:.3f} expected client "
                  f"updates per round; epsilon at delta={args.delta:g} by accountant "
                  f"{acc.name!r} ({acc.bound_type}), {strategy.relation}")

            def evaluate(server_round, arrays, strategy=strategy, tag=tag):
                score = accuracy(arrays, test)
                if server_round == 0:
                    print(f"   round  0: accuracy {score:.3f}")
                    return None
                record = strategy.strategy.rounds[-1]
                print(f"   round {server_round:2d}: accuracy {score:.3f}  updates "
                      f"{record.num_updates}  epsilon {strategy.rounds[-1].epsilon:8.3f} "
                      f"(delta {args.delta:g}, {acc.name}, {acc.bound_type}, "
                      f"{strategy.neighbouring})")
                return MetricRecord({"accuracy": score})

            initial = ArrayRecord({"w": Array(np.zeros((FEATURES, CLASSES))),
                                   "b": Array(np.zeros(CLASSES))})
            result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=args.rounds,
                                    timeout=120, train_config=ConfigRecord({"protocol": tag}),
                                    evaluate_fn=evaluate)
            summary.append((tag, accuracy(result.arrays, test), strategy.epsilon,
                            acc.name, strategy.neighbouring))
        print(f"\nafter {args.rounds} rounds (delta {args.delta:g}; every epsilon a certified "
              "upper bound):")
        for tag, score, eps, name, relation in summary:
            print(f"   {tag:8s} accuracy {score:.3f}  epsilon {upper_text(eps, decimals=3):>8s}  "
                  f"({name}, {relation})")

    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--window", type=int, default=5, help="rounds per check-in window")
    parser.add_argument("--checkin-probability", type=float, default=1.0)
    parser.add_argument("--variant", choices=("fixed", "averaged", "sliding"), default="fixed")
    parser.add_argument("--max-clients-per-round", type=int, default=None,
                        help="cap for --variant averaged")
    parser.add_argument("--noise-multiplier", type=float, default=0.5)
    parser.add_argument("--clipping-norm", type=float, default=0.5)
    parser.add_argument("--server-lr", type=float, default=1.0)
    parser.add_argument("--local-epochs", type=int, default=20)
    parser.add_argument("--local-lr", type=float, default=2.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--protocols", default="checkin,poisson,fixed",
                        help="comma-separated subset of checkin,poisson,fixed")
    parser.add_argument("--seed", type=int, default=0, help="data split")
    args = parser.parse_args(argv)
    args.protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = set(args.protocols) - {"checkin", "poisson", "fixed"}
    if unknown or not args.protocols:
        parser.error(f"--protocols: unknown {sorted(unknown)}")
    if args.clients < 20:
        print("note: fewer than 20 clients")
    logging.getLogger("flwr").setLevel(logging.WARNING)
    start = time.time()
    run_simulation(make_server_app(args), make_client_app(args), num_supernodes=args.clients,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": min(2, os.cpu_count() or 1),
                                                 "include_dashboard": False,
                                                 "logging_level": "ERROR"}})
    print(f"\n{time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
