"""A real Flower federation (simulation engine, Ray on 127.0.0.1, 12 clients, 2 CPUs) with
random check-ins, the sliding window, Poisson and fixed-size sampling (ours and Flower's own
DifferentialPrivacyServerSideFixedClipping), checked against the protocols and the offline
accountants.  Runs in the Flower venv (.ci/flower_leg.sh); skipped where flwr is not installed.

Every statistical test below uses significance ALPHA = 0.001 (a correct implementation fails
one such test with probability 0.001); the seeds are fixed, so the outcome is reproducible.
"""

import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

# Loopback only: no Flower telemetry, no Ray usage stats, Ray bound to 127.0.0.1.  Read when
# flwr / ray are imported, so set before.
os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"   # Ray's node address: 127.0.0.1
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

flwr = pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402
from flwr.serverapp.strategy import (DifferentialPrivacyServerSideFixedClipping,  # noqa: E402
                                     FedAvg)
from flwr.simulation import run_simulation  # noqa: E402

from dpplugins.accountants import UnsupportedEventError, create, supporting  # noqa: E402
from dpplugins.errors import ParameterError  # noqa: E402
from dpplugins.events import (FixedBatchEvent, GaussianEvent, PoissonSampledEvent,  # noqa: E402
                              RandomCheckInEvent, SelfComposedEvent)
from dpplugins.integrations.flower import (METRIC_DELTA, METRIC_EPSILON,  # noqa: E402
                                           DPFedAvg, FixedSizeSampling, ParticipationError,
                                           PoissonSampling, PrivacyAccounting, RandomCheckIns,
                                           register_participation)
from dpplugins.samplers import RandomCheckIn, SlidingWindowCheckIn  # noqa: E402

ALPHA = 1e-3
N = 12                       # clients (SuperNodes)
DELTA = 1e-5
SIGMA, CLIP, LR = 1.0, 1.0, 1.0
CLIENT_SEED = 2024
SHAPES = {"w": (4, 3), "b": (3,)}
#: run -> (protocol, rounds); the fixed window runs 6 passes, the sliding window 1 pass
RUNS = {
    "checkin": (RandomCheckIns(N, window=4, checkin_probability=0.5), 24),
    "sliding": (RandomCheckIns(N, window=4, variant="sliding"), 9),
    "poisson": (PoissonSampling(N, 0.25, block_rounds=6), 12),
    "fixed": (FixedSizeSampling(N, 3), 6),
}
FLOWER_ROUNDS = 4
NOISE_SEEDS = {"checkin": 11, "sliding": 12, "poisson": 13, "fixed": 14}
#: run "diverged": clients whose local training returns an infinite or NaN model
DIVERGED = {0: np.inf, 1: np.nan}
DIVERGED_RUN = (PoissonSampling(N, 0.5, block_rounds=3), 3)
#: rounds of the run resumed over the "poisson" run's accountant (one block)
RESUMED_ROUNDS = 6


def client_update(j):
    """Client j's (deterministic) update: norm 0.3 (j + 1), so clients 3..11 are clipped."""
    rng = np.random.default_rng(100 + j)
    parts = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    norm = np.sqrt(sum(np.sum(v ** 2) for v in parts.values()))
    return {k: v * 0.3 * (j + 1) / norm for k, v in parts.items()}


def clipped(update, c=CLIP):
    norm = np.sqrt(sum(np.sum(v ** 2) for v in update.values()))
    return {k: v * min(1.0, c / norm) for k, v in update.items()}


def read_logs(log_dir):
    entries = []
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name)) as f:
            entries.extend(json.loads(line) for line in f)
    return entries


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """One simulation: the runs of RUNS with DPFedAvg + PrivacyAccounting, then Flower's own
    DP strategy for FLOWER_ROUNDS rounds, all on the same 12 SuperNodes."""
    log_dir = str(tmp_path_factory.mktemp("client_logs"))

    def append(j, record):
        with open(os.path.join(log_dir, f"client-{j}.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    client = ClientApp()
    register_participation(client, seed=CLIENT_SEED,
                           on_choice=lambda r: append(r["client-index"], dict(r, kind="choice")))

    @client.train()
    def train(msg, context):
        j = int(context.node_config["partition-id"])
        config = msg.content["config"]
        append(j, {"kind": "train", "j": j, "run": config["run"],
                   "server-round": int(config["server-round"])})
        arrays = msg.content["arrays"]
        update = client_update(j)
        if config["run"] == "flower_diverged" or (config["run"] == "diverged"
                                                  and j in DIVERGED):
            update = {k: np.full(v.shape, DIVERGED.get(j, np.nan)) for k, v in update.items()}
        local = {k: np.asarray(v) + update[k] for k, v in zip(arrays.keys(),
                                                              arrays.to_numpy_ndarrays())}
        return Message(RecordDict({"arrays": ArrayRecord({k: flwr.app.Array(v)
                                                          for k, v in local.items()}),
                                   "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    out = {"strategies": {}, "results": {}, "models": {}, "errors": {}}
    server = ServerApp()

    def initial():
        return ArrayRecord({k: flwr.app.Array(np.zeros(s)) for k, s in SHAPES.items()})

    def run(tag, strategy, rounds):
        models = out["models"][tag] = {}

        def evaluate(server_round, arrays):
            models[server_round] = {k: np.array(v) for k, v in zip(arrays.keys(),
                                                                   arrays.to_numpy_ndarrays())}
            return None
        out["strategies"][tag] = strategy
        out["results"][tag] = strategy.start(grid=out["grid"], initial_arrays=initial(),
                                             num_rounds=rounds, timeout=300,
                                             train_config=ConfigRecord({"run": tag}),
                                             evaluate_fn=evaluate)

    @server.main()
    def main(grid, context):
        out["grid"] = grid
        for tag, (protocol, rounds) in RUNS.items():
            strategy = DPFedAvg(protocol, SIGMA, CLIP, server_learning_rate=LR,
                                noise_seed=NOISE_SEEDS[tag], selection_seed=5, query_timeout=300)
            run(tag, PrivacyAccounting(strategy, delta=DELTA), rounds)
        protocol, rounds = DIVERGED_RUN
        run("diverged", PrivacyAccounting(DPFedAvg(protocol, SIGMA, CLIP, server_learning_rate=LR,
                                                   noise_seed=15, selection_seed=5,
                                                   query_timeout=300), delta=DELTA), rounds)
        # a second run over the "poisson" run's accountant, with the same seeds everywhere
        resumed = DPFedAvg(RUNS["poisson"][0], SIGMA, CLIP, server_learning_rate=LR,
                           noise_seed=NOISE_SEEDS["poisson"], selection_seed=5, query_timeout=300)
        run("resumed", PrivacyAccounting(
            resumed, delta=DELTA, accountant=out["strategies"]["poisson"].accountant),
            RESUMED_ROUNDS)
        flower = DifferentialPrivacyServerSideFixedClipping(
            FedAvg(fraction_train=0.25, fraction_evaluate=0.0, min_train_nodes=3,
                   min_available_nodes=N), SIGMA, CLIP, 3)
        run("flower_dp", PrivacyAccounting(flower, delta=DELTA, num_clients=N), FLOWER_ROUNDS)
        flower = DifferentialPrivacyServerSideFixedClipping(
            FedAvg(fraction_train=0.25, fraction_evaluate=0.0, min_train_nodes=3,
                   min_available_nodes=N), SIGMA, CLIP, 3)
        try:   # every client's training diverges: refused before anything is released
            run("flower_diverged", PrivacyAccounting(flower, delta=DELTA, num_clients=N), 1)
        except Exception as error:   # (the other runs' tests go on whatever happens here)
            out["errors"]["flower_diverged"] = f"{type(error).__name__}: {error}"

    run_simulation(server, client, num_supernodes=N, backend_config={
        "client_resources": {"num_cpus": 1},
        "init_args": {"num_cpus": 2, "include_dashboard": False, "logging_level": "ERROR",
                      "object_store_memory": 128 * 1024 * 1024}})
    out["logs"] = read_logs(log_dir)
    assert set(RUNS) | {"flower_dp", "diverged", "resumed"} <= set(out["results"]), \
        "the ServerApp did not finish"
    return out


def choices(fed, variant, stream=0):
    """The clients' own records of their participation decisions in the run of RUNS with
    ``variant`` ("fixed" check-ins, "sliding", "poisson"); ``stream``: of the run resumed over
    an accountant that had recorded that many steps."""
    config = RUNS[{"fixed": "checkin"}.get(variant, variant)][0].config()
    return [e for e in fed["logs"] if e["kind"] == "choice" and e.get("stream", 0) == stream
            and all(e.get(k) == v for k, v in config.items())]


def trained(fed, tag):
    """server round -> sorted client indices that trained in run ``tag`` (the clients' logs)."""
    out = {}
    for e in fed["logs"]:
        if e["kind"] == "train" and e["run"] == tag:
            out.setdefault(e["server-round"], []).append(e["j"])
    return {r: sorted(v) for r, v in out.items()}


def selected(strategy):
    """server round -> sorted client indices DPFedAvg summed (its own record)."""
    return {rec.server_round: sorted(j for _, j in rec.selected) for rec in strategy.rounds}


def epsilons(fed, tag):
    metrics = fed["results"][tag].train_metrics_clientapp
    return {r: m[METRIC_EPSILON] for r, m in metrics.items()}


# -- the protocols the clients ran ----------------------------------------------------------------
def test_checkin_frequencies_match_the_protocol(federation):
    """Fixed window (m = 4, p = 1/2): every (client, pass) decision is 'no' w.p. 1/2, else a
    uniform round of the pass; pooled chi-square over the 5 outcomes and per-client
    chi-square of the check-in counts, both at ALPHA."""
    protocol, rounds = RUNS["checkin"]
    records = choices(federation, "fixed")
    passes = rounds // protocol.window
    assert len(records) == N * passes
    assert sorted((e["client-index"], e["block"]) for e in records) == sorted(
        (j, b) for j in range(N) for b in range(passes))
    p, m = protocol.checkin_probability, protocol.window
    observed = np.array([sum(e["slot"] == s for e in records) for s in [-1, *range(m)]])
    expected = len(records) * np.array([1 - p] + [p / m] * m)
    assert stats.chisquare(observed, expected).pvalue > ALPHA
    per_client = np.array([sum(e["slot"] >= 0 for e in records if e["client-index"] == j)
                           for j in range(N)])
    statistic = np.sum((per_client - passes * p) ** 2 / (passes * p * (1 - p)))
    assert stats.chi2.sf(statistic, df=N) > ALPHA
    # each decision is the client's own draw from its own generator (seeded for the test)
    for e in records:
        rng = np.random.default_rng(np.random.SeedSequence(CLIENT_SEED,
                                                           spawn_key=(e["client-index"],
                                                                      e["block"])))
        slot = int(rng.integers(m)) if rng.random() < p else -1
        assert e["slot"] == slot and e["rounds"] == ([slot] if slot >= 0 else [])


def test_sliding_window_and_poisson_frequencies(federation):
    """Sliding window: client j's slot - j is uniform on {0, .., m-1}; Poisson: each client joins
    each round w.p. q (pooled and per-client chi-square at ALPHA)."""
    protocol, _ = RUNS["sliding"]
    records = choices(federation, "sliding")
    assert sorted(e["client-index"] for e in records) == list(range(N))
    shifts = np.array([e["slot"] - e["client-index"] for e in records])
    assert set(shifts) <= set(range(protocol.window))
    observed = np.bincount(shifts, minlength=protocol.window)
    assert stats.chisquare(observed).pvalue > ALPHA
    for e in records:
        offset = e["slot"] - (protocol.window - 1)
        assert e["rounds"] == ([offset] if 0 <= offset < N - protocol.window + 1 else [])

    protocol, rounds = RUNS["poisson"]
    records = choices(federation, "poisson")
    assert len(records) == N * rounds // protocol.block_rounds
    joins = np.zeros(N)
    for e in records:
        joins[e["client-index"]] += len(e["rounds"])
    q, total = protocol.sample_rate, N * rounds
    assert stats.chisquare([joins.sum(), total - joins.sum()],
                           [q * total, (1 - q) * total]).pvalue > ALPHA
    statistic = np.sum((joins - rounds * q) ** 2 / (rounds * q * (1 - q)))
    assert stats.chi2.sf(statistic, df=N) > ALPHA


# -- what the server recorded ----------------------------------------------------------------------
def test_recorded_events_equal_what_happened(federation):
    fed = federation
    # fixed-window check-ins: the round's update is one of the clients that checked in to it
    protocol, rounds = RUNS["checkin"]
    strategy = fed["strategies"]["checkin"]
    inner = strategy.strategy
    checked_in = {}
    for e in choices(fed, "fixed"):
        for offset in e["rounds"]:
            checked_in.setdefault(e["block"] * protocol.window + offset + 1, set()).add(
                e["client-index"])
    did_train, used = trained(fed, "checkin"), selected(inner)
    assert sorted(used) == list(range(1, rounds + 1))
    for r in range(1, rounds + 1):
        assert used[r] == did_train.get(r, [])
        if r in checked_in:
            assert len(used[r]) == 1 and used[r][0] in checked_in[r]
        else:
            assert used[r] == []
    assert sorted((c.client_index, c.block, c.slot) for c in inner.checkins) == sorted(
        (e["client-index"], e["block"], e["slot"]) for e in choices(fed, "fixed"))
    step = RandomCheckInEvent(N, GaussianEvent(SIGMA), "fixed", 4, None, 0.5, None, False,
                              Fraction(1, 4))
    assert [rp.event for rp in strategy.rounds] == [step] * rounds
    assert strategy.accountant.history == [SelfComposedEvent(step, rounds)]
    assert [rp.server_round for rp in strategy.rounds] == list(range(1, rounds + 1))

    # sliding window: one client per round among those whose slot is that round
    protocol, rounds = RUNS["sliding"]
    inner = fed["strategies"]["sliding"].strategy
    slot_of = {e["client-index"]: e["slot"] for e in choices(fed, "sliding")}
    did_train, used = trained(fed, "sliding"), selected(inner)
    for r in range(1, rounds + 1):
        wanted = {j for j, s in slot_of.items() if s - (protocol.window - 1) == r - 1}
        assert used[r] == did_train.get(r, [])
        assert (len(used[r]) == 1 and used[r][0] in wanted) if wanted else used[r] == []
    sliding_step = SlidingWindowCheckIn(N, 4).event(SIGMA).with_steps(1)
    assert all(rp.event == sliding_step for rp in fed["strategies"]["sliding"].rounds)

    # Poisson: exactly the clients whose own coins said so
    protocol, rounds = RUNS["poisson"]
    joined = {}
    for e in choices(fed, "poisson"):
        for offset in e["rounds"]:
            joined.setdefault(e["block"] * protocol.block_rounds + offset + 1, []).append(
                e["client-index"])
    did_train, used = trained(fed, "poisson"), selected(fed["strategies"]["poisson"].strategy)
    for r in range(1, rounds + 1):
        assert used[r] == did_train.get(r, []) == sorted(joined.get(r, []))
    assert all(rp.event == PoissonSampledEvent(0.25, GaussianEvent(SIGMA))
               for rp in fed["strategies"]["poisson"].rounds)

    # fixed size (ours and Flower's FedAvg): exactly K distinct clients every round
    for tag, rounds in (("fixed", RUNS["fixed"][1]), ("flower_dp", FLOWER_ROUNDS)):
        did_train = trained(fed, tag)
        assert sorted(did_train) == list(range(1, rounds + 1))
        assert all(len(set(v)) == len(v) == 3 for v in did_train.values())
        events = [rp.event for rp in fed["strategies"][tag].rounds]
        assert events == [FixedBatchEvent(N, 3, GaussianEvent(SIGMA))] * rounds
    assert {r: len(v) for r, v in selected(fed["strategies"]["fixed"].strategy).items()} == {
        r: 3 for r in range(1, RUNS["fixed"][1] + 1)}


def test_round_metrics_and_relations(federation):
    expected = {"checkin": ("checkin", "replace_one"), "sliding": ("checkin", "replace_one"),
                "poisson": (None, "add_remove"), "fixed": ("fdp", "replace_one"),
                "flower_dp": ("fdp", "replace_one")}
    for tag, (name, relation) in expected.items():
        strategy = federation["strategies"][tag]
        report = strategy.report()
        assert report["neighbouring"] == relation and report["delta"] == DELTA
        assert report["bound_type"] == "certified upper bound"
        if name is not None:
            assert report["accountant"] == name
        assert report["accountant"] in supporting(strategy.event) or relation == "replace_one"
        metrics = federation["results"][tag].train_metrics_clientapp
        assert all(m[METRIC_DELTA] == DELTA for m in metrics.values())
        eps = [metrics[r][METRIC_EPSILON] for r in sorted(metrics)]
        assert all(np.isfinite(eps)) and all(a <= b + 1e-9 for a, b in zip(eps, eps[1:]))
        assert [rp.epsilon for rp in strategy.rounds] == eps


# -- epsilon ---------------------------------------------------------------------------------------
def test_epsilon_per_round_equals_the_offline_accountant(federation):
    """The number reported after round r equals a fresh accountant given the sampler's event
    for r rounds (computed without the integration)."""
    fed = federation

    def offline(name, event, count=1, **options):
        acc = create(name, **options)
        acc.compose(event, count)
        return acc.get_epsilon(DELTA)

    eps = epsilons(fed, "checkin")
    for r in (1, 2, 4, 5, 13, 24):
        event = RandomCheckIn(N, 4, 0.5, rng=0).event(SIGMA, Fraction(r, 4))
        assert eps[r] == pytest.approx(offline("checkin", event), rel=1e-12)
    assert eps[1] == eps[4] < eps[5]        # a begun pass counts as a full pass
    eps = epsilons(fed, "sliding")
    for r in (1, 9):
        event = SlidingWindowCheckIn(N, 4, rng=0).event(SIGMA, Fraction(r, 9))
        assert eps[r] == pytest.approx(offline("checkin", event), rel=1e-12)
    eps = epsilons(fed, "poisson")
    name = fed["strategies"]["poisson"].accountant.name
    for r in range(1, RUNS["poisson"][1] + 1):
        event = PoissonSampledEvent(0.25, GaussianEvent(SIGMA))
        assert eps[r] == pytest.approx(offline(name, event, r), rel=1e-12)
        assert eps[r] == pytest.approx(offline("pld", event, r), rel=1e-9)
    fixed = FixedBatchEvent(N, 3, GaussianEvent(SIGMA))
    for tag, rounds in (("fixed", RUNS["fixed"][1]), ("flower_dp", FLOWER_ROUNDS)):
        eps = epsilons(fed, tag)
        for r in range(1, rounds + 1):
            assert eps[r] == pytest.approx(offline("fdp", fixed, r, neighbouring="replace_one"),
                                           rel=1e-12)


# -- the noise -------------------------------------------------------------------------------------
def test_round_without_checkins_adds_noise_only(federation):
    """In a round nobody checked in to, no client trains and the global model moves by exactly
    the round's Gaussian noise (lr / D) N(0, (sigma C)^2 I); in a round with a check-in it moves
    by (lr / D) (clip(update) + noise).  The noise of the empty rounds also passes a chi-square
    test of its variance at ALPHA."""
    strategy = federation["strategies"]["checkin"].strategy
    models = federation["models"]["checkin"]
    did_train = trained(federation, "checkin")
    empty = [rec for rec in strategy.rounds if not rec.selected]
    assert empty, "the seeds give rounds without check-ins"
    scale = LR / strategy.denominator
    z2, count = 0.0, 0
    for rec in strategy.rounds:
        r = rec.server_round
        step = {k: models[r][k] - models[r - 1][k] for k in SHAPES}
        noise = dict(zip(SHAPES, strategy.noise_draw(rec.index, SHAPES.values())))
        signal = ({k: 0.0 for k in SHAPES} if not rec.selected
                  else clipped(client_update(rec.selected[0][1])))
        for k in SHAPES:
            np.testing.assert_allclose(step[k], scale * (signal[k] + noise[k]), rtol=1e-10,
                                       atol=1e-12)
        if not rec.selected:
            assert r not in did_train
            assert all(np.any(step[k] != 0) for k in SHAPES)
            z2 += sum(np.sum((step[k] / (scale * SIGMA * CLIP)) ** 2) for k in SHAPES)
            count += sum(int(np.prod(s)) for s in SHAPES.values())
    assert stats.chi2.sf(z2, df=count) > ALPHA and stats.chi2.cdf(z2, df=count) > ALPHA


def test_flower_dp_noise_has_the_accounted_scale(federation):
    """Flower's DifferentialPrivacyServerSideFixedClipping: new = old + mean(clip(updates)) +
    N(0, (sigma C / K)^2); the residual passes a two-sided chi-square test at ALPHA."""
    models, did_train = federation["models"]["flower_dp"], trained(federation, "flower_dp")
    z2, count = 0.0, 0
    for r in range(1, FLOWER_ROUNDS + 1):
        mean = {k: np.mean([clipped(client_update(j))[k] for j in did_train[r]], axis=0)
                for k in SHAPES}
        for k in SHAPES:
            residual = models[r][k] - models[r - 1][k] - mean[k]
            z2 += np.sum((residual / (SIGMA * CLIP / 3)) ** 2)
            count += residual.size
    assert stats.chi2.sf(z2, df=count) > ALPHA and stats.chi2.cdf(z2, df=count) > ALPHA


def test_a_diverged_client_update_counts_as_zero(federation):
    """A client whose local training returns an infinite or NaN model made the released model
    NaN exactly in the rounds it took part in (C / norm with norm NaN, 0 x inf), while epsilon
    was reported finite: taking part was visible with probability q.  Such an update now counts
    as zero (what clipping to norm C allows): every released model is finite and moves by
    (lr / D) (sum of the other selected clients' clipped updates + the round's noise)."""
    strategy = federation["strategies"]["diverged"].strategy
    models = federation["models"]["diverged"]
    scale = LR / strategy.denominator
    took_part = [j for rec in strategy.rounds for _, j in rec.selected if j in DIVERGED]
    assert set(took_part) == set(DIVERGED), "the seeds select both diverging clients"
    for rec in strategy.rounds:
        r = rec.server_round
        assert all(np.all(np.isfinite(models[r][k])) for k in SHAPES)
        noise = dict(zip(SHAPES, strategy.noise_draw(rec.index, SHAPES.values())))
        for k in SHAPES:
            signal = sum((clipped(client_update(j))[k] for _, j in rec.selected
                          if j not in DIVERGED), np.zeros(SHAPES[k]))
            np.testing.assert_allclose(models[r][k] - models[r - 1][k],
                                       scale * (signal + noise[k]), rtol=1e-10, atol=1e-12)


def test_flower_dp_refuses_non_finite_updates(federation):
    """Flower's own clipping does not bound an infinite or NaN update (its noisy average was
    NaN): the round is refused before anything is released."""
    error = federation["errors"].get("flower_diverged", "not refused")
    assert error.startswith(ParticipationError.__name__) and "non-finite" in error, error


def test_a_resumed_run_draws_fresh_noise_and_choices(federation):
    """A second run over the first run's accountant with the same seeds (noise, selection,
    clients) replayed the first run's noise and check-ins: the noise cancels between the two
    runs' releases, leaving the sums without noise, while epsilon counted both runs.  The seeds'
    keys now take the steps the accountant had recorded: other noise, other choices, and the
    releases are the resumed strategy's own noise plus the clipped updates."""
    first = federation["strategies"]["poisson"].strategy
    resumed = federation["strategies"]["resumed"].strategy
    assert resumed.stream == RUNS["poisson"][1]
    shapes = list(SHAPES.values())
    assert all(np.all(a != b) for a, b in zip(first.noise_draw(0, shapes),
                                               resumed.noise_draw(0, shapes)))
    assert [selected(resumed)[r] for r in range(1, RESUMED_ROUNDS + 1)] != \
        [selected(first)[r] for r in range(1, RESUMED_ROUNDS + 1)]
    again = {e["client-index"]: e["rounds"]
             for e in choices(federation, "poisson", resumed.stream)}
    before = {e["client-index"]: e["rounds"] for e in choices(federation, "poisson")
              if e["block"] == 0}
    assert len(again) == len(before) == N and again != before
    models, scale = federation["models"]["resumed"], LR / resumed.denominator
    for rec in resumed.rounds:
        r = rec.server_round
        noise = dict(zip(SHAPES, resumed.noise_draw(rec.index, SHAPES.values())))
        for k in SHAPES:
            signal = sum((clipped(client_update(j))[k] for _, j in rec.selected),
                         np.zeros(SHAPES[k]))
            np.testing.assert_allclose(models[r][k] - models[r - 1][k],
                                       scale * (signal + noise[k]), rtol=1e-10, atol=1e-12)
    eps = epsilons(federation, "resumed")
    offline = create("pld")
    offline.compose(PoissonSampledEvent(0.25, GaussianEvent(SIGMA)),
                    RUNS["poisson"][1] + RESUMED_ROUNDS)
    assert eps[RESUMED_ROUNDS] == pytest.approx(offline.get_epsilon(DELTA), rel=1e-9)


# -- set-up (no federation) ------------------------------------------------------------------------
def test_poisson_accountant_refused_for_fixed_size_sampling():
    ours = DPFedAvg(FixedSizeSampling(N, 3), SIGMA, CLIP)
    flower_dp = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(fraction_train=0.25, min_train_nodes=3, min_available_nodes=N), SIGMA, CLIP, 3)
    for accountant in ("pld", create("pld")):
        with pytest.raises(UnsupportedEventError, match="fdp") as info:
            PrivacyAccounting(ours, delta=DELTA, accountant=accountant)
        assert "replace" in str(info.value)
        with pytest.raises(UnsupportedEventError, match="fdp"):
            PrivacyAccounting(flower_dp, delta=DELTA, accountant=accountant, num_clients=N)
    with pytest.raises(UnsupportedEventError):   # a Poisson accountant with add/remove
        PrivacyAccounting(ours, delta=DELTA, accountant=create("fdp"))
    with pytest.raises(UnsupportedEventError, match="checkin"):
        PrivacyAccounting(DPFedAvg(RandomCheckIns(N, 4, 0.5), SIGMA, CLIP), delta=DELTA,
                          accountant="pld")
    with pytest.raises(UnsupportedEventError):
        PrivacyAccounting(DPFedAvg(PoissonSampling(N, 0.25), SIGMA, CLIP), delta=DELTA,
                          accountant="checkin")
    with pytest.raises(ParameterError, match="num_clients"):
        PrivacyAccounting(flower_dp, delta=DELTA)
    with pytest.raises(ParameterError, match="num_sampled_clients"):
        PrivacyAccounting(flower_dp, delta=DELTA, num_clients=20)
    assert PrivacyAccounting(flower_dp, delta=DELTA, num_clients=N).accountant.name == "fdp"


def test_a_strategy_and_an_accountant_at_different_places_of_a_pass_are_refused():
    """Found by a hostile sweep (3 clients, windows of 2 rounds, real simulations): a DPFedAvg
    that had run one round, wrapped in a second PrivacyAccounting, ran the rest of that pass
    and the first round of the next, with a client in both -- accounted as one pass, 9.997,
    where two passes give 15.456; a saved accountant that ended mid-pass, resumed with a fresh
    DPFedAvg (a fresh check-in), likewise.  The sweep's numbers: one pass and two passes of
    the protocol, computed here with the same accountant."""
    protocol = RandomCheckIns(3, window=2, checkin_probability=1.0)
    one_pass = create("checkin").compose(protocol.run_event(SIGMA, 2)).get_epsilon(DELTA)
    two = create("checkin").compose(protocol.run_event(SIGMA, 4)).get_epsilon(DELTA)
    assert two > one_pass + 1     # what the refused set-ups would have under-counted
    used = DPFedAvg(protocol, SIGMA, CLIP)
    used.rounds.append(None)      # it ran one round (what the sweep's simulation did)
    with pytest.raises(ParameterError, match="round 1 of a 2-round pass"):
        PrivacyAccounting(used, delta=DELTA)
    saved = create("checkin").compose(protocol.round_event(SIGMA))   # one round of a pass
    with pytest.raises(ParameterError, match="1 rounds of this protocol recorded"):
        PrivacyAccounting(DPFedAvg(protocol, SIGMA, CLIP), delta=DELTA, accountant=saved)
    # at the same place, or at a pass boundary, both go on
    PrivacyAccounting(used, delta=DELTA, accountant=saved)
    whole = create("checkin").compose(protocol.run_event(SIGMA, 2))
    PrivacyAccounting(DPFedAvg(protocol, SIGMA, CLIP), delta=DELTA, accountant=whole)
    PrivacyAccounting(DPFedAvg(PoissonSampling(N, 0.25), SIGMA, CLIP), delta=DELTA,
                      accountant=create("pld").compose(PoissonSampledEvent(
                          0.25, GaussianEvent(SIGMA))))     # no passes: nothing to align


def test_two_runs_sharing_one_accountant_are_refused_before_a_round():
    """Two PrivacyAccounting wrappers over fresh DPFedAvg runs with one accountant pass the
    construction check (both at round 0); if their rounds interleave, the accountant records
    the first round of each as one pass of two rounds, while each run drew its own check-ins
    (a client may take part in both: two participations where one pass allows one).  Refused
    before the second run's round is configured (nothing is sent) -- the numbers: one pass
    against two, with the same accountant."""
    protocol = RandomCheckIns(3, window=2, checkin_probability=1.0)
    one_pass = create("checkin").compose(protocol.run_event(SIGMA, 2)).get_epsilon(DELTA)
    two = create("checkin").compose(protocol.run_event(SIGMA, 4)).get_epsilon(DELTA)
    assert two > one_pass + 1
    shared = create("checkin")
    first = PrivacyAccounting(DPFedAvg(protocol, SIGMA, CLIP), delta=DELTA, accountant=shared)
    second = PrivacyAccounting(DPFedAvg(protocol, SIGMA, CLIP), delta=DELTA, accountant=shared)
    shared.compose(first.event)        # the first run's round 1, released and recorded
    first.strategy.rounds.append(None)
    for call in (second.configure_train, second.aggregate_train):
        args = (1, None, {}, None) if call == second.configure_train else (1, [])
        with pytest.raises(ParameterError, match="1 rounds of this protocol recorded"):
            call(*args)
    assert shared.steps == 1    # nothing recorded by the refused calls


def test_aggregations_other_than_the_mean_are_refused():
    """Found by a hostile sweep: FedMedian, FedTrimmedAvg, Krum, MultiKrum and Bulyan keep
    FedAvg's configure_train and were accepted inside Flower's DP wrapper, accounted as the mean
    of K clipped updates.  The median of 3 moves by 2C when one client is replaced (updates -1,
    +1 and -1 or +1): with noise std sigma C / K = 1 on the median, 4 rounds are Gaussian with
    mu = 4, epsilon(1e-5) = 24.38 (exact), while 6.13 was reported.  A subclass of Flower's DP
    wrapper is refused too (it may add the noise differently)."""
    from flwr.serverapp.strategy import Bulyan, FedMedian, FedTrimmedAvg, Krum, MultiKrum
    for cls in (FedMedian, FedTrimmedAvg, Krum, MultiKrum, Bulyan):
        inner = cls(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=3,
                    min_available_nodes=3)
        with pytest.raises(ParameterError, match="aggregate_train"):
            PrivacyAccounting(DifferentialPrivacyServerSideFixedClipping(inner, 3.0, 1.0, 3),
                              delta=DELTA, num_clients=3)

    class Wrapper(DifferentialPrivacyServerSideFixedClipping):
        pass
    fedavg = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=3,
                    min_available_nodes=3)
    with pytest.raises(ParameterError, match="not a subclass"):
        PrivacyAccounting(Wrapper(fedavg, 3.0, 1.0, 3), delta=DELTA, num_clients=3)
    wrapped = PrivacyAccounting(DifferentialPrivacyServerSideFixedClipping(fedavg, 3.0, 1.0, 3),
                                delta=DELTA, num_clients=3)
    # the inner strategy replaced after wrapping (a review): refused before the round
    wrapped.strategy.strategy = FedMedian(fraction_train=1.0, fraction_evaluate=0.0,
                                          min_train_nodes=3, min_available_nodes=3)
    with pytest.raises(ParameterError, match="aggregate_train"):
        wrapped.configure_train(1, None, {}, None)


def test_settings_changed_after_wrapping_are_refused_before_a_round():
    """Found by a hostile sweep: the noise multiplier lowered from 3 to 0.3 after wrapping
    (DPFedAvg or Flower's wrapper) was still accounted at 3: 4 rounds of 3 of 3 clients
    reported 6.13 where the rounds that ran (sensitivity 2C, noise 0.3 C) have 144.9.  Flower's
    num_sampled_clients scales its noise the same way.  Refused before the round is configured
    and before it is released; nothing is recorded."""
    ours = PrivacyAccounting(DPFedAvg(FixedSizeSampling(3, 3), 3.0, CLIP), delta=DELTA)
    ours.strategy.noise_multiplier = 0.3
    for call, args in ((ours.configure_train, (1, None, {}, None)),
                       (ours.aggregate_train, (1, []))):
        with pytest.raises(ParameterError, match="noise_multiplier=0.3"):
            call(*args)
    poisson = PrivacyAccounting(DPFedAvg(PoissonSampling(N, 0.25), SIGMA, CLIP), delta=DELTA)
    poisson.strategy.participation = PoissonSampling(N, 0.5)
    with pytest.raises(ParameterError, match="wrapped with"):
        poisson.configure_train(1, None, {}, None)
    for attribute, value in (("noise_multiplier", 0.3), ("num_sampled_clients", 2)):
        flower_dp = PrivacyAccounting(DifferentialPrivacyServerSideFixedClipping(
            FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=3,
                   min_available_nodes=3), 3.0, CLIP, 3), delta=DELTA, num_clients=3)
        setattr(flower_dp.strategy, attribute, value)
        with pytest.raises(ParameterError, match="wrapped with"):
            flower_dp.configure_train(1, None, {}, None)
        assert flower_dp.accountant.steps == 0
    assert ours.accountant.steps == poisson.accountant.steps == 0


def test_rounds_released_outside_the_wrapper_are_refused():
    """Found by a hostile sweep: ``start`` called on the wrapped DPFedAvg itself released 3
    Poisson rounds that no accountant saw; one more round through the wrapper reported 3.53,
    where the 4 rounds that ran have 6.68.  The DPFedAvg's own log of released rounds is
    compared with the wrapper's: epsilon, report and the next round are refused, and so is
    wrapping a DPFedAvg that released more rounds than the accountant recorded."""
    strategy = DPFedAvg(PoissonSampling(N, 0.5, block_rounds=2), SIGMA, CLIP)
    wrapped = PrivacyAccounting(strategy, delta=DELTA)
    assert wrapped.epsilon == 0.0
    strategy.rounds.extend([None] * 3)    # what strategy.start(num_rounds=3) leaves behind
    for call in (lambda: wrapped.epsilon, wrapped.report,
                 lambda: wrapped.configure_train(1, None, {}, None)):
        with pytest.raises(ParameterError, match="released 3 rounds"):
            call()
    with pytest.raises(ParameterError, match="released 3 rounds"):
        PrivacyAccounting(strategy, delta=DELTA)
    # a saved accountant that recorded them: wrapping again goes on
    saved = create("pld").compose(PoissonSampledEvent(0.5, GaussianEvent(SIGMA)), 3)
    assert PrivacyAccounting(strategy, delta=DELTA, accountant=saved).epsilon > 0


def test_a_zero_update_is_refused_with_a_reason():
    """Found by a hostile sweep: a client that returns the global model unchanged made Flower's
    server-side clipping divide by the update's norm 0 (ZeroDivisionError inside Flower);
    nothing was released, but the error did not say why."""
    from types import SimpleNamespace
    model = ArrayRecord({"w": flwr.app.Array(np.ones(3))})

    def reply(node, values):
        return SimpleNamespace(metadata=SimpleNamespace(src_node_id=node), content=SimpleNamespace(
            array_records={"arrays": ArrayRecord({"w": flwr.app.Array(values)})}))
    check = PrivacyAccounting._check_nonzero_updates
    check(1, [reply(1, np.ones(3) + 1e-12), reply(2, np.zeros(3))], model)
    with pytest.raises(ParticipationError, match="node 2 returned the global model unchanged"):
        check(1, [reply(1, np.zeros(3)), reply(2, np.ones(3))], model)


def test_flower_strategies_that_would_wait_forever_are_refused():
    """FedAvg(min_available_nodes=4) in a federation of 3 blocked the first round forever in
    Flower's node wait (no time limit); now refused at construction."""
    for fedavg in (FedAvg(fraction_train=2 / 3, min_train_nodes=2, min_available_nodes=4),
                   FedAvg(fraction_train=0.5, min_train_nodes=4, min_available_nodes=3)):
        strategy = DifferentialPrivacyServerSideFixedClipping(
            fedavg, SIGMA, CLIP, max(2, fedavg.min_train_nodes))
        with pytest.raises(ParameterError, match="at most num_clients=3"):
            PrivacyAccounting(strategy, delta=DELTA, num_clients=3)


def test_participation_config_errors_name_the_config():
    from dpplugins.integrations.flower import participation_from_config
    for config in ({"scheme": "poisson"}, {"scheme": "fixed_size", "num_clients": "x",
                                           "clients_per_round": 2}):
        with pytest.raises(ParameterError, match="config="):
            participation_from_config(config)
    assert participation_from_config(FixedSizeSampling(N, 3).config()) == FixedSizeSampling(N, 3)


def test_protocol_parameters_are_checked():
    with pytest.raises(ParameterError, match="checkin_probability"):
        RandomCheckIns(N, 4, 0.5, variant="averaged")
    with pytest.raises(ParameterError, match="window"):
        RandomCheckIns(N, N + 1, variant="sliding")
    with pytest.raises(ParameterError, match="clients_per_round"):
        FixedSizeSampling(N, N + 1)
    for cls, relation in ((RandomCheckIns, "replace-one"), (FixedSizeSampling, "replace-one"),
                          (PoissonSampling, "add/remove")):
        assert relation in cls.__doc__


def test_protocol_events_and_server_selection():
    """Round events are the samplers' one-step events; the averaged variant keeps every client
    of the round up to the cap (a uniformly random subset), the others exactly one."""
    g = GaussianEvent(SIGMA)
    avg = RandomCheckIns(N, 4, variant="averaged", max_clients_per_round=2)
    assert avg.round_event(SIGMA) == RandomCheckIn(N, 4, 1.0, "averaged", 2).event(
        SIGMA).with_steps(1)
    assert avg.run_event(SIGMA, 8) == RandomCheckInEvent(N, g, "averaged", 4, None, 1.0, 2,
                                                         False, 2)
    assert create("checkin").supports(avg.round_event(SIGMA))
    rng = np.random.default_rng(0)
    picks = [tuple(avg.select(list("abcde"), rng)) for _ in range(2000)]
    assert all(len(p) == 2 and p[0] < p[1] for p in picks)
    counts = np.unique(picks, axis=0, return_counts=True)[1]
    assert len(counts) == 10 and stats.chisquare(counts).pvalue > ALPHA
    fixed = RandomCheckIns(N, 4, 0.5)
    counts = np.bincount([fixed.select([0, 1, 2], rng)[0] for _ in range(3000)])
    assert stats.chisquare(counts).pvalue > ALPHA and fixed.select([], rng) == []
    assert PoissonSampling(N, 0.25).run_event(SIGMA, 3) == SelfComposedEvent(
        PoissonSampledEvent(0.25, g), 3)
    assert FixedSizeSampling(N, 3).round_event(SIGMA) == FixedBatchEvent(N, 3, g)
    assert RandomCheckIns(N, 4, variant="sliding").block_rounds == N - 4 + 1


def test_import_without_flower():
    code = ("import sys; sys.modules['flwr'] = None\n"
            "import dpplugins, dpplugins.integrations.flower as f\n"
            "p = f.RandomCheckIns(12, 4, 0.5)\n"
            "assert f.choose_accountant(p, 1.0).name == 'checkin'\n"
            "try:\n    f.DPFedAvg\nexcept ImportError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "flwr" in out.stdout


def test_update_norm_is_exact_for_huge_and_non_finite_updates():
    """The L2 norm over all arrays (closed forms): 3e200 and 4e200 gave inf (the squares
    overflow), so a finite update was zeroed instead of clipped; inf and NaN are reported as
    such (and then count as a zero update)."""
    from dpplugins.integrations.flower import _flat_norm

    assert _flat_norm([np.array([3e200]), np.array([[4e200]])]) == pytest.approx(5e200,
                                                                               rel=1e-15)
    assert _flat_norm([np.zeros(3), np.zeros((0,))]) == 0.0
    assert _flat_norm([np.array([1.0, np.inf])]) == np.inf
    assert np.isnan(_flat_norm([np.array([np.nan, np.inf])]))
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(4, 3)), rng.normal(size=5) * 1e-300]
    assert _flat_norm(arrays) == pytest.approx(
        np.linalg.norm(np.concatenate([a.ravel() for a in arrays])), rel=1e-14)


@pytest.mark.parametrize("option, value", [
    ("noise_seed", -1), ("noise_seed", 0.5), ("noise_seed", "3"), ("noise_seed", True),
    ("selection_seed", -2), ("selection_seed", 1.5), ("arrayrecord_key", 5),
    ("configrecord_key", ""),
])
def test_seeds_and_record_keys_are_checked_at_construction(option, value):
    """A noise seed of -1 was refused only after the clients had trained (ValueError in the
    aggregation); 0.5 or "3" raised TypeError there; a record key of 5 failed inside Flower."""
    with pytest.raises(ParameterError, match=option):
        DPFedAvg(PoissonSampling(N, 0.25), SIGMA, CLIP, **{option: value})


@pytest.mark.parametrize("protocol", [RandomCheckIns(N, 4, 0.5), RandomCheckIns(N, 4),
                                      RandomCheckIns(N, 4, variant="averaged"),
                                      RandomCheckIns(N, 4, variant="sliding"),
                                      PoissonSampling(N, 0.25, block_rounds=6)])
def test_a_reply_is_accepted_only_if_the_protocol_can_make_it(protocol):
    """The server checks every client's answer against the protocol (a client in every round
    of a pass, a sliding slot outside its window, a Poisson slot that is not the number of
    rounds joined were accepted): every choice the protocol's own client_choice makes passes,
    and every other (slot, rounds) with slot in [-1, N + 4) and at most two rounds of the
    block is refused, by enumeration (for Poisson sampling every set of rounds has a positive
    probability: exactly the choices with slot = the number of rounds pass)."""
    from itertools import combinations

    from dpplugins.integrations.flower import _consistent_choice

    rng = np.random.default_rng(5)
    made = set()
    for j in range(N):
        for _ in range(300):
            slot, rounds = protocol.client_choice(j, rng)
            made.add((j, int(slot), tuple(int(r) for r in rounds)))
    length = protocol.block_rounds
    for j in range(N):
        for slot in range(-1, N + 4):
            for size in range(3):
                for rounds in combinations(range(length), size):
                    possible = (slot == size if isinstance(protocol, PoissonSampling)
                                else (j, slot, rounds) in made)
                    assert _consistent_choice(protocol, j, slot, rounds) == possible, \
                        (j, slot, rounds)
