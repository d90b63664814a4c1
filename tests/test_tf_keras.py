"""Keras callback and tf.data samplers (issue 9), run against real TensorFlow 2.15 + TF-Privacy.

Independent references: dp_accounting's PLD accountant (Poisson-subsampled Gaussian), the closed
form of the Gaussian mechanism's privacy profile (Balle & Wang 2018, Thm 8) for shuffled epochs
with batch size > 1 (no amplification: mu = sqrt(E) / sigma), and the sampler's own index arrays
re-drawn from the same seed.
"""

import math

import numpy as np
import pytest
from scipy import optimize, stats

tf = pytest.importorskip("tensorflow")
tfp_opt = pytest.importorskip("tensorflow_privacy")
dp_accounting = pytest.importorskip("dp_accounting")

from dpplugins.accountants import create, registry  # noqa: E402
from dpplugins.accountants.pld import PLDAccountant as CorePLD  # noqa: E402
from dpplugins.errors import ParameterError  # noqa: E402
from dpplugins.events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent  # noqa: E402
from dpplugins.integrations.tf_keras import (PrivacyCallback, as_tf_dataset,  # noqa: E402
                                             guard_non_finite, noise_multiplier_of)
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs, SlidingWindowCheckIn  # noqa: E402
from conftest import legacy_step  # noqa: E402

N, BATCH, SIGMA, DELTA = 256, 32, 1.1, 1e-5


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(N, 4)).astype("float32"), rng.integers(0, 2, N).astype("int64")


def _dp_model(num_microbatches=BATCH):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    optimizer = tfp_opt.DPKerasSGDOptimizer(l2_norm_clip=1.0, noise_multiplier=SIGMA,
                                            num_microbatches=num_microbatches,
                                            learning_rate=0.1)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    model.compile(optimizer=optimizer, loss=loss)
    return model


def _gaussian_epsilon(mu, delta):
    """Closed-form epsilon of a mu-GDP Gaussian mechanism (Balle & Wang 2018, Thm 8)."""
    def excess(eps):
        return (stats.norm.cdf(-eps / mu + mu / 2)
                - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta)
    return optimize.brentq(excess, 0.0, 100.0, xtol=1e-12)


def test_callback_poisson_matches_offline_pld_and_dp_accounting():
    x, y = _data()
    callback = PrivacyCallback(delta=DELTA, batch_size=BATCH, num_examples=N, sampler="poisson")
    history = _dp_model().fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[callback])
    logged = history.history["epsilon"]
    assert len(logged) == 2 and len(history.history["loss"]) == 2
    assert callback.noise_multiplier == pytest.approx(SIGMA)   # read from the optimizer
    assert callback.used_microbatching is False                # one example per microbatch
    steps = math.ceil(N / BATCH)
    for epoch, eps in enumerate(logged, start=1):
        offline = create("pld")
        offline.step(noise_multiplier=SIGMA, sample_rate=BATCH / N, count=steps * epoch)
        # the callback's accountant may start epoch 2 on epoch 1's grid: another certified
        # bound for the same history, within the tolerance of the fresh one
        lower, upper = offline.get_epsilon_bounds(DELTA)
        assert lower <= eps and abs(eps - upper) <= 1e-3 * upper
        # independent: dp_accounting's PLD accountant for the same event
        event = dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(BATCH / N, dp_accounting.GaussianDpEvent(SIGMA)),
            steps * epoch)
        theirs = dp_accounting.pld.PLDAccountant(
            value_discretization_interval=1e-4).compose(event).get_epsilon(DELTA)
        assert theirs * (1 - 1e-3) <= eps <= theirs * 1.01
    assert logged[0] < logged[1]


def test_callback_shuffled_epochs_with_our_sampler_matches_gaussian_closed_form(tmp_path):
    x, y = _data(1)
    sampler = ShuffledEpochs(N, BATCH, rng=3)
    writer = tf.summary.create_file_writer(str(tmp_path))
    callback = PrivacyCallback(delta=DELTA, noise_multiplier=SIGMA, batch_size=BATCH,
                               num_examples=N, sampler="shuffled_epochs", log_key="eps",
                               writer=writer)
    history = _dp_model().fit(as_tf_dataset(sampler, x, y), epochs=2, verbose=0,
                              callbacks=[callback])
    logged = history.history["eps"]
    assert len(logged) == 2 and callback.accountant.name == "shuffle"
    for epoch, eps in enumerate(logged, start=1):
        offline = create("shuffle", batch_size=BATCH, dataset_size=N)
        offline.step(noise_multiplier=SIGMA, sample_rate=BATCH / N, count=8 * epoch)
        assert eps == offline.get_epsilon(DELTA)
        # batch size > 1: no amplification, E epochs of a sensitivity-1 Gaussian
        exact = _gaussian_epsilon(math.sqrt(epoch) / SIGMA, DELTA)
        assert exact * (1 - 1e-9) <= eps <= exact * 1.01
    assert list(tmp_path.iterdir())   # TensorBoard event file written


def test_callback_microbatching_halves_noise_like_tf_privacy():
    x, y = _data()
    callback = PrivacyCallback(delta=DELTA, batch_size=BATCH, num_examples=N, sampler="poisson")
    _dp_model(num_microbatches=4).fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
                                      callbacks=[callback])
    assert callback.used_microbatching is True
    assert callback.accountant.history == [SelfComposedEvent(
        PoissonSampledEvent(BATCH / N, GaussianEvent(SIGMA / 2)), 8)]


def test_as_tf_dataset_yields_the_samplers_batches_in_order():
    ids = np.arange(N, dtype=np.int64)
    features = np.stack([ids, -ids], axis=1).astype("float32")
    for make in (lambda: ShuffledEpochs(N, 40, rng=11),
                 lambda: RandomCheckIn(N, 64, checkin_probability=0.7, variant="averaged",
                                       max_batch_size=6, rng=5),
                 lambda: RandomCheckIn(N, 300, checkin_probability=0.5, rng=2)):
        reference = make()
        expected = [list(reference), list(reference)]      # two passes from the same seed
        dataset = as_tf_dataset(make(), features, ids)
        for pass_expected in expected:
            got = [(xb.numpy(), yb.numpy()) for xb, yb in dataset]
            assert len(got) == len(pass_expected)
            for (xb, yb), idx in zip(got, pass_expected):
                np.testing.assert_array_equal(yb, idx)
                np.testing.assert_array_equal(xb[:, 0], idx.astype("float32"))
            used = np.concatenate([yb for _, yb in got])
            assert used.size == np.unique(used).size       # each example at most once per pass
        # each Keras epoch re-iterates the sampler: a fresh draw, not a replay
        assert any(a.shape != b.shape or not np.array_equal(a, b)
                   for a, b in zip(*expected))


def test_as_tf_dataset_empty_slots_and_skip_empty():
    x, y = _data(2)
    sampler = RandomCheckIn(N, 40, checkin_probability=0.05, variant="averaged", rng=4)
    sizes = [int(xb.shape[0]) for xb, _ in as_tf_dataset(sampler, x, y)]
    assert len(sizes) == 40 and 0 in sizes
    skipping = RandomCheckIn(N, 40, checkin_probability=0.05, variant="averaged", rng=4)
    reference = [b for b in RandomCheckIn(N, 40, checkin_probability=0.05, variant="averaged",
                                          rng=4) if b.size]
    kept = [yb.numpy() for _, yb in as_tf_dataset(skipping, x, y, skip_empty=True)]
    assert len(kept) == len(reference) < 40
    for got, idx in zip(kept, reference):
        np.testing.assert_array_equal(got, y[idx])
    # a DP optimizer trains on the skipped pipeline; the accountant still counts every slot
    model = _dp_model(num_microbatches=None)
    model.fit(as_tf_dataset(skipping, x, y, skip_empty=True), epochs=1, verbose=0)
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    with pytest.raises(ParameterError, match="skip_empty"):
        as_tf_dataset(RandomCheckIn(N, 40, rng=0), x, y, skip_empty=True)
    with pytest.raises(ParameterError, match="skip_empty"):
        as_tf_dataset(SlidingWindowCheckIn(N, 8, rng=0), x, y, skip_empty=True)
    # balls_and_bins(): averaged check-ins with every example checking in, accounted under
    # add/remove adjacency by balls_and_bins, where skipping is not a post-processing: it was
    # accepted (epsilon 1.43 at delta 1e-5 for 2 examples in 16 slots, where the number of
    # released steps alone reveals an example w.p. 15/16); now the callback refuses it when
    # training starts, and the checkin accountant (replace-one) still takes it
    from dpplugins.samplers import balls_and_bins
    allocation = balls_and_bins(N, 16, rng=0)
    skipped = as_tf_dataset(allocation, x, y, empty="skip")
    refused = PrivacyCallback(delta=DELTA, sampler=allocation, accountant="balls_and_bins")
    with pytest.raises(ParameterError, match="empty='dummy'"):
        _dp_model(num_microbatches=None).fit(skipped, epochs=1, verbose=0, callbacks=[refused])
    assert refused.accountant.history == []
    kept = PrivacyCallback(delta=DELTA, sampler=allocation, accountant="checkin")
    _dp_model(num_microbatches=None).fit(skipped, epochs=1, verbose=0, callbacks=[kept])
    assert len(kept.epsilons) == 1


def test_callback_refuses_more_batches_than_accounted_and_accounts_unknown_ones():
    """Keras runs 8 batches per epoch where the callback was told 4: it warned and logged the
    epsilon of 4 steps (an under-count).  Now ``fit`` is refused at set-up; a dataset whose
    length Keras does not know is accounted as it ran (Poisson steps), with a warning."""
    x, y = _data()
    callback = PrivacyCallback(delta=DELTA, batch_size=BATCH, num_examples=N, sampler="poisson", steps_per_epoch=4)
    with pytest.raises(ParameterError, match="at least the 8 batches Keras runs per epoch"):
        _dp_model().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[callback])
    assert callback.accountant.history == [] and callback.epsilons == []
    batches = tf.data.Dataset.from_generator(
        lambda: ((x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, N, BATCH)),
        output_signature=(tf.TensorSpec((None, 4), tf.float32), tf.TensorSpec((None,), tf.int64)))
    with pytest.warns(RuntimeWarning, match="all 8 are accounted"):
        _dp_model().fit(batches, epochs=1, verbose=0, callbacks=[callback])
    assert callback.accountant.history == [SelfComposedEvent(
        PoissonSampledEvent(BATCH / N, GaussianEvent(SIGMA)), 8)]


def test_callback_reads_the_optimizer_at_every_fit():
    """The noise multiplier was read at the first ``fit`` only: a second ``fit`` with another
    DP optimizer (sigma 5 then 0.5) was accounted at sigma 5 twice, and a given
    ``noise_multiplier`` was never compared with the optimizer (a plain Keras SGD, adding no
    noise, was accounted at the given sigma).  The history now holds each fit's own sigma,
    checked against the exact Gaussian-mechanism composition (no amplification by sampling is
    needed for the check: shuffled epochs of batches of 256 = the whole data, one step each)."""
    x, y = _data()

    def model(sigma=None, plain=False):
        tf.keras.utils.set_random_seed(0)
        net = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        optimizer = (tf.keras.optimizers.SGD(0.1) if plain else tfp_opt.DPKerasSGDOptimizer(
            l2_norm_clip=1.0, noise_multiplier=sigma, num_microbatches=None, learning_rate=0.1))
        net.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE))
        return net

    callback = PrivacyCallback(delta=DELTA, batch_size=N, num_examples=N,
                               sampler="shuffled_epochs")
    model(5.0).fit(x, y, batch_size=N, epochs=1, verbose=0, callbacks=[callback])
    model(0.5).fit(x, y, batch_size=N, epochs=1, verbose=0, callbacks=[callback])
    # full-batch Gaussian steps: mu = sqrt(1/5^2 + 1/0.5^2) (add/remove: sensitivity 1)
    mu = math.sqrt(1 / 5.0 ** 2 + 1 / 0.5 ** 2)
    assert callback.epsilons[-1] >= _gaussian_epsilon(mu, DELTA) * (1 - 1e-9)
    assert callback.epsilons[-1] <= _gaussian_epsilon(mu, DELTA) * 1.001
    given = PrivacyCallback(delta=DELTA, noise_multiplier=1.0, batch_size=BATCH, sampler="poisson",
                            num_examples=N)
    with pytest.raises(ParameterError, match="the optimizer's noise multiplier 0.5"):
        model(0.5).fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[given])
    with pytest.raises(ParameterError, match="adds no noise"):
        model(plain=True).fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[given])
    assert given.accountant.history == []


def test_callback_refuses_gradient_accumulation():
    model = _dp_model()
    model.optimizer.gradient_accumulation_steps = 2
    x, y = _data()
    with pytest.raises(ParameterError, match="gradient_accumulation_steps"):
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
                  callbacks=[PrivacyCallback(delta=DELTA, batch_size=BATCH, num_examples=N, sampler="poisson")])


@pytest.mark.parametrize("kwargs, name", [
    ({"delta": 0.0}, "delta"),
    ({"delta": 1.5}, "delta"),
    ({"delta": float("nan")}, "delta"),
    ({"noise_multiplier": -1.0}, "noise_multiplier"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": 300}, "batch_size"),
    ({"num_examples": 0}, "num_examples"),
    ({"sampler": "uniform"}, "sampler"),
    ({"sampler": None}, "sampler"),
    ({"sampler": "poisson", "accountant": "shuffle"}, "accountant"),
    ({"sampler": "shuffled_epochs", "accountant": "pld"}, "accountant"),
    ({"steps_per_epoch": 0}, "steps_per_epoch"),
    ({"used_microbatching": "yes"}, "used_microbatching"),
    ({"log_key": ""}, "log_key"),
    ({"writer": "logs/"}, "writer"),
])
def test_callback_rejects_bad_input(kwargs, name):
    args = dict(delta=DELTA, noise_multiplier=SIGMA, batch_size=BATCH, num_examples=N,
                sampler="poisson")
    args.update(kwargs)
    with pytest.raises(ParameterError) as info:
        PrivacyCallback(**args)
    assert info.value.name == name


def test_bad_sampler_data_and_optimizer_rejected():
    x, y = _data()
    with pytest.raises(ParameterError) as info:
        as_tf_dataset(range(10), x, y)
    assert info.value.name == "sampler"
    with pytest.raises(ParameterError) as info:
        as_tf_dataset(ShuffledEpochs(N + 1, 8), x, y)
    assert info.value.name == "features"
    with pytest.raises(ParameterError) as info:
        as_tf_dataset(ShuffledEpochs(N, 8), x, y[:-1])
    assert info.value.name == "labels"
    with pytest.raises(ParameterError) as info:
        as_tf_dataset(ShuffledEpochs(N, 8), x, y, skip_empty=1)
    assert info.value.name == "skip_empty"
    with pytest.raises(ParameterError) as info:
        noise_multiplier_of(tf.keras.optimizers.SGD())
    assert info.value.name == "optimizer"


# -- random check-ins: dummy updates and the check-in accountant ----------------------------------
def _weights(model):
    return [w.numpy().copy() for w in model.weights]


def test_as_tf_dataset_dummy_updates_are_noise_only_steps():
    x, y = _data(3)
    make = lambda: RandomCheckIn(N, 40, checkin_probability=0.2, rng=6)   # noqa: E731
    reference = list(make())
    assert any(b.size == 0 for b in reference) and any(b.size for b in reference)
    got = list(as_tf_dataset(make(), x, y, empty="dummy"))
    assert len(got) == 40
    for (xb, yb, wb), idx in zip(got, reference):
        if idx.size:
            np.testing.assert_array_equal(yb.numpy(), y[idx])
            np.testing.assert_array_equal(xb.numpy(), x[idx])
            np.testing.assert_array_equal(wb.numpy(), np.ones(idx.size))
        else:   # one all-zero row with sample weight 0
            assert xb.shape[0] == 1 and not xb.numpy().any() and not yb.numpy().any()
            np.testing.assert_array_equal(wb.numpy(), [0.0])
    # a pass with no check-in at all: only dummy updates.  Without noise a DP optimizer leaves
    # the weights exactly as they were (zero weight -> zero gradient -> zero after clipping);
    # with noise they move (the noise-only update), and nothing becomes NaN
    empty = lambda: RandomCheckIn(N, 10, checkin_probability=1e-9, rng=0)  # noqa: E731
    assert all(b.size == 0 for b in empty())
    for noise, moves in ((0.0, False), (SIGMA, True)):
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        model.compile(optimizer=tfp_opt.DPKerasSGDOptimizer(
            l2_norm_clip=1.0, noise_multiplier=noise, num_microbatches=None, learning_rate=0.1),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=tf.keras.losses.Reduction.NONE))
        before = _weights(model)
        model.fit(as_tf_dataset(empty(), x, y, empty="dummy"), epochs=1, verbose=0)
        after = _weights(model)
        assert all(np.isfinite(w).all() for w in after)
        assert any(not np.array_equal(a, b) for a, b in zip(before, after)) is moves
    # what "keep" would do with TF-Privacy 0.9.0: zero-length batches turn the weights into NaN
    model = _dp_model(num_microbatches=None)
    model.fit(as_tf_dataset(empty(), x, y), epochs=1, verbose=0)
    assert not all(np.isfinite(w.numpy()).all() for w in model.weights)


def test_callback_random_checkin_trains_with_dummy_updates_and_matches_offline_checkin():
    x, y = _data(4)
    sampler = RandomCheckIn(N, 64, checkin_probability=0.5, rng=8)
    callback = PrivacyCallback(delta=DELTA, sampler=sampler)
    assert (callback.num_examples, callback.batch_size, callback.steps_per_epoch) == (N, 1, 64)
    model = _dp_model(num_microbatches=None)
    history = model.fit(as_tf_dataset(sampler, x, y, empty="dummy"), epochs=2, verbose=0,
                        callbacks=[callback])
    logged = history.history["epsilon"]
    assert len(logged) == 2 and callback._batches_this_epoch == 64
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert callback.accountant.name == "checkin" and callback.used_microbatching is False
    assert callback.accountant.history == [SelfComposedEvent(sampler.event(SIGMA, 1), 2)]
    assert len(callback.accountant) == 128
    for passes, eps in enumerate(logged, start=1):
        offline = create("checkin", num_examples=N, num_slots=64, checkin_probability=0.5)
        offline.step(noise_multiplier=SIGMA, sample_rate=1 / 64, count=64 * passes)
        assert eps == offline.get_epsilon(DELTA)
        # independent: at most one step per example and pass, replace-one sensitivity 2
        exact = _gaussian_epsilon(2 * math.sqrt(passes) / SIGMA, DELTA)
        assert eps <= exact * 1.01


def test_callback_takes_the_protocol_from_sliding_and_averaged_samplers():
    sliding = PrivacyCallback(delta=DELTA, noise_multiplier=SIGMA,
                              sampler=SlidingWindowCheckIn(N, 8))
    event, count = sliding.epoch_event()
    assert (event.variant, event.window, count) == ("sliding", 8, 1)
    assert sliding.accountant.name == "checkin" and sliding.steps_per_epoch == N - 7
    logs = {}
    sliding.on_epoch_end(0, logs)                  # one run of the protocol, no model needed
    offline = create("checkin", num_examples=N, variant="sliding", window=8)
    offline.step(noise_multiplier=SIGMA, sample_rate=1 / (N - 7), count=N - 7)
    assert logs["epsilon"] == offline.get_epsilon(DELTA)
    averaged = PrivacyCallback(delta=DELTA, noise_multiplier=SIGMA, sampler=RandomCheckIn(
        N, 32, variant="averaged", max_batch_size=12))
    event, _ = averaged.epoch_event()
    assert (event.variant, event.max_batch_size) == ("averaged", 12)
    assert averaged.accountant.name == "checkin"    # a cap: not random allocation
    assert averaged.batch_size == 12 and averaged.sample_rate == 1 / 32
    shuffled = PrivacyCallback(delta=DELTA, noise_multiplier=SIGMA,
                               sampler=ShuffledEpochs(N, 30, drop_last=True))
    assert (shuffled.accountant.name, shuffled.steps_per_epoch) == ("shuffle", 8)


def test_microbatching_halves_noise_only_under_add_remove():
    common = dict(delta=DELTA, noise_multiplier=SIGMA, batch_size=BATCH, num_examples=N,
                  sampler="poisson",
                  used_microbatching=True)
    assert PrivacyCallback(**common).accounted_noise_multiplier == SIGMA / 2
    # replace-one already charges sensitivity 2C, which covers a clipped microbatch
    replace = PrivacyCallback(**common, accountant_options={"neighbouring": "replace_one"})
    assert replace.accounted_noise_multiplier == SIGMA


def test_callback_refuses_no_microbatching_when_the_optimizer_microbatches():
    """From a hostile sweep: used_microbatching=False beside an optimizer with 4 microbatches of
    a 30-example batch was taken at its word: the full noise multiplier was accounted where
    TF-Privacy (and this callback, left to read the optimizer) halves it -- epsilon about 4
    times too small in the sweep's case.  It is refused under add/remove; under replace-one,
    which charges that sensitivity either way, it stands."""
    x, y = _data()
    refused = PrivacyCallback(delta=DELTA, batch_size=BATCH, num_examples=N, sampler="poisson",
                              used_microbatching=False)
    with pytest.raises(ParameterError) as info:
        _dp_model(num_microbatches=4).fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
                                          callbacks=[refused])
    assert info.value.name == "used_microbatching" and refused.accountant.history == []
    replace = PrivacyCallback(delta=DELTA, batch_size=BATCH, num_examples=N, sampler="poisson",
                              used_microbatching=False,
                              accountant_options={"neighbouring": "replace_one"})
    _dp_model(num_microbatches=4).fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
                                      callbacks=[replace])
    assert replace.accounted_noise_multiplier == SIGMA


def test_callback_refuses_microbatching_with_the_checkin_accountant():
    sampler = RandomCheckIn(N, 16, variant="averaged", max_batch_size=32, rng=1)
    x, y = _data()
    model = _dp_model(num_microbatches=4)           # detected: 4 < 32 examples per batch
    with pytest.raises(ParameterError) as info:
        model.fit(as_tf_dataset(sampler, x, y), epochs=1, verbose=0,
                  callbacks=[PrivacyCallback(delta=DELTA, sampler=sampler)])
    assert info.value.name == "used_microbatching"


@pytest.mark.parametrize("kwargs, name", [
    ({"sampler": "checkin"}, "sampler"),
    ({"sampler": RandomCheckIn(N, 16), "accountant": "shuffle"}, "accountant"),
    ({"sampler": RandomCheckIn(N, 16), "accountant": "balls_and_bins"}, "accountant"),
    ({"sampler": RandomCheckIn(N, 16, variant="averaged", max_batch_size=8),
      "accountant": "balls_and_bins"}, "accountant"),
    ({"sampler": RandomCheckIn(N, 16), "num_examples": N + 1}, "num_examples"),
    ({"sampler": RandomCheckIn(N, 16), "steps_per_epoch": 8}, "steps_per_epoch"),
    ({"sampler": ShuffledEpochs(N, 16), "batch_size": 8}, "batch_size"),
    ({"sampler": RandomCheckIn(N, 16), "used_microbatching": True}, "used_microbatching"),
])
def test_callback_rejects_bad_sampler_settings(kwargs, name):
    args = dict(delta=DELTA, noise_multiplier=SIGMA)
    args.update(kwargs)
    with pytest.raises(ParameterError) as info:
        PrivacyCallback(**args)
    assert info.value.name == name


def test_as_tf_dataset_rejects_bad_empty_settings():
    x, y = _data()
    for kwargs, name in [({"empty": "drop"}, "empty"),
                         ({"empty": "dummy", "skip_empty": True}, "skip_empty"),
                         ({"empty": "skip"}, "empty")]:
        with pytest.raises(ParameterError) as info:
            as_tf_dataset(RandomCheckIn(N, 16), x, y, **kwargs)
        assert info.value.name == name


def test_balls_and_bins_callback():
    """The callback with the random-allocation accountant: ``RandomCheckIn(variant="averaged")``
    with check-in probability 1 puts every example in exactly one of the 8 steps of each epoch."""
    x, y = _data(5)
    sampler = RandomCheckIn(N, 8, variant="averaged", rng=2)     # balls and bins, 8 bins
    callback = PrivacyCallback(delta=DELTA, sampler=sampler, accountant="balls_and_bins")
    assert callback.accountant.name == "balls_and_bins" and callback.sample_rate == 1 / 8
    history = _dp_model(num_microbatches=None).fit(
        as_tf_dataset(sampler, x, y, empty="dummy"), epochs=2, verbose=0, callbacks=[callback])
    assert callback.used_microbatching is False and callback._batches_this_epoch == 8
    assert callback.accountant.history == [SelfComposedEvent(sampler.event(SIGMA, 1), 2)]
    logged = history.history["epsilon"]
    assert len(logged) == 2 and logged[0] < logged[1]
    offline = create("balls_and_bins")
    for epochs, eps in enumerate(logged, start=1):
        offline.compose(legacy_step(offline, SIGMA, 1 / 8), 8)   # history: 8 * epochs
        assert eps == offline.get_epsilon(DELTA)
        # independent: one step per example and epoch, a mixture over the step, is at worst the
        # sensitivity-1 Gaussian; 8 steps per epoch amplify well below it
        assert eps < 0.75 * _gaussian_epsilon(math.sqrt(epochs) / SIGMA, DELTA)
    assert len(offline) == len(callback.accountant) == 16


def test_accountant_validity_is_supports_of_the_epoch_event():
    """No table: an accountant is valid for the sampler iff it supports the epoch's event."""
    common = dict(delta=DELTA, noise_multiplier=SIGMA)
    fdp = PrivacyCallback(**common, batch_size=BATCH, num_examples=N, sampler="poisson",
                          accountant="fdp")
    event, count = fdp.epoch_event()
    assert (event, count) == (PoissonSampledEvent(BATCH / N, GaussianEvent(SIGMA)), 8)
    assert create("fdp").supports(event) and fdp.accountant.name == "fdp"
    # batch size 1 on shuffled epochs: the swap accountant supports it, the shuffle one too
    swap = PrivacyCallback(**common, sampler=ShuffledEpochs(N, 1), accountant="swap")
    assert swap.accountant.name == "swap" and swap.epoch_event()[0].batch_size == 1
    with pytest.raises(ParameterError, match="accountants that support it: shuffle") as info:
        PrivacyCallback(**common, sampler=ShuffledEpochs(N, 16), accountant="swap")
    assert info.value.name == "accountant"
    # shuffled epochs by name: the steps per epoch must be those of the protocol
    dropped = PrivacyCallback(**common, batch_size=30, num_examples=N,
                              sampler="shuffled_epochs", steps_per_epoch=8)   # floor(256 / 30)
    assert dropped.epoch_event()[0].drop_last is True
    with pytest.raises(ParameterError) as info:
        PrivacyCallback(**common, batch_size=30, num_examples=N, sampler="shuffled_epochs",
                        steps_per_epoch=5)
    assert info.value.name == "steps_per_epoch"


def test_user_registered_accountant_works_in_the_callback(monkeypatch):
    """An accountant registered in dpplugins' registry is accepted by name, without editing the
    integration: here a PLD accountant under another name, which must give the PLD's numbers."""
    class MyPLD(CorePLD):
        name = "my_pld"

    monkeypatch.setitem(registry._REGISTRY, "my_pld", MyPLD)
    callback = PrivacyCallback(delta=DELTA, noise_multiplier=SIGMA, batch_size=BATCH, sampler="poisson",
                               num_examples=N, accountant="my_pld")
    logs = {}
    callback.on_epoch_end(0, logs)
    assert isinstance(callback.accountant, MyPLD) and callback.accountant_name == "my_pld"
    offline = create("pld")
    offline.step(noise_multiplier=SIGMA, sample_rate=BATCH / N, count=8)
    assert logs["epsilon"] == offline.get_epsilon(DELTA)
    with pytest.raises(ParameterError) as info:      # it does not support shuffled epochs
        PrivacyCallback(delta=DELTA, noise_multiplier=SIGMA, sampler=ShuffledEpochs(N, BATCH),
                        accountant="my_pld")
    assert info.value.name == "accountant"


@pytest.mark.parametrize("participations,checkin_probability", [(2, 1.0), (1, 0.5)])
def test_random_allocation_trains_under_keras_and_is_accounted_by_its_event(
        participations, checkin_probability):
    """``RandomAllocation`` (k-out-of-t, check-in probability p) through ``as_tf_dataset`` with
    noise-only updates for empty steps: the callback picks the accountant from the sampler's
    event and accounts one such event per epoch; independently, an
    example takes part in at most k steps per pass, so k * passes Gaussian steps (add/remove,
    mu = sqrt(k passes) / sigma, Balle & Wang 2018) bound it from above."""
    from dpplugins.samplers import RandomAllocation
    from dpplugins.events import RandomAllocationEvent
    x, y = _data(5)
    steps = 16
    sampler = RandomAllocation(N, steps, participations=participations,
                               checkin_probability=checkin_probability, rng=4)
    seen = np.zeros(N, dtype=int)
    for batch in as_tf_dataset(sampler, x, np.arange(N), empty="dummy"):
        seen[batch[1].numpy()[batch[2].numpy() > 0]] += 1
    assert seen.max() <= participations
    if checkin_probability == 1.0:
        assert (seen == participations).all()
    with pytest.raises(ParameterError, match="dummy"):
        as_tf_dataset(sampler, x, y, empty="skip")
    callback = PrivacyCallback(delta=DELTA, sampler=sampler)
    model = _dp_model(num_microbatches=None)
    history = model.fit(as_tf_dataset(sampler, x, y, empty="dummy"), epochs=2, verbose=0,
                        callbacks=[callback])
    logged = history.history["epsilon"]
    assert len(logged) == 2 and callback._batches_this_epoch == steps
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert callback.accountant.name == "balls_and_bins"
    assert callback.accountant.history == [SelfComposedEvent(sampler.event(SIGMA, 1), 2)]
    assert sampler.event(SIGMA, 1) == RandomAllocationEvent(
        steps, 1, GaussianEvent(SIGMA), participations, checkin_probability)
    for passes, eps in enumerate(logged, start=1):
        assert 0 < eps <= _gaussian_epsilon(math.sqrt(participations * passes) / SIGMA, DELTA)
    assert logged[0] < logged[1]


def test_unknown_accountant_options_are_named_not_the_sampler():
    # (the sampler was blamed: "sampler='poisson' is invalid")
    with pytest.raises(ParameterError, match="accountant_options") as info:
        PrivacyCallback(delta=1e-5, noise_multiplier=1.0, batch_size=10, num_examples=100, sampler="poisson",
                        accountant_options={"bogus": 1})
    assert "bogus" in str(info.value)


# -- non-finite examples ---------------------------------------------------------------------------
def _bad_batch(value):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype("float32")
    y = rng.normal(size=(4, 1)).astype("float32")
    x[2, 0] = value
    return x, y


def _layers():
    tf.keras.utils.set_random_seed(1)
    return [tf.keras.Input((3,)), tf.keras.layers.Dense(5, activation="tanh"),
            tf.keras.layers.Dense(1)]


def _weights(model):
    return np.concatenate([v.numpy().ravel() for v in model.trainable_variables])


def _guarded_model(guard, optimizer_class=None):
    model = tf.keras.Sequential(_layers())
    optimizer = (optimizer_class or tfp_opt.DPKerasSGDOptimizer)(
        l2_norm_clip=1.0, noise_multiplier=1.0, learning_rate=0.1)
    if guard:
        assert guard_non_finite(optimizer) is optimizer
    model.compile(optimizer=optimizer, loss=tf.keras.losses.MeanSquaredError(
        reduction=tf.keras.losses.Reduction.NONE))
    return model


def _fitted(guard, x, y, epochs=1, optimizer_class=None):
    model = _guarded_model(guard, optimizer_class)
    tf.random.set_seed(7)
    model.fit(x, y, batch_size=4, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("value", [np.inf, np.nan])
@pytest.mark.parametrize("optimizer_class", ["DPKerasSGDOptimizer",
                                             "VectorizedDPKerasSGDOptimizer"])
def test_guard_non_finite_refuses_the_step_before_it_is_applied(value, optimizer_class):
    # TF-Privacy 0.9.0 released an all-NaN model when one example of the batch was not finite;
    # the Jacobian of the batch's losses makes every example's gradient NaN (0 * inf in X^T G),
    # so nothing can be counted as zero alone: the step is refused
    cls = getattr(tfp_opt, optimizer_class)
    x, y = _bad_batch(value)
    assert not np.isfinite(_weights(_fitted(False, x, y, optimizer_class=cls))).any()
    w0 = _weights(tf.keras.Sequential(_layers()))
    model = _guarded_model(True, cls)
    with pytest.raises(tf.errors.InvalidArgumentError, match="dpplugins"):
        model.fit(x, y, batch_size=4, shuffle=False, verbose=0)
    assert np.array_equal(_weights(model), w0)
    finite_x, finite_y = _bad_batch(0.5)
    assert np.array_equal(_weights(_fitted(False, finite_x, finite_y, 2, cls)),
                          _weights(_fitted(True, finite_x, finite_y, 2, cls)))
    with pytest.raises(ParameterError, match="optimizer"):
        guard_non_finite(tf.keras.optimizers.SGD(0.1))


def test_the_callback_guards_the_optimizer_even_after_an_unguarded_fit():
    """PrivacyCallback installs the guard at the start of fit and has the training step traced
    again: a model fitted once without the callback (its step traced unguarded) is refused on
    a non-finite batch, and finite training with the callback is bit-identical to without."""
    finite_x, finite_y = _bad_batch(0.5)
    x, y = _bad_batch(np.inf)

    def callback(n=4):
        return PrivacyCallback(delta=DELTA, batch_size=4, num_examples=n,
                               sampler="shuffled_epochs", accountant="shuffle")

    model = _guarded_model(False)
    model.fit(finite_x, finite_y, batch_size=4, shuffle=False, verbose=0)   # traced, unguarded
    before = _weights(model)
    with pytest.raises(tf.errors.InvalidArgumentError, match="dpplugins"):
        model.fit(x, y, batch_size=4, shuffle=False, verbose=0, callbacks=[callback()])
    assert np.array_equal(_weights(model), before)
    runs = []
    for callbacks in ([], [callback(8)]):
        model = _guarded_model(False)
        tf.random.set_seed(7)
        model.fit(np.tile(finite_x, (2, 1)), np.tile(finite_y, (2, 1)), batch_size=4, epochs=2,
                  shuffle=False, verbose=0, callbacks=callbacks)
        runs.append(_weights(model))
    assert np.array_equal(runs[0], runs[1])


def test_the_sampler_must_be_named():
    """Without a sampler the callback used Poisson accounting, which a plain ``fit`` (shuffled
    epochs) does not do: 2 epochs of 64 examples in batches of 8 at sigma 1 were reported at
    the Poisson upper bound, below the certified lower bound of the shuffled epochs that ran."""
    with pytest.raises(ParameterError, match="sampler='shuffled_epochs'") as info:
        PrivacyCallback(delta=DELTA, noise_multiplier=1.0, batch_size=8, num_examples=64)
    assert info.value.name == "sampler"
    poisson = create("pld").compose(SelfComposedEvent(
        PoissonSampledEvent(8 / 64, GaussianEvent(1.0)), 16))
    ran = create("shuffle").compose(ShuffledEpochs(64, 8).event(1.0, 2))
    assert poisson.get_epsilon(DELTA) < ran.get_epsilon_bounds(DELTA).lower
