"""Flower integration: client participation protocols described by events, central DP with
server-side fixed clipping, and certified user-level epsilon after every round.

Flower is imported lazily: ``import dpplugins`` and ``import dpplugins.integrations.flower``
work without it; only the two strategy classes (:class:`DPFedAvg`, :class:`PrivacyAccounting`)
and the client-side query handler need ``flwr`` (tested with flwr 1.42.0, the Message API:
``flwr.serverapp.strategy.Strategy``, ``ServerApp``/``ClientApp``, ``Grid``).

**Who is protected.**  Every number here is *user-level* (client-level) differential privacy:
one user is one Flower client, and neighbouring federations differ in *all* the data of one
client.  The relation depends on the protocol and is stated with every number:

* random check-ins (:class:`RandomCheckIns`) and fixed-size sampling
  (:class:`FixedSizeSampling`, Flower's default): **replace-one** -- the same number of clients,
  one client's data replaced by arbitrary other data (Balle et al. 2020, Sec. 2; Dong, Roth, Su
  2022, Thm 4.2).  The clipped update of that client can move the sum by up to ``2C``; the
  accountants account for this (``mu = 2 / sigma``), so ``noise_multiplier`` stays relative to
  ``C`` as in Flower.
* Poisson client sampling (:class:`PoissonSampling`): **add/remove** -- one client added to or
  removed from the population (sum moves by up to ``C``).

The guarantee covers the sequence of global models the server releases (one noisy aggregate per
round).  It does **not** cover client-reported metrics, federated evaluation, the server's own
logs of who took part (:attr:`DPFedAvg.rounds`, :attr:`DPFedAvg.checkins`) -- under Poisson
add/remove even the *number* of participants of a round is not protected -- nor client drop-outs:
a client that does not answer makes the strategy stop with :class:`ParticipationError` before
anything is released for that round.

**Protocols** (framework-free classes, the event of every round from our samplers):

* :class:`RandomCheckIns` -- each client decides *locally, with its own randomness*, at the start
  of every pass: with probability ``p`` it checks in, into a uniformly random round of the window
  of ``m`` rounds (``variant="fixed"``, Balle et al. 2020 A_fix, Thm 3.2: the server uses one
  client, uniformly chosen among those that checked in to the round, an empty round releases the
  noise alone) or ``variant="averaged"`` (A_avg, Thm 4.1, ``p = 1``: the server uses every client
  that checked in to the round, at most ``max_clients_per_round``).  ``variant="sliding"``
  (A_sldw, Thm 4.3): client ``j`` (its index, ``partition-id``) checks into a uniform slot of
  ``{j, ..., j + m - 1}``; a pass runs ``n - m + 1`` rounds.  Event:
  ``RandomCheckInEvent`` (one step per round), accountant ``checkin``.
* :class:`PoissonSampling` -- each client joins each round independently with probability ``q``,
  decided locally (a block of rounds at a time).  Event: ``PoissonSampledEvent``.
* :class:`FixedSizeSampling` -- the server samples ``K`` of the ``N`` clients uniformly without
  replacement each round (Flower's ``FedAvg`` / ``sample_nodes``).  Event: ``FixedBatchEvent``.
  ``sample_nodes`` draws with Python's ``random`` module, and the amplification by sampling
  assumes the selection is secret: do not seed ``random`` on the server (``random.seed(0)`` for
  reproducibility makes every round's selection predictable).

**Server side.**  :class:`DPFedAvg` runs any of the three: it asks the clients for their
participation decisions (a ``query`` message, :data:`PARTICIPATION_MESSAGE_TYPE`, answered by
:func:`participation_query`), sends the model to the clients that take part, clips every
client's update ``local - global`` to L2 norm ``C`` (over all arrays, as Flower's
``DifferentialPrivacyServerSideFixedClipping``; an update with an infinite or NaN entry, a
diverged local training, counts as zero), adds ``N(0, (noise_multiplier C)^2 I)`` once to
the *sum* and divides by a fixed public denominator (the expected number of updates; McMahan et
al. 2018's fixed-denominator estimator -- dividing by the realised count would not be the
accounted mechanism).  Every update has weight one (user-level: ``num-examples`` is ignored).
A round without participants releases the noise alone.  For fixed-size sampling, Flower's own
``DifferentialPrivacyServerSideFixedClipping(FedAvg(...))`` (or the client-side variant) can be
used instead.

:class:`PrivacyAccounting` wraps either strategy: at set-up it builds the event of one round and
chooses an accountant valid for it through :func:`dpplugins.accountants.supporting` (no name
tables; see :func:`valid_accountants`), or checks the one it is given (naming ``"pld"`` for
fixed-size sampling raises :class:`~dpplugins.accountants.UnsupportedEventError` at
construction: a Poisson number is not valid for it).  After every round it composes the round's
event and writes the certified epsilon into the round's ``MetricRecord`` (``dp-epsilon``,
``dp-delta``) and the Flower log.

Usage (ServerApp)::

    from dpplugins.integrations.flower import DPFedAvg, PrivacyAccounting, RandomCheckIns

    protocol = RandomCheckIns(num_clients=100, window=10, checkin_probability=0.5)
    strategy = PrivacyAccounting(DPFedAvg(protocol, noise_multiplier=1.0, clipping_norm=0.1),
                                 delta=1e-5)
    result = strategy.start(grid, initial_arrays, num_rounds=50, evaluate_fn=...)
    result.train_metrics_clientapp[50]["dp-epsilon"]      # certified, replace-one, user-level

Running it locally.  Flower posts usage events to its server unless ``FLWR_TELEMETRY_ENABLED=0``,
and Ray (the simulation engine) binds to the machine's network address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (then 127.0.0.1); set both (and
``RAY_USAGE_STATS_ENABLED=0``) before importing ``flwr`` to stay on loopback, as the example and
the tests do.  The noise comes from numpy's PCG64 seeded by OS entropy (as Flower's
``np.random.normal``): not a cryptographic generator, and floating-point Gaussian samples are not
hardened against the attacks of Mironov (2012).

ClientApp (the check-in decision is the client's own)::

    from dpplugins.integrations.flower import register_participation
    app = ClientApp()
    register_participation(app)          # answers the participation query
    @app.train()
    def train(msg, context): ...         # reply with the locally trained "arrays"
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from typing import Any, Callable

import numpy as np

from dpplugins.accountants import Accountant, UnsupportedEventError, available, create, supporting
from dpplugins.errors import (ParameterError, check_choice, check_count, check_nonnegative,
                              check_positive, check_probability, check_real)
from dpplugins.events import (Event, FixedBatchEvent, GaussianEvent, NoOpEvent,
                              PoissonSampledEvent, ProtocolEvent, SelfComposedEvent)
from dpplugins.passes import extend_run
from dpplugins.samplers import RandomCheckIn, SlidingWindowCheckIn

__all__ = [
    "Participation", "RandomCheckIns", "PoissonSampling", "FixedSizeSampling",
    "participation_from_config", "participation_query", "register_participation",
    "valid_accountants", "choose_accountant", "ParticipationError", "RoundRecord", "CheckIn",
    "RoundPrivacy", "PARTICIPATION_ACTION",
    "PARTICIPATION_MESSAGE_TYPE", "METRIC_EPSILON", "METRIC_DELTA",
]

#: the action of the participation query (``ClientApp.query(PARTICIPATION_ACTION)``)
PARTICIPATION_ACTION = "dpplugins_participation"
#: its Flower message type
PARTICIPATION_MESSAGE_TYPE = "query." + PARTICIPATION_ACTION
#: keys of the round metrics written by :class:`PrivacyAccounting`
METRIC_EPSILON = "dp-epsilon"
METRIC_DELTA = "dp-delta"
_REPLY_KEY = "participation"
_RELATIONS = {
    "replace_one": "user-level replace-one (one client's data replaced; same number of clients)",
    "add_remove": "user-level add/remove (one client added to or removed from the population)",
}


def _log(level: int, message: str, *args: Any) -> None:
    logging.getLogger("flwr").log(level, message, *args)


class ParticipationError(RuntimeError):
    """The federation did not run the protocol the accountant describes (a client did not answer,
    answered twice, reported an index out of range, or was not the expected one); nothing was
    released for the round."""


# -- protocols (no Flower) ---------------------------------------------------------------------
class Participation:
    """Base class of the participation protocols.

    Attributes: ``scheme`` (name sent to the clients), ``neighbouring`` (the user-level relation
    its numbers are for), ``client_side`` (clients decide, the server asks them),
    ``num_clients``, :attr:`block_rounds` (rounds decided by one query; for check-ins one pass).
    """

    scheme: str = ""
    neighbouring: str = ""
    client_side: bool = True

    num_clients: int

    @property
    def block_rounds(self) -> int:
        raise NotImplementedError  # pragma: no cover

    @property
    def expected_updates(self) -> float:
        """Expected number of client updates the server uses in one round."""
        raise NotImplementedError  # pragma: no cover

    def round_event(self, noise_multiplier: float) -> Event:
        """What one round releases (Gaussian noise ``noise_multiplier * C`` on the sum)."""
        raise NotImplementedError  # pragma: no cover

    def run_event(self, noise_multiplier: float, rounds: int) -> Event:
        """What ``rounds`` consecutive rounds from the start of the run release (one event)."""
        rounds = check_count("rounds", rounds, minimum=1)
        return SelfComposedEvent(self.round_event(noise_multiplier), rounds)

    def config(self) -> dict[str, Any]:
        """The parameters the clients need (sent in the participation query)."""
        raise NotImplementedError  # pragma: no cover

    def client_choice(self, client_index: int, rng: np.random.Generator) -> tuple[int, list[int]]:
        """One client's decision for one block, drawn from ``rng`` (the client's randomness):
        ``(slot, rounds)`` -- the raw choice (-1 if it does not check in) and the rounds of the
        block (0-based offsets) in which it takes part."""
        raise NotImplementedError  # pragma: no cover

    def select(self, candidates: list, rng: np.random.Generator) -> list:
        """The clients the server uses in a round among those that take part in it."""
        return list(candidates)

    @property
    def relation(self) -> str:
        return _RELATIONS[self.neighbouring]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.config() == self.config()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.config().items())))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "scheme")
        return f"{type(self).__name__}({params})"


class RandomCheckIns(Participation):
    """Random check-ins (Balle, Kairouz, McMahan, Thakkar, Thakurta 2020) in a federation of
    ``num_clients`` clients; the numbers are **user-level replace-one**.

    * ``variant="fixed"`` (A_fix, Alg. 1, Thm 3.2): at the start of every pass of ``window``
      (``m``) rounds each client checks in with probability ``checkin_probability`` (``p``),
      into a uniformly random round of the pass; in each round the server uses the update of one
      client, chosen uniformly among those that checked in to it; a round without check-ins
      releases the noise alone (a dummy update).
    * ``variant="averaged"`` (A_avg, Thm 4.1): ``p = 1``; the server uses every client that
      checked in to the round (a uniformly random subset of ``max_clients_per_round`` if more);
      the noise is added once to the sum, which the accountant charges as per-client noise
      ``sigma / sqrt(b)`` with ``b = max_clients_per_round`` (``num_clients`` if unset).
    * ``variant="sliding"`` (A_sldw, Thm 4.3): ``p = 1``; client ``j`` (``0 <= j < n``, its
      index: ``partition-id``) checks into a uniform slot of ``{j, ..., j + m - 1}``; a pass runs
      the ``n - m + 1`` slots ``m - 1, ..., n - 1`` as rounds, one client per round (dummy update
      if none); clients whose slot falls outside are not used in that pass.

    The events are those of :class:`dpplugins.samplers.RandomCheckIn` /
    :class:`~dpplugins.samplers.SlidingWindowCheckIn` (``sampler.event(sigma)``), one step per
    round; the ``checkin`` accountant cuts them into passes (a partial last pass counts as a full
    pass).
    """

    scheme = "random_checkin"
    neighbouring = "replace_one"
    client_side = True

    def __init__(self, num_clients: int, window: int, checkin_probability: float = 1.0,
                 variant: str = "fixed", max_clients_per_round: int | None = None) -> None:
        self.num_clients = check_count("num_clients", num_clients, minimum=1)
        self.window = check_count("window", window, minimum=1)
        self.checkin_probability = check_probability("checkin_probability", checkin_probability)
        self.variant = check_choice("variant", variant, ("fixed", "averaged", "sliding"))
        if self.variant != "fixed" and self.checkin_probability != 1.0:
            raise ParameterError("checkin_probability", checkin_probability,
                                 f"1 for variant={variant!r} (Balle et al. 2020, Thms 4.1 and "
                                 "4.3 assume every client checks in)")
        if max_clients_per_round is not None and self.variant != "averaged":
            raise ParameterError("max_clients_per_round", max_clients_per_round,
                                 "None unless variant='averaged' (one client per round)")
        self.max_clients_per_round = (None if max_clients_per_round is None else check_count(
            "max_clients_per_round", max_clients_per_round, minimum=1))
        if self.variant == "sliding":
            if self.window > self.num_clients:
                raise ParameterError("window", window, f"<= num_clients={self.num_clients} "
                                     "(Thm 4.3 needs m in [n])")
            self.sampler = SlidingWindowCheckIn(self.num_clients, self.window, rng=0)
        else:
            self.sampler = RandomCheckIn(self.num_clients, self.window, self.checkin_probability,
                                         self.variant, self.max_clients_per_round, rng=0)

    @property
    def block_rounds(self) -> int:
        """Rounds of one pass: ``window`` (fixed, averaged) or ``n - window + 1`` (sliding)."""
        return self.sampler.steps_per_epoch

    @property
    def expected_updates(self) -> float:
        return float(self.sampler.expected_batch_size)

    def round_event(self, noise_multiplier: float) -> Event:
        return self.sampler.event(noise_multiplier).with_steps(1)

    def run_event(self, noise_multiplier: float, rounds: int) -> Event:
        rounds = check_count("rounds", rounds, minimum=1)
        return self.sampler.event(noise_multiplier).with_steps(rounds)

    def config(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "num_clients": self.num_clients, "window": self.window,
                "checkin_probability": self.checkin_probability, "variant": self.variant,
                "max_clients_per_round": (0 if self.max_clients_per_round is None
                                          else self.max_clients_per_round)}

    def __repr__(self) -> str:
        return (f"RandomCheckIns(num_clients={self.num_clients}, window={self.window}, "
                f"checkin_probability={self.checkin_probability}, variant={self.variant!r}, "
                f"max_clients_per_round={self.max_clients_per_round})")

    def client_choice(self, client_index: int, rng: np.random.Generator) -> tuple[int, list[int]]:
        j = check_count("client_index", client_index, minimum=0)
        if j >= self.num_clients:
            raise ParameterError("client_index", j, f"< num_clients={self.num_clients}")
        if self.variant == "sliding":
            slot = j + int(rng.integers(self.window))
            offset = slot - (self.window - 1)
            return slot, ([offset] if 0 <= offset < self.block_rounds else [])
        if rng.random() < self.checkin_probability:
            slot = int(rng.integers(self.window))
            return slot, [slot]
        return -1, []

    def select(self, candidates: list, rng: np.random.Generator) -> list:
        candidates = list(candidates)
        if not candidates:
            return []
        if self.variant != "averaged":
            return [candidates[int(rng.integers(len(candidates)))]]
        cap = self.max_clients_per_round
        if cap is None or len(candidates) <= cap:
            return candidates
        keep = np.sort(rng.choice(len(candidates), size=cap, replace=False))
        return [candidates[int(i)] for i in keep]


class PoissonSampling(Participation):
    """Poisson client sampling: every client takes part in every round independently with
    probability ``sample_rate`` (``q``), decided by the client itself for ``block_rounds`` rounds
    at a time (the coins do not depend on any data, so drawing them ahead is the same protocol).
    The server uses every client that takes part.  Event ``PoissonSampledEvent(q, Gaussian)``
    per round; the numbers are **user-level add/remove** (the accountants' default for it)."""

    scheme = "poisson"
    neighbouring = "add_remove"
    client_side = True

    def __init__(self, num_clients: int, sample_rate: float, block_rounds: int = 10) -> None:
        self.num_clients = check_count("num_clients", num_clients, minimum=1)
        self.sample_rate = check_probability("sample_rate", sample_rate)
        self._block = check_count("block_rounds", block_rounds, minimum=1)

    @property
    def block_rounds(self) -> int:
        return self._block

    @property
    def expected_updates(self) -> float:
        return self.sample_rate * self.num_clients

    def round_event(self, noise_multiplier: float) -> Event:
        return PoissonSampledEvent(self.sample_rate, GaussianEvent(noise_multiplier))

    def config(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "num_clients": self.num_clients,
                "sample_rate": self.sample_rate, "block_rounds": self._block}

    def client_choice(self, client_index: int, rng: np.random.Generator) -> tuple[int, list[int]]:
        check_count("client_index", client_index, minimum=0)
        joins = np.flatnonzero(rng.random(self._block) < self.sample_rate)
        return int(joins.size), [int(r) for r in joins]


class FixedSizeSampling(Participation):
    """Flower's default sampling: each round the server draws ``clients_per_round`` (``K``) of the
    ``num_clients`` (``N``) clients uniformly without replacement (``FedAvg`` with
    ``fraction_train = K / N``; ``flwr.serverapp.strategy.strategy_utils.sample_nodes``).  Event
    ``FixedBatchEvent(N, K, Gaussian)``; the numbers are **user-level replace-one** (Dong, Roth,
    Su 2022, Thm 4.2 compares federations of equal size).  A Poisson number is not valid for it."""

    scheme = "fixed_size"
    neighbouring = "replace_one"
    client_side = False

    def __init__(self, num_clients: int, clients_per_round: int) -> None:
        self.num_clients = check_count("num_clients", num_clients, minimum=1)
        self.clients_per_round = check_count("clients_per_round", clients_per_round, minimum=1)
        if self.clients_per_round > self.num_clients:
            raise ParameterError("clients_per_round", clients_per_round,
                                 f"<= num_clients={self.num_clients}")

    @property
    def block_rounds(self) -> int:
        return 1

    @property
    def expected_updates(self) -> float:
        return float(self.clients_per_round)

    def round_event(self, noise_multiplier: float) -> Event:
        return FixedBatchEvent(self.num_clients, self.clients_per_round,
                               GaussianEvent(noise_multiplier))

    def config(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "num_clients": self.num_clients,
                "clients_per_round": self.clients_per_round}

    def client_choice(self, client_index: int, rng: np.random.Generator):
        raise ParameterError("participation", self, "a client-side protocol (the server samples "
                             "fixed-size rounds)")


_SCHEMES = {cls.scheme: cls for cls in (RandomCheckIns, PoissonSampling, FixedSizeSampling)}


def participation_from_config(config) -> Participation:
    """The protocol whose :meth:`Participation.config` is ``config`` (a dict or ConfigRecord)."""
    config = dict(config)
    scheme = config.get("scheme")
    if scheme in _SCHEMES:
        try:
            return _participation_of(scheme, config)
        except ParameterError:
            raise      # a protocol parameter out of range names itself
        except (KeyError, TypeError, ValueError) as error:
            raise ParameterError("config", config, f"the config of a {scheme} protocol "
                                 f"(Participation.config()): {type(error).__name__} {error}"
                                 ) from None
    raise ParameterError("config['scheme']", scheme, "one of " + ", ".join(_SCHEMES))


def _participation_of(scheme: str, config: dict) -> Participation:
    if scheme == "random_checkin":
        cap = int(config.get("max_clients_per_round") or 0)
        return RandomCheckIns(int(config["num_clients"]), int(config["window"]),
                              float(config["checkin_probability"]), str(config["variant"]),
                              cap or None)
    if scheme == "poisson":
        return PoissonSampling(int(config["num_clients"]), float(config["sample_rate"]),
                               int(config["block_rounds"]))
    return FixedSizeSampling(int(config["num_clients"]), int(config["clients_per_round"]))


# -- client side ---------------------------------------------------------------------------------
def participation_query(*, seed: int | None = None, protocol: Participation | None = None,
                        client_index: Callable[[Any], int] | None = None,
                        on_choice: Callable[[dict], None] | None = None):
    """The ClientApp function that answers :class:`DPFedAvg`'s participation query.

    The client draws its decision for the block with **its own** randomness:
    ``numpy.random.default_rng()`` (fresh OS entropy) by default, or -- for reproducible tests --
    ``default_rng(SeedSequence(seed, spawn_key=(client_index, block)))``, or ``(client_index,
    block, stream)`` when the server sends a ``stream`` > 0 (a run resumed over a saved
    accountant, whose blocks start again at 0).  ``protocol``, if given, is the protocol this
    client agreed to: a query for another one is answered with an error
    (the server then stops).  ``client_index(context)`` gives the client's index ``j`` (default:
    ``context.node_config["partition-id"]``, which the simulation engine sets and
    ``flower-supernode --node-config "partition-id=3"`` sets on a real deployment); the sliding
    window needs it, the other protocols only report it.  ``on_choice(record)`` is called with
    the decision, the protocol's parameters and the ``stream`` (for audit logs).

    Reply: a ``ConfigRecord`` under ``"participation"`` with ``client-index``, ``block``,
    ``slot`` (the raw choice, -1 for no check-in; for Poisson the number of rounds joined) and
    ``rounds`` (0-based offsets in the block).
    """
    from flwr.app import ConfigRecord, Message, RecordDict

    def query(message, context):
        config = next(iter(message.content.config_records.values()))
        requested = participation_from_config({k: v for k, v in config.items()
                                               if k not in ("block", "first-round", "stream")})
        if protocol is not None and requested != protocol:
            raise ParticipationError(f"the server asked for {requested!r}; this client runs "
                                     f"{protocol!r}")
        block = int(config["block"])
        stream = int(config.get("stream", 0))
        j = int(client_index(context) if client_index is not None
                else context.node_config["partition-id"])
        rng = (np.random.default_rng() if seed is None else
               np.random.default_rng(np.random.SeedSequence(
                   seed, spawn_key=(j, block) if stream == 0 else (j, block, stream))))
        slot, rounds = requested.client_choice(j, rng)
        record = {"client-index": j, "block": block, "slot": int(slot),
                  "rounds": [int(r) for r in rounds]}
        if on_choice is not None:
            on_choice(dict(requested.config(), stream=stream, **record))
        return Message(RecordDict({_REPLY_KEY: ConfigRecord(record)}), reply_to=message)

    return query


def register_participation(app, **options) -> None:
    """Register :func:`participation_query` (``options`` as there) on a ``flwr.clientapp.ClientApp``
    under :data:`PARTICIPATION_ACTION`."""
    app.query(PARTICIPATION_ACTION)(participation_query(**options))


# -- accountants ---------------------------------------------------------------------------------
def valid_accountants(event: Event, neighbouring: str) -> list[tuple[str, dict[str, Any]]]:
    """``(name, options)`` of the registered accountants that give a certified epsilon for
    ``event`` under ``neighbouring``, decided by the accountants themselves: the names
    :func:`~dpplugins.accountants.supporting` returns whose default relation is ``neighbouring``
    (options ``{}``); if there are none, every registered accountant that supports the event when
    created with ``neighbouring=...`` (``supporting`` tries default options only, and e.g. the
    ``fdp`` accountant accepts fixed-size batches only for replace-one).  Estimates
    (``bound_type != "certified upper bound"``) are left out."""
    def certified(acc: Accountant) -> bool:
        return acc.bound_type == "certified upper bound"

    found = []
    for name in supporting(event):
        acc = create(name)
        if acc.neighbouring == neighbouring and certified(acc):
            found.append((name, {}))
    if found:
        return found
    for name in available():
        try:
            acc = create(name, neighbouring=neighbouring)
        except Exception:  # the accountant does not take this relation
            continue
        if certified(acc) and acc.supports(event):
            found.append((name, {"neighbouring": neighbouring}))
    return found


def _describe(candidates) -> str:
    def one(name, opts):
        return name if not opts else f"{name} ({', '.join(f'{k}={v!r}' for k, v in opts.items())})"
    return ", ".join(one(name, opts) for name, opts in candidates) or "none"


def choose_accountant(participation: Participation, noise_multiplier: float,
                      accountant: str | Accountant | None = None) -> Accountant:
    """The accountant for ``participation`` with ``noise_multiplier``: the first of
    :func:`valid_accountants` when ``accountant`` is None; a name must be one of them (it is
    created with the options found there); an instance must support the round's event and be a
    certified upper bound.  Raises :class:`~dpplugins.accountants.UnsupportedEventError` naming
    the valid accountants otherwise -- e.g. ``"pld"`` for :class:`FixedSizeSampling` (a Poisson
    number is not valid for fixed-size rounds)."""
    event = participation.round_event(noise_multiplier)
    candidates = valid_accountants(event, participation.neighbouring)
    if isinstance(accountant, Accountant):
        try:
            accountant.check(event)
        except UnsupportedEventError as error:
            raise UnsupportedEventError(event, accountant.name, f"{error.reason}; for "
                                        f"{type(participation).__name__} use "
                                        f"{_describe(candidates)}",
                                        [n for n, _ in candidates]) from None
        if accountant.bound_type != "certified upper bound":
            raise ParameterError("accountant", accountant.name, "an accountant whose bound_type "
                                 "is 'certified upper bound'")
        return accountant
    if accountant is None:
        if not candidates:
            raise UnsupportedEventError(event, "(any)", f"no registered accountant gives a "
                                        f"certified {participation.neighbouring} epsilon for "
                                        f"{type(participation).__name__}", ())
        name, options = candidates[0]
        return create(name, **options)
    if not isinstance(accountant, str):
        raise ParameterError("accountant", type(accountant).__name__,
                             "None, a registry name or an Accountant instance")
    for name, options in candidates:
        if name == accountant:
            return create(name, **options)
    try:
        reason = ""
        create(accountant).check(event)
    except UnsupportedEventError as error:
        reason = error.reason
    raise UnsupportedEventError(
        event, accountant, (reason + "; " if reason else "") +
        f"{type(participation).__name__} is {participation.relation}; the valid accountants "
        f"are {_describe(candidates)}", [n for n, _ in candidates])


# -- records ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CheckIn:
    """One client's answer to a participation query (server-side record)."""

    block: int
    node_id: int
    client_index: int
    slot: int
    rounds: tuple


@dataclasses.dataclass(frozen=True)
class RoundRecord:
    """What :class:`DPFedAvg` did in one round: ``index`` (0-based, counts every round the
    strategy ran), ``server_round``, position ``block``/``offset`` in the protocol, ``selected``
    (``(node_id, client_index)`` whose updates were summed; ``client_index`` is -1 when unknown),
    the pre-clipping update norms, ``noise_std`` (on the sum), ``denominator`` and ``event``."""

    index: int
    server_round: int
    block: int
    offset: int
    selected: tuple
    update_norms: tuple
    noise_std: float
    denominator: float
    event: Event

    @property
    def num_updates(self) -> int:
        return len(self.selected)


@dataclasses.dataclass(frozen=True)
class RoundPrivacy:
    """What :class:`PrivacyAccounting` recorded for one round: the event composed (``NoOpEvent``
    when nothing was released) and the certified epsilon at ``delta`` after the round."""

    server_round: int
    event: Event
    epsilon: float
    delta: float


# -- server side (needs Flower) --------------------------------------------------------------------
def _flat_norm(arrays) -> float:
    """L2 norm over all arrays, scaled by the largest entry so that finite updates above about
    1e154 do not overflow to inf (they were zeroed instead of clipped); inf or NaN when an entry
    is not finite."""
    top = max((float(np.max(np.abs(a))) for a in arrays if a.size), default=0.0)
    if top == 0.0:
        return 0.0
    if not math.isfinite(top):
        return math.nan if any(np.isnan(a).any() for a in arrays) else math.inf
    # (a NaN that max() passed over makes the sum NaN)
    return top * math.sqrt(sum(float(np.sum(np.square(a / top))) for a in arrays))


def _check_seed(name: str, seed) -> int | None:
    """None, or a non-negative integer seed (numpy's SeedSequence refuses the rest only when
    the round draws, after the clients have trained)."""
    return None if seed is None else check_count(name, seed, minimum=0)


def _check_key(name: str, key) -> str:
    if not isinstance(key, str) or not key:
        raise ParameterError(name, key, "a non-empty string (a Flower record key)")
    return key


def _exact_int(value) -> int:
    """An int from a client's ConfigRecord; TypeError for anything else (floats, bools, strings,
    bytes were truncated or parsed by int(): 2.9 -> 2, "01" -> [0, 1])."""
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _consistent_choice(participation: "Participation", j: int, slot: int, rounds: tuple) -> bool:
    """Whether ``(slot, rounds)`` is a choice ``participation.client_choice(j, .)`` can make."""
    if isinstance(participation, PoissonSampling):
        return slot == len(rounds)
    if isinstance(participation, RandomCheckIns):
        m = participation.window
        if participation.variant == "sliding":
            offset = slot - (m - 1)
            return j <= slot < j + m and rounds == (
                (offset,) if 0 <= offset < participation.block_rounds else ())
        if slot == -1:
            return rounds == () and participation.checkin_probability < 1.0
        return 0 <= slot < m and rounds == (slot,)
    return True


def _wait_for_nodes(grid, n: int, node_wait: float) -> list[int]:
    """The connected node ids once exactly ``n`` are connected (at most ``node_wait`` seconds)."""
    deadline = time.monotonic() + node_wait
    nodes: list[int] = []
    for _ in range(100_000):
        nodes = sorted(grid.get_node_ids())
        if len(nodes) > n:
            raise ParticipationError(f"{len(nodes)} nodes are connected, but the protocol "
                                     f"describes a federation of num_clients={n}")
        if len(nodes) == n or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if len(nodes) != n:
        raise ParticipationError(f"{len(nodes)} of num_clients={n} nodes connected within "
                                 f"node_wait={node_wait:g} s")
    return nodes


class _DPFedAvg:
    """Federated averaging with a participation protocol and central Gaussian noise (server-side
    fixed clipping); the strategy that :class:`PrivacyAccounting` accounts for.

    Parameters
    ----------
    participation : :class:`RandomCheckIns`, :class:`PoissonSampling` or
        :class:`FixedSizeSampling`; the federation must have exactly ``num_clients`` nodes.
    noise_multiplier : ``sigma``; the noise on the sum of the clipped updates is
        ``N(0, (sigma C)^2 I)``, i.e. relative to the clipping norm as in Flower.
    clipping_norm : ``C``; each client's update ``local - global`` is scaled to L2 norm at most
        ``C`` over all arrays.
    server_learning_rate : the global model moves by ``server_learning_rate * (sum + noise) /
        denominator``.
    denominator : fixed, public; default ``participation.expected_updates``.
    arrayrecord_key, configrecord_key : keys of the model and config in the messages (Flower's
        defaults ``"arrays"``, ``"config"``); clients reply with the trained model under
        ``arrayrecord_key``.
    query_timeout : seconds to wait for the participation answers (every client must answer).
    node_wait : seconds to wait for ``num_clients`` nodes to connect.
    noise_seed : seed of the noise (``SeedSequence(noise_seed, spawn_key=(index,))`` per round)
        for tests that reproduce a round; the default draws fresh OS entropy every round.  A
        seeded noise is private only while the seed is secret.
    selection_seed : seed of the server's choice among the clients that checked in to a round.
        Wrapped by :class:`PrivacyAccounting` over an accountant that has recorded ``s > 0``
        steps (a resumed run), both seeds and the clients' seeded choices take ``s`` into their
        keys, so that the resumed rounds do not replay the first run's noise and choices.

    ``rounds`` (:class:`RoundRecord`) and ``checkins`` (:class:`CheckIn`) record what happened;
    they are server-side logs, not covered by the guarantee.  Federated evaluation is not run
    (``configure_evaluate`` returns no messages): evaluate centrally with ``evaluate_fn``.
    """

    def __init__(self, participation: Participation, noise_multiplier: float,
                 clipping_norm: float, *, server_learning_rate: float = 1.0,
                 denominator: float | None = None, arrayrecord_key: str = "arrays",
                 configrecord_key: str = "config", query_timeout: float = 600.0,
                 node_wait: float = 60.0, noise_seed: int | None = None,
                 selection_seed: int | None = None) -> None:
        if not isinstance(participation, Participation):
            raise ParameterError("participation", type(participation).__name__,
                                 "RandomCheckIns, PoissonSampling or FixedSizeSampling")
        self.participation = participation
        self.noise_multiplier = check_nonnegative("noise_multiplier", noise_multiplier)
        self.clipping_norm = check_positive("clipping_norm", clipping_norm)
        self.server_learning_rate = check_positive("server_learning_rate", server_learning_rate)
        self.denominator = (participation.expected_updates if denominator is None
                            else check_positive("denominator", denominator))
        if self.denominator <= 0:
            raise ParameterError("denominator", self.denominator, "> 0")
        self.arrayrecord_key = _check_key("arrayrecord_key", arrayrecord_key)
        self.configrecord_key = _check_key("configrecord_key", configrecord_key)
        self.query_timeout = check_positive("query_timeout", query_timeout)
        self.node_wait = check_nonnegative("node_wait", node_wait)
        self.noise_seed = _check_seed("noise_seed", noise_seed)
        self.selection_seed = _check_seed("selection_seed", selection_seed)
        self._selection_rng = np.random.default_rng(self.selection_seed)
        #: > 0 when PrivacyAccounting resumes a run over an accountant with history: mixed into
        #: the seeded noise, the selection and the clients' seeded choices, which would otherwise
        #: replay those of the first run (block and round indices start again at 0)
        self.stream = 0
        self.rounds: list[RoundRecord] = []
        self.checkins: list[CheckIn] = []
        self._schedule: dict[int, list[tuple[int, int]]] = {}
        self._schedule_block = -1
        self._pending: dict[str, Any] | None = None

    # -- description --------------------------------------------------------------------------
    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise on the sum of the clipped updates."""
        return self.noise_multiplier * self.clipping_norm

    def round_event(self) -> Event:
        """The event of one released round."""
        return self.participation.round_event(self.noise_multiplier)

    def __repr__(self) -> str:
        return (f"DPFedAvg({self.participation!r}, noise_multiplier={self.noise_multiplier}, "
                f"clipping_norm={self.clipping_norm})")

    def summary(self) -> None:
        _log(logging.INFO, "\t├──> dpplugins DPFedAvg: %r", self.participation)
        _log(logging.INFO, "\t│\t├── noise multiplier %s, clipping norm %s (noise std %.4g on "
             "the sum), denominator %.4g", self.noise_multiplier, self.clipping_norm,
             self.noise_std, self.denominator)
        _log(logging.INFO, "\t│\t└── event per round: %r", self.round_event())

    def noise_draw(self, index: int, shapes) -> list[np.ndarray]:
        """The noise of round ``index`` (0-based) on arrays of ``shapes``: i.i.d.
        ``N(0, noise_std^2)``; reproducible only with ``noise_seed``."""
        key = (int(index),) if self.stream == 0 else (int(index), self.stream)
        rng = (np.random.default_rng() if self.noise_seed is None else np.random.default_rng(
            np.random.SeedSequence(self.noise_seed, spawn_key=key)))
        return [rng.normal(0.0, self.noise_std, size=tuple(shape)) if self.noise_std > 0
                else np.zeros(tuple(shape)) for shape in shapes]

    # -- Flower strategy ------------------------------------------------------------------------
    def _nodes(self, grid) -> list[int]:
        return _wait_for_nodes(grid, self.participation.num_clients, self.node_wait)

    def _query(self, grid, nodes: list[int], block: int, server_round: int) -> None:
        flwr = _flwr()
        config = dict(self.participation.config(), block=block, stream=self.stream,
                      **{"first-round": server_round})
        messages = [flwr.Message(flwr.RecordDict({self.configrecord_key:
                                                  flwr.ConfigRecord(config)}),
                                 message_type=PARTICIPATION_MESSAGE_TYPE, dst_node_id=node)
                    for node in nodes]
        replies = list(grid.send_and_receive(messages, timeout=self.query_timeout))
        answers: dict[int, CheckIn] = {}
        seen_index: set[int] = set()
        n, length = self.participation.num_clients, self.participation.block_rounds
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise ParticipationError(f"node {node} answered the participation query of "
                                         f"block {block} with an error: {reply.error.reason}")
            try:
                record = reply.content.config_records[_REPLY_KEY]
                j, slot = _exact_int(record["client-index"]), _exact_int(record["slot"])
                echoed = _exact_int(record["block"])
                if not isinstance(record["rounds"], list):
                    raise TypeError("rounds is not a list")
                rounds = tuple(_exact_int(r) for r in record["rounds"])
            except (KeyError, TypeError) as error:
                raise ParticipationError(f"node {node} answered the participation query of block "
                                         f"{block} with a malformed record ({type(error).__name__}"
                                         f" {error}); expected a ConfigRecord {_REPLY_KEY!r} with "
                                         "integers client-index, block, slot and a list of "
                                         "integers rounds") from None
            if node in answers or node not in nodes or j in seen_index or not 0 <= j < n:
                raise ParticipationError(f"node {node} answered with client index {j}: every "
                                         f"node must answer once with a distinct index in "
                                         f"[0, {n - 1}]")
            if any(not 0 <= r < length for r in rounds) or len(set(rounds)) != len(rounds):
                raise ParticipationError(f"node {node} chose rounds {rounds} outside the "
                                         f"{length} rounds of the block")
            if echoed != block or not _consistent_choice(self.participation, j, slot, rounds):
                raise ParticipationError(f"node {node} (client {j}) answered block {echoed} with "
                                         f"slot {slot}, rounds {rounds}: not a choice of "
                                         f"{self.participation!r} for block {block}")
            seen_index.add(j)
            answers[node] = CheckIn(block, node, j, slot, rounds)
        if len(answers) != len(nodes):
            raise ParticipationError(f"{len(nodes) - len(answers)} of {len(nodes)} clients did "
                                     f"not answer the participation query of block {block} "
                                     f"within {self.query_timeout:g} s (drop-outs are not "
                                     "covered by the protocol's guarantee); nothing was "
                                     "released for this block")
        schedule: dict[int, list[tuple[int, int]]] = {}
        for node in nodes:       # sorted node ids: the candidate order is data-independent
            answer = answers[node]
            self.checkins.append(answer)
            for r in answer.rounds:
                schedule.setdefault(r, []).append((node, answer.client_index))
        self._schedule, self._schedule_block = schedule, block

    def configure_train(self, server_round: int, arrays, config, grid):
        flwr = _flwr()
        if self._pending is not None:
            raise ParticipationError(f"configure_train of round {server_round} before the "
                                     "previous round was aggregated")
        index = len(self.rounds)
        block, offset = divmod(index, self.participation.block_rounds)
        nodes = self._nodes(grid)
        if self.participation.client_side:
            if block != self._schedule_block:
                self._query(grid, nodes, block, server_round)
            selected = self.participation.select(self._schedule.get(offset, []),
                                                 self._selection_rng)
        else:
            chosen, _ = flwr.sample_nodes(grid, self.participation.num_clients,
                                          self.participation.clients_per_round)
            selected = [(int(node), -1) for node in chosen]
        config["server-round"] = server_round
        record = flwr.RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        self._pending = {"index": index, "server_round": server_round, "block": block,
                         "offset": offset, "selected": tuple(selected), "arrays": arrays}
        return [flwr.Message(content=record, message_type=flwr.MessageType.TRAIN,
                             dst_node_id=node) for node, _ in selected]

    def aggregate_train(self, server_round: int, replies):
        flwr = _flwr()
        pending, self._pending = self._pending, None
        if pending is None or pending["server_round"] != server_round:
            raise ParticipationError(f"aggregate_train of round {server_round} without its "
                                     "configure_train")
        expected = {node for node, _ in pending["selected"]}
        got: dict[int, Any] = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise ParticipationError(f"node {node} failed in round {server_round}: "
                                         f"{reply.error.reason}; nothing was released")
            if node not in expected or node in got:
                raise ParticipationError(f"unexpected reply from node {node} in round "
                                         f"{server_round}")
            record = reply.content.array_records.get(self.arrayrecord_key)
            if record is None:
                raise ParticipationError(f"node {node} replied in round {server_round} without an "
                                         f"ArrayRecord {self.arrayrecord_key!r}")
            got[node] = record
        if set(got) != expected:
            raise ParticipationError(f"{len(expected - set(got))} of the {len(expected)} "
                                     f"selected clients did not reply in round {server_round} "
                                     "(drop-outs are not covered); nothing was released")
        current_record = pending["arrays"]
        keys = list(current_record.keys())
        current = [np.asarray(a) for a in current_record.to_numpy_ndarrays()]
        total = [np.zeros(a.shape, dtype=np.float64) for a in current]
        norms = []
        for node, _ in pending["selected"]:
            local = [np.asarray(a) for a in got[node].to_numpy_ndarrays()]
            if list(got[node].keys()) != keys or any(
                    a.shape != c.shape or a.dtype.kind not in "biuf"    # (complex, strings)
                    for a, c in zip(local, current)):
                raise ParticipationError(f"node {node} replied with arrays that do not match "
                                         "the global model")
            delta = [a.astype(np.float64) - c.astype(np.float64) for a, c in zip(local, current)]
            norm = _flat_norm(delta)
            norms.append(norm)
            if not math.isfinite(norm):
                # clipping bounds finite updates only: an inf or NaN update (a diverged local
                # training) made the released model NaN exactly when that client took part;
                # it counts as a zero update (norm 0 <= C), what the accountant assumes
                delta = [np.zeros_like(d) for d in delta]
                norm = 0.0
            scale = 1.0 if norm <= self.clipping_norm else self.clipping_norm / norm
            for t, d in zip(total, delta):
                t += scale * d
        noise = self.noise_draw(pending["index"], [c.shape for c in current])
        step = self.server_learning_rate / self.denominator
        new = [(c.astype(np.float64) + step * (t + z)).astype(c.dtype)
               for c, t, z in zip(current, total, noise)]
        self.rounds.append(RoundRecord(pending["index"], server_round, pending["block"],
                                       pending["offset"], pending["selected"], tuple(norms),
                                       self.noise_std, self.denominator, self.round_event()))
        _log(logging.INFO, "aggregate_train: %d clipped update(s) summed, Gaussian noise std "
             "%.4g added to the sum (denominator %.4g)", len(got), self.noise_std,
             self.denominator)
        return flwr.ArrayRecord({k: flwr.Array(np.asarray(v)) for k, v in zip(keys, new)}), None

    def configure_evaluate(self, server_round: int, arrays, config, grid):
        return []

    def aggregate_evaluate(self, server_round: int, replies):
        return None


def _check_flower_dp_classes(strategy) -> None:
    """ParameterError unless ``strategy`` is exactly Flower's server- or client-side fixed
    clipping wrapper around a FedAvg whose ``configure_train`` and ``aggregate_train`` are
    FedAvg's: a subclass may change how the noise is added, and FedMedian, FedTrimmedAvg, Krum,
    MultiKrum and Bulyan keep FedAvg's configure_train while their aggregate is not the mean
    the noise is calibrated to (found by a hostile sweep: FedMedian moves by 2C when one client
    is replaced, 6.13 reported where the 4 rounds that ran have 24.38)."""
    flwr = _flwr()
    if type(strategy) not in flwr.DP_FIXED_CLIPPING:
        raise ParameterError("strategy", type(strategy).__name__,
                             "DifferentialPrivacyServerSideFixedClipping or "
                             "DifferentialPrivacyClientSideFixedClipping itself, not a "
                             "subclass (its noise and aggregation are accounted)")
    inner = strategy.strategy
    if not isinstance(inner, flwr.FedAvg) or any(
            getattr(type(inner), name) is not getattr(flwr.FedAvg, name)
            for name in ("configure_train", "aggregate_train")):
        raise ParameterError("strategy.strategy", type(inner).__name__,
                             "a FedAvg whose configure_train and aggregate_train are Flower's "
                             "(fixed-size sampling without replacement and the mean of the "
                             "clipped updates, what the noise is calibrated to); FedMedian, "
                             "FedTrimmedAvg, Krum and Bulyan are not")


class _PrivacyAccounting:
    """Strategy wrapper: records the event of every round and reports the certified user-level
    epsilon after it (``MetricRecord`` keys :data:`METRIC_EPSILON`, :data:`METRIC_DELTA` in the
    round's train metrics, i.e. ``result.train_metrics_clientapp[round]``, and the Flower log).

    Parameters
    ----------
    strategy : a :class:`DPFedAvg`, or Flower's ``DifferentialPrivacyServerSideFixedClipping`` /
        ``DifferentialPrivacyClientSideFixedClipping`` wrapping an unmodified ``FedAvg`` (its
        sampling is :class:`FixedSizeSampling`; then ``num_clients`` is required).
    delta : the delta of the reported epsilon.
    accountant : None (choose with :func:`choose_accountant`), a registry name, or an instance.
    num_clients : the population ``N`` for Flower's strategies.
    node_wait : seconds to wait for the ``N`` nodes (Flower's strategies only).

    Which number: replace-one user-level for random check-ins and fixed-size sampling, add/remove
    user-level for Poisson sampling (the chosen accountant's ``neighbouring``; see
    :attr:`relation`).  Every value is the accountant's certified upper bound for all rounds so
    far (a check-in pass that has begun counts as a full pass).  The refusal of a Poisson
    accountant for fixed-size sampling happens here, at construction.

    With Flower's strategies each round must be the accounted mechanism: exactly ``K`` replies
    without error, with finite arrays (Flower's clipping does not bound an infinite or NaN
    update) and equal client weights (Flower's noise ``sigma C / K`` on the weighted
    average is ``N(0, (sigma C)^2)`` on the sum only then); otherwise
    :class:`ParticipationError` is raised before the aggregate is computed.  With
    ``DifferentialPrivacyClientSideFixedClipping`` the clients' ``fixedclipping_mod`` does the
    clipping; the server cannot check it, and the number assumes it.  Flower's own
    ``accountant=`` option of these strategies (no amplification by sampling) is independent of
    this one and may be left unset.
    """

    def __init__(self, strategy, *, delta: float, accountant: str | Accountant | None = None,
                 num_clients: int | None = None, node_wait: float = 60.0) -> None:
        flwr = _flwr()
        self.strategy = strategy
        self.node_wait = check_nonnegative("node_wait", node_wait)
        self.delta = check_real("delta", delta)
        if not 0.0 < self.delta < 1.0:
            raise ParameterError("delta", delta, "in (0, 1)")
        if isinstance(strategy, _DPFedAvg):
            if num_clients is not None and num_clients != strategy.participation.num_clients:
                raise ParameterError("num_clients", num_clients,
                                     f"{strategy.participation.num_clients} (the protocol's) "
                                     "or None")
            self.participation = strategy.participation
            self.noise_multiplier = strategy.noise_multiplier
            self._flower_dp = False
        elif isinstance(strategy, flwr.DifferentialPrivacyFixedClippingBase):
            _check_flower_dp_classes(strategy)
            inner = strategy.strategy
            if num_clients is None:
                raise ParameterError("num_clients", None, "the number of clients N of the "
                                     "federation (Flower's DP strategies sample K of N)")
            k = int(strategy.num_sampled_clients)
            n = check_count("num_clients", num_clients, minimum=1)
            size = max(int(n * inner.fraction_train), inner.min_train_nodes)
            if inner.fraction_train == 0.0 or size != k:
                raise ParameterError("strategy.num_sampled_clients", k, f"the number FedAvg "
                                     f"samples from {n} clients (fraction_train="
                                     f"{inner.fraction_train}, min_train_nodes="
                                     f"{inner.min_train_nodes}: {size})")
            # FedAvg waits (without a time limit) until this many nodes are connected: more
            # than the federation has would hang the first round
            for option, value in (("min_available_nodes", inner.min_available_nodes),
                                  ("min_train_nodes", inner.min_train_nodes)):
                if int(value) > n:
                    raise ParameterError(f"strategy.strategy.{option}", value,
                                         f"at most num_clients={n} (FedAvg would wait for "
                                         "that many nodes without a time limit)")
            if k > n:
                raise ParameterError("strategy.num_sampled_clients", k,
                                     f"at most num_clients={n}")
            self.participation = FixedSizeSampling(n, k)
            self.noise_multiplier = float(strategy.noise_multiplier)
            self._flower_dp = True
        else:
            raise ParameterError("strategy", type(strategy).__name__,
                                 "a DPFedAvg, or Flower's DifferentialPrivacyServerSideFixed"
                                 "Clipping / DifferentialPrivacyClientSideFixedClipping around "
                                 "FedAvg")
        self.event = self.participation.round_event(self.noise_multiplier)
        self.accountant = choose_accountant(self.participation, self.noise_multiplier,
                                            accountant)
        self._check_position()
        #: the strategy's released rounds at construction, and those released through this
        #: wrapper since (a DPFedAvg's own log; Flower's strategies keep none)
        self._rounds_at_start = self._strategy_rounds()
        self._released = 0
        if self._rounds_at_start > self.accountant.steps:
            raise ParameterError(
                "strategy", f"a DPFedAvg that has released {self._rounds_at_start} rounds",
                f"at most the {self.accountant.steps} steps the accountant has recorded",
                "rounds run outside PrivacyAccounting (e.g. strategy.start on the DPFedAvg "
                "itself) are not accounted: wrap the strategy before its first round")
        if isinstance(strategy, _DPFedAvg) and not strategy.rounds and not strategy.checkins:
            # a fresh strategy over an accountant with history: its seeded noise, selection and
            # clients' seeded check-ins must not replay the earlier run's (found by a hostile
            # sweep: with noise_seed the resumed rounds added the very same noise vectors, which
            # cancel between the two runs' releases).  The steps recorded so far: they grow
            # with every round (the history's length does not: equal rounds merge into one
            # entry, so a third run would have replayed the second's)
            strategy.stream = int(self.accountant.steps)
            if strategy.selection_seed is not None and strategy.stream:
                strategy._selection_rng = np.random.default_rng(np.random.SeedSequence(
                    strategy.selection_seed, spawn_key=(strategy.stream,)))
        self.rounds: list[RoundPrivacy] = []
        self._sampled: dict[int, set[int]] = {}
        self._current: dict[int, Any] = {}

    def _strategy_rounds(self) -> int:
        return len(self.strategy.rounds) if isinstance(self.strategy, _DPFedAvg) else 0

    def _check_released(self) -> None:
        """ParameterError if the DPFedAvg released rounds that did not pass through this
        wrapper (found by a hostile sweep: ``dp.start(...)`` on the wrapped DPFedAvg released
        3 Poisson rounds that were never accounted; one more round through the wrapper
        reported 3.53 where the 4 rounds that ran have 6.68)."""
        done = self._strategy_rounds()
        if done != self._rounds_at_start + self._released:
            raise ParameterError(
                "strategy", f"a DPFedAvg that has released {done} rounds",
                f"{self._rounds_at_start + self._released} (those of this PrivacyAccounting)",
                "rounds run outside it (e.g. strategy.start on the DPFedAvg itself) are not "
                "accounted, so no epsilon covers them: run every round through the "
                "PrivacyAccounting")

    def _check_unchanged(self) -> None:
        """ParameterError if the strategy's settings no longer give the accounted round
        (found by a hostile sweep: ``noise_multiplier`` lowered from 3 to 0.3 after wrapping,
        4 rounds reported 6.13 where those that ran have 144.9; likewise Flower's
        ``num_sampled_clients``, which scales its noise)."""
        strategy = self.strategy
        if self._flower_dp:
            _check_flower_dp_classes(strategy)   # the inner strategy may have been replaced
            k = int(strategy.num_sampled_clients)
            live = FixedSizeSampling(self.participation.num_clients, k).round_event(
                float(strategy.noise_multiplier)) \
                if 0 < k <= self.participation.num_clients else None
        else:
            live = strategy.round_event() if strategy.participation is self.participation \
                else None
        if live != self.event:
            raise ParameterError("strategy", f"a strategy whose round is now {live!r}",
                                 f"the round it was wrapped with, {self.event!r}",
                                 "a changed noise multiplier, number of sampled clients or "
                                 "participation is not what the accountant records: wrap a "
                                 "new strategy (with the same accountant) for new settings")

    def _check_position(self) -> None:
        """ParameterError unless the strategy and the accountant stand at the same round of a
        pass.  The accountant cuts passes from the rounds it recorded
        (:mod:`dpplugins.passes`); the strategy starts a new pass (a fresh check-in of every
        client) every ``block_rounds`` of its own rounds.  Found by a hostile sweep: a
        ``DPFedAvg`` that had run one round of a two-round window, wrapped again, ran the
        second half of that pass and the first of the next (a client in both) accounted as
        one pass, 9.997 where two passes give 15.456; a saved accountant that ended mid-pass
        resumed with a new ``DPFedAvg`` (a fresh check-in) likewise.  Checked at construction
        and again before every round is configured and released: two wrappers sharing one
        accountant, whose rounds interleave, charged one pass for two independent half-passes
        (a client may check in to both)."""
        if not isinstance(self.event, ProtocolEvent):
            return      # Poisson and fixed-size rounds: no passes
        done = len(self.strategy.rounds) if isinstance(self.strategy, _DPFedAvg) else 0
        recorded = extend_run(0, self.accountant.history, self.event.protocol_key())
        per_pass = self.event.steps_per_epoch
        if done % per_pass != recorded % per_pass or recorded < done:
            raise ParameterError(
                "strategy", f"a strategy at round {done} of its run, round {done % per_pass} "
                f"of a {per_pass}-round pass",
                f"at the accountant's place: {recorded} rounds of this protocol recorded, "
                f"round {recorded % per_pass} of a pass", "account a run with one "
                "PrivacyAccounting over a fresh DPFedAvg (and a fresh accountant), or resume "
                "with the accountant and the strategy saved at the same round; a pass cut short "
                "and a fresh check-in would be accounted as one pass")

    # -- description --------------------------------------------------------------------------
    @property
    def neighbouring(self) -> str:
        return self.accountant.neighbouring

    @property
    def relation(self) -> str:
        """The neighbouring relation of the reported numbers, in words."""
        return _RELATIONS[self.accountant.neighbouring]

    @property
    def epsilon(self) -> float:
        """Certified epsilon at ``delta`` for the rounds so far (a ParameterError if the
        DPFedAvg released rounds outside this wrapper)."""
        self._check_released()
        return self.accountant.get_epsilon(self.delta)

    def report(self) -> dict[str, Any]:
        """Accountant, theorem, bound type, relation, delta, epsilon and rounds (JSON-ready)."""
        return {"accountant": self.accountant.name, "theorem": self.accountant.theorem,
                "bound_type": self.accountant.bound_type, "neighbouring": self.neighbouring,
                "relation": self.relation, "participation": repr(self.participation),
                "event_per_round": self.event.to_dict(), "delta": self.delta,
                "epsilon": self.epsilon, "rounds": len(self.rounds)}

    def __repr__(self) -> str:
        return (f"PrivacyAccounting({self.strategy!r}, delta={self.delta}, "
                f"accountant={self.accountant.name!r})")

    def summary(self) -> None:
        _log(logging.INFO, "\t├──> dpplugins PrivacyAccounting: accountant %r (%s), %s, "
             "delta=%g", self.accountant.name, self.accountant.bound_type, self.relation,
             self.delta)
        self.strategy.summary()

    # -- Flower strategy ------------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays, config, grid):
        self._check_position()  # another run may share the accountant (see _check_position)
        self._check_released()
        self._check_unchanged()
        if self._flower_dp:     # FedAvg's own wait for nodes has no time limit
            _wait_for_nodes(grid, self.participation.num_clients, self.node_wait)
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        if self._flower_dp:
            nodes = set(grid.get_node_ids())
            sampled = {m.metadata.dst_node_id for m in messages}
            k, n = self.participation.clients_per_round, self.participation.num_clients
            if len(nodes) != n or len(messages) != k or len(sampled) != k:
                raise ParticipationError(f"round {server_round}: {len(sampled)} distinct of "
                                         f"{len(nodes)} nodes sampled; the accounted protocol "
                                         f"is {k} of {n}")
            self._sampled[server_round] = sampled
            self._current[server_round] = arrays
        return messages

    def aggregate_train(self, server_round: int, replies):
        flwr = _flwr()
        replies = list(replies)
        if self._flower_dp:
            self._check_flower_replies(server_round, replies)
        self._check_position()  # before the release
        self._check_released()
        self._check_unchanged()
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        released = arrays is not None
        event = self.event if released else NoOpEvent()
        if released:
            self.accountant.compose(self.event)
            self._released += int(isinstance(self.strategy, _DPFedAvg))
        epsilon = self.accountant.get_epsilon(self.delta)
        self.rounds.append(RoundPrivacy(server_round, event, epsilon, self.delta))
        out = flwr.MetricRecord(dict(metrics) if metrics is not None else {})
        out[METRIC_EPSILON] = float(epsilon)
        out[METRIC_DELTA] = float(self.delta)
        _log(logging.INFO, "[dpplugins] round %d: certified epsilon = %.4f at delta = %g "
             "(%s; accountant %r, %s)", server_round, epsilon, self.delta, self.relation,
             self.accountant.name, self.accountant.bound_type)
        return arrays, out

    def _check_flower_replies(self, server_round: int, replies) -> None:
        sampled = self._sampled.pop(server_round, set())
        current = self._current.pop(server_round, None)
        nodes = [r.metadata.src_node_id for r in replies if not r.has_error()]
        if len(nodes) != len(replies) or set(nodes) != sampled or len(nodes) != len(sampled):
            raise ParticipationError(f"round {server_round}: {len(nodes)} good replies from the "
                                     f"{len(sampled)} sampled clients; Flower's noise is "
                                     "calibrated to all of them (nothing was released)")
        for reply in replies:
            for record in reply.content.array_records.values():
                if not all(np.all(np.isfinite(a)) for a in record.to_numpy_ndarrays()):
                    raise ParticipationError(
                        f"round {server_round}: node {reply.metadata.src_node_id} replied with "
                        "non-finite arrays; Flower's clipping does not bound them (its noisy "
                        "average would be NaN); nothing was released")
        if current is not None and isinstance(self.strategy, _flwr().DP_FIXED_CLIPPING[0]):
            self._check_nonzero_updates(server_round, replies, current)
        key = self.strategy.strategy.weighted_by_key
        weights = []
        for reply in replies:
            for record in reply.content.metric_records.values():
                if key in record:
                    weights.append(float(record[key]))
        if len(weights) != len(replies) or len(set(weights)) > 1 or not all(
                w > 0 for w in weights):   # (weights 0 divided by 0 in Flower's average)
            raise ParticipationError(f"round {server_round}: client weights {weights!r} under "
                                     f"{key!r}; the accounted mechanism averages equally "
                                     "weighted clipped updates (send the same weight, e.g. 1)")

    @staticmethod
    def _check_nonzero_updates(server_round: int, replies, current) -> None:
        """Flower's server-side clipping divides by the norm of each update, so a client that
        returns the global model unchanged (no local data, learning rate 0) stopped the round
        with a ZeroDivisionError inside Flower (found by a hostile sweep; flwr 1.42).  Nothing
        is released either way; this says why, and what to do."""
        base = current.to_numpy_ndarrays()
        for reply in replies:
            for record in reply.content.array_records.values():
                arrays = record.to_numpy_ndarrays()
                if len(arrays) == len(base) and all(
                        np.shape(a) == np.shape(b) and np.array_equal(a, b)
                        for a, b in zip(arrays, base)):
                    raise ParticipationError(
                        f"round {server_round}: node {reply.metadata.src_node_id} returned the "
                        "global model unchanged (a zero update), and Flower's server-side "
                        "clipping divides by the update's norm; nothing was released.  Have "
                        "every sampled client train, or use DPFedAvg, which clips a zero update "
                        "as zero")

    def configure_evaluate(self, server_round: int, arrays, config, grid):
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies):
        return self.strategy.aggregate_evaluate(server_round, replies)


@functools.lru_cache(maxsize=None)
def _flwr():
    """Flower's names used here (imported on first use)."""
    try:
        from flwr.app import (Array, ArrayRecord, ConfigRecord, Message, MessageType,
                              MetricRecord, RecordDict)
        from flwr.serverapp.strategy import FedAvg, Strategy
        from flwr.serverapp.strategy import (DifferentialPrivacyClientSideFixedClipping,
                                             DifferentialPrivacyServerSideFixedClipping)
        from flwr.serverapp.strategy.dp_fixed_clipping import \
            DifferentialPrivacyFixedClippingBase
        from flwr.serverapp.strategy.strategy_utils import sample_nodes
    except ImportError as error:  # pragma: no cover - exercised without flwr
        raise ImportError("dpplugins.integrations.flower needs Flower's Message API (flwr "
                          ">= 1.22, tested with 1.42.0): pip install 'dpplugins[flower]'"
                          ) from error
    import types
    return types.SimpleNamespace(
        Array=Array, ArrayRecord=ArrayRecord, ConfigRecord=ConfigRecord, Message=Message,
        MessageType=MessageType, MetricRecord=MetricRecord, RecordDict=RecordDict,
        FedAvg=FedAvg, Strategy=Strategy, sample_nodes=sample_nodes,
        DifferentialPrivacyFixedClippingBase=DifferentialPrivacyFixedClippingBase,
        DP_FIXED_CLIPPING=(DifferentialPrivacyServerSideFixedClipping,
                           DifferentialPrivacyClientSideFixedClipping))


@functools.lru_cache(maxsize=None)
def _strategy_classes() -> dict[str, type]:
    base = _flwr().Strategy
    out = {}
    for name, logic in (("DPFedAvg", _DPFedAvg), ("PrivacyAccounting", _PrivacyAccounting)):
        out[name] = type(name, (logic, base), {"__module__": __name__, "__qualname__": name,
                                               "__doc__": logic.__doc__})
    return out


def __getattr__(name: str):
    if name in ("DPFedAvg", "PrivacyAccounting"):
        return _strategy_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
