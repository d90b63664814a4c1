"""Samplers: a schedule from (seed, epoch), ranks that shard every global step, and state that
resumes the same schedule mid-epoch (reliability issue item 3; distributed issue item 1)."""

import json

import numpy as np
import pytest

from dpplugins.errors import ParameterError
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs, SlidingWindowCheckIn, balls_and_bins

MAKERS = [
    lambda **kw: ShuffledEpochs(60, 7, rng=3, **kw),
    lambda **kw: ShuffledEpochs(60, 7, drop_last=True, rng=3, **kw),
    lambda **kw: RandomCheckIn(60, 9, checkin_probability=0.5, rng=3, **kw),
    lambda **kw: RandomCheckIn(60, 9, variant="averaged", max_batch_size=4, rng=3, **kw),
    lambda **kw: balls_and_bins(60, 9, rng=3, **kw),
    lambda **kw: SlidingWindowCheckIn(60, 8, rng=3, **kw),
]


def passes(sampler, count):
    return [[b.tolist() for b in sampler] for _ in range(count)]


@pytest.mark.parametrize("make", MAKERS)
def test_same_seed_same_schedule_and_fresh_passes(make):
    a, b = passes(make(), 3), passes(make(), 3)
    assert a == b
    assert a[0] != a[1]          # every pass is a new draw
    again = make()
    again.set_epoch(2)
    assert passes(again, 1)[0] == a[2]


@pytest.mark.parametrize("make", MAKERS)
def test_resume_mid_epoch_continues_the_same_schedule(make):
    reference = make()
    full = passes(reference, 3)
    run = make()
    list(run)                                  # epoch 0
    it = iter(run)
    first = [next(it).tolist() for _ in range(4)]   # 4 steps of epoch 1, then "crash"
    state = json.loads(json.dumps(run.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b.tolist() for b in resumed]
    assert first + rest == full[1]
    assert passes(resumed, 1)[0] == full[2]


def test_resumed_shuffled_epoch_uses_every_example_once():
    """The issue's trap: rebuilding a sampler without its state and skipping the finished
    batches reuses some examples and never uses others in the accounted epoch."""
    run = ShuffledEpochs(60, 6)                  # rng=None: a fresh seed, recorded in the state
    it = iter(run)
    done = [next(it) for _ in range(4)]
    resumed = ShuffledEpochs(60, 6)
    resumed.load_state_dict(run.state_dict())
    used = np.concatenate(done + list(resumed))
    assert sorted(used.tolist()) == list(range(60))


def test_state_of_another_sampler_is_refused():
    state = ShuffledEpochs(60, 7, rng=1).state_dict()
    with pytest.raises(ParameterError, match="params"):
        ShuffledEpochs(60, 8, rng=1).load_state_dict(state)
    with pytest.raises(ParameterError, match="state"):
        ShuffledEpochs(60, 7).load_state_dict({"epoch": 1})


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("replicas", [2, 3])
def test_rank_shards_are_disjoint_and_complete(make, replicas):
    single = passes(make(), 2)
    shards = [passes(make(num_replicas=replicas, rank=r), 2) for r in range(replicas)]
    for epoch in range(2):
        for step, batch in enumerate(single[epoch]):
            parts = [shards[r][epoch][step] for r in range(replicas)]
            union = [i for part in parts for i in part]
            assert sorted(union) == sorted(batch)          # complete and disjoint
            sizes = [len(p) for p in parts]
            assert max(sizes) - min(sizes) <= 1            # array_split: balanced
    assert make(num_replicas=replicas, rank=0).event(1.0) == make().event(1.0)


def test_bad_ranks_are_refused():
    with pytest.raises(ParameterError, match="rank"):
        ShuffledEpochs(10, 2, num_replicas=2, rank=2)
    with pytest.raises(ParameterError, match="num_replicas"):
        ShuffledEpochs(10, 2, num_replicas=0, rank=0)
    with pytest.raises(ParameterError, match="num_replicas"):
        ShuffledEpochs(10, 2, rank=1)
    # several replicas need one seed on every rank: fresh entropy differs per process (under
    # DPDDP each rank drew its own permutation)
    for make in (lambda: ShuffledEpochs(10, 2, num_replicas=2, rank=0),
                 lambda: balls_and_bins(10, 2, num_replicas=2, rank=1)):
        with pytest.raises(ParameterError, match="rng=None is invalid: must be an int seed "
                                                 "shared"):
            make()
    ShuffledEpochs(10, 2, rng=0, num_replicas=2, rank=1)


def test_sharding_takes_only_an_int_seed():
    """From a hostile sweep: an unseeded Generator on each rank passed the guard, and each rank
    drew its own schedule (example 6 twice in one global step, 8 of 10 examples in the pass).
    A Generator or SeedSequence cannot show whether it was seeded, so sharding takes an int."""
    union = [[], [], []]
    for rank in (0, 1):
        with pytest.raises(ParameterError, match="rng='Generator' is invalid: must be an int"):
            ShuffledEpochs(10, 4, rng=np.random.default_rng(), num_replicas=2, rank=rank)
        with pytest.raises(ParameterError, match="rng='SeedSequence' is invalid"):
            ShuffledEpochs(10, 4, rng=np.random.SeedSequence(), num_replicas=2, rank=rank)
        for step, part in enumerate(ShuffledEpochs(10, 4, rng=np.int64(5), num_replicas=2,
                                                   rank=rank)):
            union[step].extend(int(i) for i in part)
    assert sorted(i for step in union for i in step) == list(range(10))
    ShuffledEpochs(10, 4, rng=np.random.default_rng(), num_replicas=1)    # one rank: any rng


def test_load_state_dict_without_a_key_is_a_parameter_error():
    sampler = ShuffledEpochs(10, 4, rng=1)
    state = sampler.state_dict()
    for key in ("seed", "epoch", "position"):
        broken = {k: v for k, v in state.items() if k != key}
        with pytest.raises(ParameterError, match=f"without \\['{key}'\\]"):
            sampler.load_state_dict(broken)
    ShuffledEpochs(10, 2, num_replicas=1, rank=0)


@pytest.mark.parametrize("seed", [None, -1, True, 2.0, "3"])
def test_a_state_without_an_int_seed_is_refused_and_changes_nothing(seed):
    """From a hostile sweep: a state whose seed was None loaded on every rank drew fresh entropy
    on each (a different global schedule per rank: example 3 twice in one global step, example 6
    never) -- what the constructor refuses for several ranks.  A refused state also changed the
    seed and epoch before the error."""
    ranks = [balls_and_bins(10, 2, rng=3, num_replicas=2, rank=r) for r in range(2)]
    for sampler in ranks:
        sampler.set_epoch(2)
    state = ranks[0].state_dict()
    state.update(seed=seed, epoch=7)
    for sampler in ranks:
        with pytest.raises(ParameterError, match=r"state\['seed'\]"):
            sampler.load_state_dict(state)
        assert (sampler.seed, sampler.epoch) == (3, 2)
    # the two ranks still deal one global schedule: every example exactly once per pass
    steps = [np.concatenate(shards) for shards in zip(*(list(s) for s in ranks))]
    assert sorted(np.concatenate(steps).tolist()) == list(range(10))


SEEDED = [
    lambda seed: ShuffledEpochs(60, 7, rng=seed),
    lambda seed: RandomCheckIn(60, 9, checkin_probability=0.5, rng=seed),
    lambda seed: RandomCheckIn(60, 9, variant="averaged", max_batch_size=4, rng=seed),
    lambda seed: balls_and_bins(60, 9, rng=seed),
    lambda seed: SlidingWindowCheckIn(60, 8, rng=seed),
]


@pytest.mark.parametrize("make", SEEDED)
def test_a_loaded_seed_gives_the_schedule_of_that_seed(make):
    """A state with another seed gives the passes of a sampler built with that seed."""
    state = make(3).state_dict()
    state["seed"] = 11
    loaded = make(3)
    loaded.load_state_dict(state)
    assert passes(loaded, 2) == passes(make(11), 2)
    assert passes(make(3), 1) != passes(make(11), 1)


@pytest.mark.parametrize("size", [0, 1, 5, 17, 64])
@pytest.mark.parametrize("replicas", [1, 2, 3, 7, 64, 100])
def test_a_rank_shard_is_numpys_array_split_piece(size, replicas):
    """A rank's shard is its piece of numpy.array_split (computed for that rank alone: split
    into 10^6 pieces a step took seconds, and 10^400 ranks overflowed)."""
    batch = np.arange(100, 100 + size)
    for rank in range(replicas):
        sampler = ShuffledEpochs(60, 7, rng=3, num_replicas=replicas, rank=rank)
        assert sampler.shard(batch).tolist() == np.array_split(batch, replicas)[rank].tolist()
    huge = ShuffledEpochs(60, 7, rng=3, num_replicas=10 ** 400, rank=5)
    assert huge.shard(batch).tolist() == batch[5:6].tolist()


@pytest.mark.parametrize("make", MAKERS)
def test_a_pass_drawn_before_is_not_drawn_again(make):
    """``set_epoch(0)`` before every epoch (a common slip) replayed pass 0: the same batches
    again, which the accountants took as a fresh draw.  Now refused at the first batch; a pass
    continued where it stopped, a pass never drawn (also below the last one) and a run restored
    from its state go on."""
    sampler = make()
    first = passes(sampler, 1)[0]
    sampler.set_epoch(0)
    with pytest.raises(ParameterError, match=r"epoch=0 is invalid.*steps 0 to \d+ of pass 0"):
        next(iter(sampler))
    # part of a pass, stopped, then started again from its first step: refused; continued: fine
    sampler.set_epoch(4)
    it = iter(sampler)
    next(it), next(it)
    del it
    reference = make()
    reference.set_epoch(4)
    rest = [b.tolist() for b in reference][2:]
    it = iter(sampler)
    assert next(it).tolist() == rest[0]      # continued at step 2
    del it
    sampler.set_epoch(4)
    with pytest.raises(ParameterError, match=r"steps 0 to 2 of pass 4"):
        next(iter(sampler))
    # a pass not drawn yet, below the last one drawn
    sampler.set_epoch(2)
    assert len(passes(sampler, 1)[0]) == len(first)
    # restoring a saved state in the same process continues from its position
    restored = make()
    state = restored.state_dict()
    passes(restored, 1)
    restored.load_state_dict(state)
    assert passes(restored, 1)[0] == first


def test_drawn_passes_agree_with_the_set_of_drawn_steps():
    """DrawnPasses (merged runs of whole passes, partial passes) against a plain set of
    (epoch, step) pairs over random records, 2,000 of them."""
    from dpplugins.samplers.base import DrawnPasses

    rng = np.random.default_rng(11)
    per_pass = 5
    drawn, plain = DrawnPasses(), set()
    for _ in range(2000):
        epoch = int(rng.integers(0, 60))
        upto = int(rng.integers(1, per_pass + 1))
        drawn.record(epoch, upto, per_pass)
        plain.update((epoch, i) for i in range(upto))
        probe = int(rng.integers(0, 62))
        expected = next((i for i in range(per_pass) if (probe, i) not in plain), per_pass)
        assert drawn.yielded(probe, per_pass) == expected
    assert all(a[1] < b[0] for a, b in zip(drawn.runs, drawn.runs[1:]))  # disjoint, apart


def test_steps_per_epoch_is_exact_for_huge_datasets():
    """ShuffledEpochs counted ceil(n / b) in floating point: 2^53 steps for 2^53 + 1 examples
    of batch 1, one fewer than its own event (exact integer arithmetic)."""
    sampler = ShuffledEpochs(2 ** 53 + 1, 1, rng=0)
    assert len(sampler) == sampler.event(1.0).steps == 2 ** 53 + 1


@pytest.mark.parametrize("make", [lambda: ShuffledEpochs(6, 2, rng=0),
                                  lambda: balls_and_bins(8, 2, rng=0),
                                  lambda: RandomCheckIn(8, 4, rng=0)])
def test_two_live_iterations_cannot_replay_a_pass(make):
    """A hostile sweep: an iteration stores its pass when it begins, so a second loop over the
    same sampler (an evaluation loop over the training loader) finished the pass and the first
    iteration then yielded the same steps again -- 5 batches of 2 from ShuffledEpochs(6, 2) held
    6 distinct examples, and the next pass was skipped.  The first iteration now refuses the
    steps the other one drew (ours continue a pass, so the second loop took steps 1 on), and no
    step was yielded twice."""
    sampler = make()
    first = iter(sampler)
    seen = [next(first).tolist()]
    seen += [batch.tolist() for batch in sampler]           # the second loop ends the pass
    with pytest.raises(ParameterError, match="another iteration of this sampler"):
        next(first)
    assert len(seen) == len(sampler)            # the second loop went on from step 1
    assert [batch.tolist() for batch in sampler] != seen          # the next pass is fresh
    # one loop at a time, even with a break, goes on as before
    again = make()
    for i, _ in enumerate(again):
        if i == 0:
            break
    assert [len(b) for b in again] and again.epoch == 1


def test_sizes_are_checked_by_name_and_bounded():
    """A hostile sweep: balls_and_bins named a bad steps_per_epoch num_slots (its delegate's
    parameter), and drawing 10^30 examples or steps failed inside numpy; it is refused by name
    now (a sampler that only describes a run, by len() and event(), is still built)."""
    from dpplugins.samplers import RandomAllocation

    for bad in (0, 2.5, -1, float("nan"), True, None):
        with pytest.raises(ParameterError) as info:
            balls_and_bins(10, bad)
        assert info.value.name == "steps_per_epoch"
    for make, name in ((lambda: ShuffledEpochs(10**30, 2), "num_examples"),
                       (lambda: RandomCheckIn(10**30, 2), "num_examples"),
                       (lambda: RandomAllocation(5, 10**30, 1), "steps_per_epoch")):
        sampler = make()
        with pytest.raises(ParameterError, match=r"at most 2\^40") as info:
            next(iter(sampler))
        assert info.value.name == name


@pytest.mark.parametrize("make", MAKERS)
def test_a_pass_ends_with_its_last_step_even_if_the_iteration_is_not_resumed(make):
    """A hostile sweep: ``zip(range(len(sampler)), sampler)`` (or a break after the last step)
    never resumes the iteration after its last step, which is where the pass ended: the next
    iteration yielded nothing.  It now draws the next pass, and an iteration resumed late does
    not end a pass twice."""
    sampler = make()
    first = iter(sampler)
    one = [next(first).tolist() for _ in range(len(sampler))]   # the whole pass, not resumed
    two = [b.tolist() for b in sampler]
    assert len(two) == len(sampler) and two != one and sampler.epoch == 2
    assert list(first) == [] and sampler.epoch == 2              # resumed late: nothing more
