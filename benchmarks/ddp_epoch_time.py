"""Per-epoch wall time of the DDP digits example: our distributed samplers vs torch's
``DistributedSampler`` (2 CPU processes, gloo on 127.0.0.1).

Every round launches ``examples/opacus_digits_ddp.py`` once per sampler, in a rotated order (so
slow drift of a busy machine hits all alike), and keeps rank 0's per-epoch training times (the
first epoch of a launch is left out: it carries lazy initialisation).  Prints each sampler's
median epoch time, its spread and the ratio of medians to torch's sampler (target: within 5 %;
read the spread before calling a difference real).

    python benchmarks/ddp_epoch_time.py [--rounds 3] [--epochs 4] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ab import report  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "opacus_digits_ddp.py"
SAMPLERS = {"torch DistributedSampler": "torch", "ShuffledEpochs": "shuffle",
            "balls_and_bins": "balls_and_bins"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def epoch_times(sampler: str, epochs: int, procs: int, batch_size: int) -> list[float]:
    """Rank 0's per-epoch seconds of one launch, without its first epoch."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={procs}",
                   "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(EXAMPLE),
                   "--sampler", sampler, "--epochs", str(epochs), "--batch-size",
                   str(batch_size), "--out", out]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        if done.returncode != 0:
            raise SystemExit(f"{sampler}: the launch failed:\n{done.stderr[-2000:]}")
        record = json.loads((Path(out) / "rank0.json").read_text())
    return record["epoch_seconds"][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per launch")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=60, help="global batch size")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3 epochs")
    args = parser.parse_args()
    rounds, epochs = (2, 3) if args.quick else (args.rounds, args.epochs)
    names = list(SAMPLERS)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name] += epoch_times(SAMPLERS[name], epochs, args.procs, args.batch_size)
    print(f"DDP digits, {args.procs} processes, global batch {args.batch_size}, {rounds} "
          f"rounds x {epochs - 1} timed epochs per sampler (seconds per epoch, rank 0)")
    print(report(samples, baseline=names[0]))
    print("target: our samplers' ratio to torch's DistributedSampler within 1.05")


if __name__ == "__main__":
    main()
