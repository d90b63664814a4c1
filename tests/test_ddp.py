"""Our samplers and accountants under torch.distributed + Opacus DPDDP: real processes on this
machine (gloo on 127.0.0.1), launched with torchrun (distributed issue)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpplugins.accountants import create  # noqa: E402
from dpplugins.samplers import ShuffledEpochs, balls_and_bins  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "opacus_digits_ddp.py"
N, BATCH, SEED, SIGMA = 600, 60, 0, 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, procs: int, *extra: str) -> list[dict]:
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={procs}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(EXAMPLE),
               "--out", str(out), "--seed", str(SEED), "--batch-size", str(BATCH), *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(procs)]


def single_process(kind: str):
    if kind in ("shuffle", "torch"):     # torch's DistributedSampler: shuffled global batches
        return ShuffledEpochs(N, BATCH, rng=SEED)
    return balls_and_bins(N, -(-N // BATCH), rng=SEED)


EPOCHS = 2


@pytest.fixture(scope="module")
def shuffle_run(tmp_path_factory):
    """Two ranks, shuffled epochs, run once and shared by the tests below."""
    return launch(tmp_path_factory.mktemp("full"), 2, "--sampler", "shuffle", "--epochs",
                  str(EPOCHS))


@pytest.mark.slow
@pytest.mark.parametrize("kind,procs", [("shuffle", 2), ("balls_and_bins", 3), ("torch", 2)])
def test_shards_are_disjoint_complete_and_every_rank_reports_the_same_epsilon(
        tmp_path, kind, procs, shuffle_run):
    epochs = EPOCHS
    ranks = (shuffle_run if kind == "shuffle"
             else launch(tmp_path, procs, "--sampler", kind, "--epochs", str(epochs)))
    reference = single_process(kind)
    steps = [b.tolist() for _ in range(epochs) for b in reference]
    assert all(r["steps"] == len(steps) for r in ranks)
    if kind == "torch":
        # torch's own permutation: every global step is BATCH distinct examples, every epoch
        # covers the dataset exactly once (the shuffled-epochs protocol of the global batch)
        per_epoch = len(steps) // epochs
        for epoch in range(epochs):
            seen = []
            for step in range(epoch * per_epoch, (epoch + 1) * per_epoch):
                union = [i for r in ranks for i in r["shards"][step]]
                assert len(union) == len(set(union)) == BATCH
                seen += union
            assert sorted(seen) == list(range(N))
        first = [i for r in ranks for i in r["shards"][0]]
        assert first != [i for r in ranks for i in r["shards"][per_epoch]]   # set_epoch
    else:
        for step, batch in enumerate(steps):
            union = [i for r in ranks for i in r["shards"][step]]
            assert sorted(union) == sorted(batch)          # disjoint and complete, every step
    epsilons = {r["epsilon"] for r in ranks}
    assert len(epsilons) == 1
    # the single-process accountant on the same global schedule
    offline = create("shuffle" if kind == "torch" else kind).compose(
        reference.event(SIGMA, epochs))
    assert epsilons.pop() == pytest.approx(offline.get_epsilon(1e-5), rel=1e-12)


@pytest.mark.slow
def test_resume_from_a_rank_0_checkpoint_equals_an_uninterrupted_run(tmp_path, shuffle_run):
    full = shuffle_run
    first = launch(tmp_path / "first", 2, "--sampler", "shuffle", "--epochs", "2",
                   "--stop-after", "13")
    rest = launch(tmp_path / "rest", 2, "--sampler", "shuffle", "--epochs", "2",
                  "--resume", str(tmp_path / "first" / "checkpoint.json"))
    for r in range(2):
        assert first[r]["shards"] + rest[r]["shards"] == full[r]["shards"]
        assert rest[r]["epsilon"] == full[r]["epsilon"]


@pytest.mark.slow
def test_poisson_under_ddp_is_accounted_by_pld(tmp_path):
    ranks = launch(tmp_path, 2, "--sampler", "poisson", "--epochs", "1")
    assert len({r["epsilon"] for r in ranks}) == 1 and ranks[0]["epsilon"] > 0
