from dpplugins.events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent
import pytest

from dpplugins.accountants import create
from dpplugins.calibration import find_noise_multiplier
from dpplugins.errors import ParameterError


def test_calibrated_sigma_meets_target_and_is_nearly_minimal():
    sigma = find_noise_multiplier(target_epsilon=3.0, delta=1e-5, sample_rate=0.02, steps=2000)
    acc = create("pld")
    acc.step(noise_multiplier=sigma, sample_rate=0.02, count=2000)
    assert acc.get_epsilon(1e-5) <= 3.0
    smaller = create("pld")
    smaller.step(noise_multiplier=sigma * 0.99, sample_rate=0.02, count=2000)
    # 1% less noise is certified to exceed the target: sigma is within 1% of the optimum
    assert smaller.get_epsilon_bounds(1e-5).lower > 3.0


def test_calibration_does_not_touch_a_live_accountant():
    live = create("pld")
    live.step(noise_multiplier=1.0, sample_rate=0.1, count=5)
    find_noise_multiplier(target_epsilon=1.0, delta=1e-5, sample_rate=0.1, steps=10)
    assert live.history == [SelfComposedEvent(PoissonSampledEvent(0.1, GaussianEvent(1.0)), 5)]


@pytest.mark.parametrize("kwargs,name", [
    (dict(target_epsilon=-1, delta=1e-5, sample_rate=0.1, steps=10), "target_epsilon"),
    (dict(target_epsilon=1, delta=2.0, sample_rate=0.1, steps=10), "delta"),
    (dict(target_epsilon=1, delta=1e-5, sample_rate=0.0, steps=10), "sample_rate"),
    (dict(target_epsilon=1, delta=1e-5, sample_rate=0.1, steps=0), "steps"),
    (dict(target_epsilon=1, delta=1e-5, sample_rate=0.1, steps=10, accountant="nope"), "accountant"),
])
def test_calibration_bad_input(kwargs, name):
    with pytest.raises(ParameterError, match=name):
        find_noise_multiplier(**kwargs)



@pytest.mark.parametrize("accountant", ["pld", "fdp"])
def test_a_target_met_at_every_noise_returns_the_smallest_searched(accountant):
    """q = 1e-300, 100 steps: delta(0), the total variation, is at most steps * q = 1e-298
    (each step differs from the no-example step only when the example is sampled), below
    delta, so epsilon is 0 at every noise multiplier.  The search refused ('could not bracket
    a noise multiplier'); the answer is the smallest multiplier it searches, 1e-12."""
    sigma = find_noise_multiplier(target_epsilon=1.0, delta=1e-5, sample_rate=1e-300,
                                  steps=100, accountant=accountant)
    assert sigma == pytest.approx(1e-12, rel=1e-9)
    acc = create(accountant)
    acc.step(noise_multiplier=sigma, sample_rate=1e-300, count=100)
    assert acc.get_epsilon(1e-5) == 0.0


def test_a_refusal_at_little_noise_moves_the_search_to_more_noise():
    """pnsgd refuses (NumericalError) at noise so small that its passes' error terms exceed
    every delta; the search stopped there, so a target of 1e4 was refused while 3 answered
    (found by a hostile sweep of the command line).  Such a refusal now counts as epsilon
    inf; the answer is still checked by a certified query."""
    from dpplugins.events import PNSGDEvent

    def event(sigma):
        return PNSGDEvent(6000, 2, GaussianEvent(sigma), 1.0, 1.0, 0.1, "shuffled")

    for target in (3.0, 1e4):
        sigma = find_noise_multiplier(target_epsilon=target, delta=1e-5, accountant="pnsgd",
                                      event_for_noise=event)
        acc = create("pnsgd").compose(event(sigma))
        assert acc.get_epsilon(1e-5) <= target


def test_more_compositions_than_the_engines_represent_are_refused_naming_the_limit():
    from dpplugins.errors import NumericalError

    with pytest.raises(NumericalError, match=r"2\*\*53"):
        find_noise_multiplier(target_epsilon=3.0, delta=1e-5, sample_rate=0.01, steps=10**30)


def test_a_run_refused_at_every_noise_says_why():
    """10^15 epochs of pnsgd are refused at every noise multiplier searched (the passes'
    construction error exceeds every delta).  The search's "could not bracket" message took
    exp of a clamped gap and raised a bare OverflowError; it now says the accountant refused,
    and why."""
    from dpplugins.errors import NumericalError
    from dpplugins.events import PNSGDEvent

    with pytest.raises(NumericalError, match="refused at some noise multipliers: .*delta"):
        find_noise_multiplier(target_epsilon=3.0, delta=1e-5, accountant="pnsgd",
                              event_for_noise=lambda s: PNSGDEvent(
                                  6000, 10**15, GaussianEvent(s), 1.0, 1.0, 0.1, "shuffled"))
