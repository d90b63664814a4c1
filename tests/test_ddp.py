"""Our samplers and accountants under torch.distributed + Opacus DPDDP: real processes on this
machine (gloo on 127.0.0.1), launched with torchrun (distributed issue)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpplugins.accountants import create
from dpplugins.events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent
from dpplugins.samplers import ShuffledEpochs, balls_and_bins

# the example runs in its own processes: the test process only needs to know that torch and
# opacus are there (importing them here would add seconds of start-up to nothing)
if any(importlib.util.find_spec(name) is None for name in ("torch", "opacus", "sklearn")):
    pytest.skip("needs torch, opacus and scikit-learn", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "opacus_digits_ddp.py"
N, BATCH, SEED, SIGMA = 600, 60, 0, 1.0
EPOCHS = 2
SAMPLERS = ("shuffle", "balls_and_bins", "torch")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, procs: int, *extra: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={procs}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(EXAMPLE),
               "--out", str(out), "--seed", str(SEED), "--batch-size", str(BATCH), *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


def records(out: Path, procs: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(procs)]


def single_process(kind: str):
    if kind in ("shuffle", "torch"):     # torch's DistributedSampler: shuffled global batches
        return ShuffledEpochs(N, BATCH, rng=SEED)
    return balls_and_bins(N, -(-N // BATCH), rng=SEED)


def single_process_epsilon(kind: str, epochs: int) -> float:
    """The single-process accountant on the same global schedule."""
    event = single_process(kind).event(SIGMA, epochs)
    return create("shuffle" if kind == "torch" else kind).compose(event).get_epsilon(1e-5)


def assert_disjoint_and_complete(kind: str, shards: list[list[list[int]]], epochs: int):
    """``shards[rank][step]``: every global step's shards are disjoint and together are the
    single-process step (the same global schedule); for torch's sampler, whose permutation is
    its own, every step is BATCH distinct examples and every epoch covers the data once."""
    reference = single_process(kind)
    steps = [b.tolist() for _ in range(epochs) for b in reference]
    assert all(len(rank) == len(steps) for rank in shards)
    if kind == "torch":
        per_epoch = len(steps) // epochs
        for epoch in range(epochs):
            seen = []
            for step in range(epoch * per_epoch, (epoch + 1) * per_epoch):
                union = [i for rank in shards for i in rank[step]]
                assert len(union) == len(set(union)) == BATCH
                seen += union
            assert sorted(seen) == list(range(N))
        first = [i for rank in shards for i in rank[0]]
        assert first != [i for rank in shards for i in rank[per_epoch]]   # set_epoch
    else:
        for step, batch in enumerate(steps):
            union = [i for rank in shards for i in rank[step]]
            assert sorted(union) == sorted(batch)          # disjoint and complete, every step


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory) -> dict[str, list[dict]]:
    """One launch of three ranks that trains with every sampler in turn (the example's
    ``--sampler`` list; each run a fresh model from the seed): ``{sampler: rank records}``."""
    out = tmp_path_factory.mktemp("three")
    launch(out, 3, "--sampler", *SAMPLERS, "poisson", "--epochs", str(EPOCHS))
    return {kind: records(out / kind, 3) for kind in (*SAMPLERS, "poisson")}


@pytest.mark.slow
@pytest.mark.parametrize("kind", SAMPLERS)
def test_shards_are_disjoint_complete_and_every_rank_reports_the_same_epsilon(kind, three_ranks):
    """Three processes (two in the resume test below, which checks the same for shuffle)."""
    ranks = three_ranks[kind]
    assert all(r["world"] == 3 for r in ranks) and [r["rank"] for r in ranks] == [0, 1, 2]
    assert all(r["steps"] == len(r["shards"]) for r in ranks)
    assert_disjoint_and_complete(kind, [r["shards"] for r in ranks], EPOCHS)
    epsilons = {r["epsilon"] for r in ranks}
    assert len(epsilons) == 1
    assert epsilons.pop() == pytest.approx(single_process_epsilon(kind, EPOCHS), rel=1e-12)


@pytest.mark.slow
def test_resume_from_a_rank_0_checkpoint_equals_an_uninterrupted_run(tmp_path, three_ranks):
    """Two processes stop after 13 of 20 steps (mid second epoch); a new launch resumes from rank
    0's checkpoint.  The uninterrupted run: each rank's shards of the schedule drawn in one go
    (the sharded sampler, iterated for the epochs), whose global steps are the single-process
    sampler's, and the uninterrupted accountant: the single-process one on that schedule and the
    uninterrupted three-rank launch (the accountant records global steps, whatever the world)."""
    first_dir = tmp_path / "first"
    launch(first_dir, 2, "--sampler", "shuffle", "--epochs", str(EPOCHS), "--stop-after", "13")
    first = records(first_dir, 2)
    launch(tmp_path / "rest", 2, "--sampler", "shuffle", "--epochs", str(EPOCHS),
           "--resume", str(first_dir / "checkpoint.json"))
    rest = records(tmp_path / "rest", 2)
    assert [r["steps"] for r in first] == [13, 13] and [r["steps"] for r in rest] == [20, 20]
    resumed = [first[r]["shards"] + rest[r]["shards"] for r in range(2)]
    for r in range(2):
        sharded = ShuffledEpochs(N, BATCH, rng=SEED, num_replicas=2, rank=r)
        assert resumed[r] == [b.tolist() for _ in range(EPOCHS) for b in sharded]
    assert_disjoint_and_complete("shuffle", resumed, EPOCHS)
    assert len({r["epsilon"] for r in first}) == 1
    uninterrupted = three_ranks["shuffle"][0]["epsilon"]
    for r in range(2):
        assert rest[r]["epsilon"] == uninterrupted
        assert rest[r]["epsilon"] == pytest.approx(single_process_epsilon("shuffle", EPOCHS),
                                                   rel=1e-12)


@pytest.mark.slow
def test_poisson_under_ddp_is_accounted_by_pld(three_ranks):
    ranks = three_ranks["poisson"]
    assert len({r["epsilon"] for r in ranks}) == 1 and ranks[0]["epsilon"] > 0
    assert all(r["accountant"]["mechanism"] == "pld" for r in ranks)
    # Opacus' distributed Poisson loader: rate 1 / len(loader of BATCH // world per rank)
    rate, steps = (BATCH // 3) / N, EPOCHS * N // (BATCH // 3)
    assert [r["steps"] for r in ranks] == [steps] * 3
    for step in range(steps):                 # each rank draws from its own part of the data
        union = [i for r in ranks for i in r["shards"][step]]
        assert len(union) == len(set(union))
    event = SelfComposedEvent(PoissonSampledEvent(rate, GaussianEvent(SIGMA)), steps)
    offline = create("pld").compose(event).get_epsilon(1e-5)   # the single-process accountant
    assert ranks[0]["epsilon"] == pytest.approx(offline, rel=1e-12)


def test_ranks_whose_samplers_disagree_are_refused_at_set_up(tmp_path):
    """Each rank deals its shard of a global step from its own copy of the sampler; the
    accountant records the global step.  Found by a hostile sweep: ShuffledEpochs without a
    seed drew another permutation on each rank (a step of examples 0, 0, 6, 7), a sampler built
    before init_process_group ran every example twice per step, and a rank dealt another rank's
    shard -- each accounted as one shuffled pass (4.38 where the step that ran certifies 10.0 as
    a lower bound).  Now the unseeded sampler is refused where it is built, the others by the
    rank whose sampler is wrong, at make_private (local checks: no rank waits for another);
    agreeing samplers (ours seeded, torch's DistributedSampler with one seed) are accepted."""
    worker = Path(__file__).resolve().parent / "ddp_replicas_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(worker),
               "--out", str(tmp_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = records(tmp_path, 2)
    assert outcomes[0].keys() == outcomes[1].keys()
    expected = {"ours_seeded": "accepted", "torch_seeded": "accepted",
                "ours_unseeded": "rng=None is invalid: must be an int seed shared by every rank",
                "ours_built_before_init": "num_replicas=1 in a process group of 2",
                # a plain shuffled DataLoader on each rank: every rank draws from the whole
                # dataset, so a global step can hold an example twice (was accepted, accounted
                # as one rank's shuffled batch)
                "torch_shuffle_without_distributed_sampler":
                    "RandomSampler on each of 2 ranks under distributed training"}
    for outcome in outcomes:
        for name, text in expected.items():
            assert text in outcome[name], (name, outcome[name])
    for name in ("ours_rank_0_everywhere", "torch_rank_0_everywhere"):   # rank 1 refuses
        assert outcomes[0][name] == "accepted"
        assert "deals the shard of rank=0 on rank 1" in outcomes[1][name], outcomes[1][name]
    # explicitly different seeds, or set_epoch on one rank only: both ranks refuse at the first
    # optimizer step of the pass (found by the same sweep; each accounted as one shuffled pass)
    for outcome in outcomes:
        for name in ("step_ours_seeded", "step_torch_seeded_set_epoch"):
            assert outcome[name] == "accepted", (name, outcome[name])
        for name in ("step_ours_seed_per_rank", "step_torch_seed_per_rank",
                     "step_torch_set_epoch_on_rank_0"):
            assert "samplers that differ between ranks" in outcome[name], (name, outcome[name])
    # Opacus adds rank 0's noise to every rank's clipped gradients: a max_grad_norm or noise
    # multiplier that differs between ranks is refused by both at the first step (found by a
    # hostile sweep: rank 1 clipping at 10 beside rank 0 at 1 reported 6.57, where its examples
    # have sensitivity 20 against noise 1, epsilon 468)
    for outcome in outcomes:
        assert outcome["step_same_settings"] == "accepted"
        for name in ("step_clip_per_rank", "step_noise_per_rank"):
            assert "differs between ranks" in outcome[name], (name, outcome[name])
    # Opacus' distributed Poisson sampler skipped a rank's empty draws, so the ranks ran
    # different numbers of steps (the rank with more died at the end) and the released steps
    # were not Poisson ones: now every rank runs every step, empty or not, and both report the
    # single-process accountant's number for 2 epochs of 8 steps at rate 1/8
    poisson = [outcome["poisson_epochs"] for outcome in outcomes]
    assert [len(p["sizes"]) for p in poisson] == [16, 16]
    assert [p["steps"] for p in poisson] == [16, 16]
    assert any(0 in p["sizes"] for p in poisson)       # some rank drew nothing at some step
    offline = create("pld").compose(SelfComposedEvent(
        PoissonSampledEvent(1 / 8, GaussianEvent(1.0)), 16)).get_epsilon(1e-5)
    assert [p["epsilon"] for p in poisson] == [pytest.approx(offline, rel=1e-12)] * 2
    # the loader's generator seeded alike on both ranks: Opacus drew both ranks' masks from
    # equal streams, so the examples at one position of the two shards were kept together at
    # every step (a review); the accountant records independent inclusions.  210 steps at
    # rate 1/3, 3 examples a shard: the two ranks' masks agree at a position with probability
    # 5/9 when independent (sd 0.02 over 630 pairs), each example kept with probability 1/3
    # (sd 0.033 over 210 steps)
    import torch   # (here: the other tests run torch in their own processes only)

    kept = [outcome["poisson_alike_generators"] for outcome in outcomes]
    order = torch.randperm(6, generator=torch.Generator().manual_seed(0)).tolist()
    shards = [order[0::2], order[1::2]]
    masks = np.array([[[e in step for e in shards[r]] for step in kept[r]] for r in range(2)])
    assert masks.shape == (2, 210, 3)
    assert (masks[0] == masks[1]).mean() < 0.7
    assert np.all(np.abs(masks.mean(axis=1) - 1 / 3) < 0.15)
