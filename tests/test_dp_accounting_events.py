"""dp_accounting events <-> our events (``dpplugins.integrations.dp_accounting_events``).

Independent references: dp_accounting's definitions of its events (``dp_event.py``: randomized
response outputs the input bucket with probability ``1 - p`` and a uniform bucket otherwise), the
exact privacy profile of composed binary randomized response (``conftest``), and our samplers'
own events (what a training with them releases).
"""

import json
import math
from fractions import Fraction

import pytest

dp_accounting = pytest.importorskip("dp_accounting")

from conftest import rr_composed_delta_exact  # noqa: E402

from dpplugins.accountants import create  # noqa: E402
from dpplugins.errors import ParameterError  # noqa: E402
from dpplugins.events import (ComposedEvent, EpsilonDeltaEvent, FixedBatchEvent,  # noqa: E402
                              GaussianEvent, LaplaceEvent, NonPrivateEvent, NoOpEvent,
                              PNSGDEvent, PoissonSampledEvent, RandomAllocationEvent,
                              RandomizedResponseEvent, SelfComposedEvent,
                              ShuffledEpochsEvent, ShuffleEvent, SwapEvent, UnsupportedEvent,
                              from_dict)
from dpplugins.integrations.dp_accountants import (GDPAccountant, PLDAccountant,  # noqa: E402
                                                   RandomAllocationAccountant)
from dpplugins.integrations.dp_accounting_events import (to_dp_event, to_event,  # noqa: E402
                                                         translate)
from dpplugins.integrations.dp_events import (DPPluginsDpEvent, EpsilonDeltaDpEvent,  # noqa: E402
                                              PNSGDDpEvent, RandomAllocationDpEvent,
                                              RandomCheckInDpEvent, RandomizedResponseDpEvent,
                                              ShuffledEpochsDpEvent)
from dpplugins.samplers import (RandomCheckIn, ShuffledEpochs, SlidingWindowCheckIn,  # noqa: E402
                                balls_and_bins)

dpe = dp_accounting
G, P, S, C = (dpe.GaussianDpEvent, dpe.PoissonSampledDpEvent, dpe.SelfComposedDpEvent,
              dpe.ComposedDpEvent)
DELTA = 1e-5


# -- dp_accounting -> ours ------------------------------------------------------------------------
@pytest.mark.parametrize("theirs, ours", [
    (G(1.5), GaussianEvent(1.5)),
    (dpe.LaplaceDpEvent(0.5), LaplaceEvent(0.5)),
    (P(0.01, G(1.0)), PoissonSampledEvent(0.01, GaussianEvent(1.0))),
    (P(0.0, dpe.LaplaceDpEvent(1.0)), PoissonSampledEvent(0.0, LaplaceEvent(1.0))),
    (dpe.SampledWithoutReplacementDpEvent(1000, 10, G(1.0)),
     FixedBatchEvent(1000, 10, GaussianEvent(1.0))),
    (dpe.SampledWithoutReplacementDpEvent(1000, 0, G(1.0)), NoOpEvent()),
    (S(G(1.0), 7), SelfComposedEvent(GaussianEvent(1.0), 7)),
    (C([G(1.0), dpe.NoOpDpEvent()]), ComposedEvent((GaussianEvent(1.0), NoOpEvent()))),
    (dpe.NoOpDpEvent(), NoOpEvent()),
    (dpe.NonPrivateDpEvent(), NonPrivateEvent()),
    (EpsilonDeltaDpEvent(1.0, 1e-6), EpsilonDeltaEvent(1.0, 1e-6)),
    (EpsilonDeltaDpEvent(math.inf, 0.0), NonPrivateEvent()),
    (EpsilonDeltaDpEvent(1.0, 1.0), NonPrivateEvent()),
    (RandomizedResponseDpEvent(0.3, 1), NoOpEvent()),          # one bucket: nothing released
    (RandomizedResponseDpEvent(0.0, 4), NonPrivateEvent()),    # the input itself
    (RandomizedResponseDpEvent(1.0, 4), RandomizedResponseEvent(0.0, 4)),
], ids=lambda e: type(e).__name__)
def test_dp_accounting_events_translate_to_ours(theirs, ours):
    assert to_event(theirs) == ours


@pytest.mark.parametrize("p, k", [(0.1, 3), (4 / (3 + math.e), 4), (0.5, 2), (0.999, 10),
                                  (1e-6, 2)])
def test_randomized_response_epsilon0_follows_dp_accountings_definition(p, k):
    # dp_accounting: output the input with probability 1 - p, else a uniform one of k buckets;
    # so the input bucket has probability 1 - p + p / k and each other one p / k
    event = to_event(RandomizedResponseDpEvent(p, k))
    assert isinstance(event, RandomizedResponseEvent) and event.num_buckets == k
    e = math.exp(event.epsilon0)
    assert e / (e + k - 1) == pytest.approx(1 - p + p / k, rel=1e-12)
    assert 1 / (e + k - 1) == pytest.approx(p / k, rel=1e-12)
    back = to_dp_event(event)
    assert back.num_buckets == k and back.noise_parameter == pytest.approx(p, rel=1e-12)


def test_randomized_response_through_the_wrapper_matches_the_exact_profile():
    # five binary randomized responses with p = 2 / (1 + e): eps0 = 1 each; replace one record
    # (the relation randomized response is defined for); exact profile from the binomial
    event = RandomizedResponseDpEvent(2 / (1 + math.e), 2)
    accountant = PLDAccountant(dpe.NeighboringRelation.REPLACE_ONE).compose(event, 5)
    assert accountant.history == [SelfComposedEvent(RandomizedResponseEvent(
        to_event(event).epsilon0, 2), 5)]
    for eps in (0.5, 1.0, 3.0):
        exact = rr_composed_delta_exact(eps, 1.0, 5)
        assert exact * (1 - 1e-9) <= accountant.get_delta(eps) <= exact * (1 + 1e-3) + 1e-12
    assert accountant.get_epsilon(0) == pytest.approx(5.0, rel=1e-9)


@pytest.mark.parametrize("event", [
    dpe.UnsupportedDpEvent(),
    dpe.SampledWithReplacementDpEvent(1000, 10, G(1.0)),
    dpe.SingleEpochTreeAggregationDpEvent(1.0, 10),
], ids=lambda e: type(e).__name__)
def test_events_without_counterpart_become_unsupported_events(event):
    ours = to_event(event)
    assert isinstance(ours, UnsupportedEvent) and type(event).__name__ in ours.reason
    for accountant in (PLDAccountant(), GDPAccountant()):
        assert accountant.supports(event) is False
        assert accountant._maybe_compose(event, 1, False).invalid_event is event


def test_translate_names_the_dp_accounting_sub_event_of_every_event_it_built():
    laplace = dpe.LaplaceDpEvent(1.0)
    bad = dpe.SampledWithReplacementDpEvent(1000, 10, G(1.0))
    event = C([S(P(0.1, laplace), 3), bad])
    ours, origins = translate(event)
    assert origins[ours] is event
    assert origins[PoissonSampledEvent(0.1, LaplaceEvent(1.0))] == P(0.1, laplace)
    assert origins[LaplaceEvent(1.0)] is laplace
    details = PLDAccountant()._maybe_compose(event, 1, False)
    assert details.invalid_event is bad and "SampledWithReplacementDpEvent" in details.error_message


@pytest.mark.parametrize("event, name", [
    (G(-1.0), "GaussianDpEvent.noise_multiplier"),
    (dpe.LaplaceDpEvent(float("inf")), "LaplaceDpEvent.noise_multiplier"),
    (P(1.5, G(1.0)), "PoissonSampledDpEvent.sampling_probability"),
    (dpe.SampledWithoutReplacementDpEvent(10, 11, G(1.0)),
     "SampledWithoutReplacementDpEvent.sample_size"),
    (S(G(1.0), -1), "SelfComposedDpEvent.count"),
])
def test_invalid_dp_accounting_parameters_name_the_field(event, name):
    with pytest.raises(ParameterError) as info:
        to_event(event)
    assert info.value.name == name
    with pytest.raises(ParameterError):
        RandomizedResponseDpEvent(1.5, 2)
    with pytest.raises(ParameterError) as info:
        EpsilonDeltaDpEvent(-1.0, 0.0)
    assert info.value.name == "EpsilonDeltaDpEvent.epsilon"


# -- ours -> dp_accounting and back ---------------------------------------------------------------
ROUND_TRIP = [
    GaussianEvent(1.0), LaplaceEvent(2.0), EpsilonDeltaEvent(1.0, 1e-5),
    PoissonSampledEvent(0.1, GaussianEvent(1.0)), FixedBatchEvent(100, 10, GaussianEvent(2.0)),
    ComposedEvent((GaussianEvent(1.0), SelfComposedEvent(LaplaceEvent(1.0), 3))),
    NoOpEvent(), NonPrivateEvent(),
    ShuffledEpochsEvent(1000, 100, 2, GaussianEvent(1.0)),
    ShuffledEpochsEvent(1000, 30, Fraction(3, 2), GaussianEvent(1.0)),
    ShuffledEpochsEvent(1000, 30, Fraction(1, 33), GaussianEvent(1.0), drop_last=True),
    RandomCheckIn(1000, 100, checkin_probability=0.5).event(4.0, 2),
    SlidingWindowCheckIn(100, 10).event(4.0),
    RandomAllocationEvent(10, 3, GaussianEvent(1.0)),
    PNSGDEvent(1000, 2, GaussianEvent(2.0), 1.0, 2.0, 0.5),
    PNSGDEvent(1000, 1, LaplaceEvent(2.0), 1.0, 2.0, 0.5, "online"),
    # no dp_accounting class and no view: DPPluginsDpEvent
    SwapEvent(100, 2, GaussianEvent(1.0)),
    ShuffleEvent(100, RandomizedResponseEvent(1.0, 2)),
    RandomAllocationEvent(10, 3, GaussianEvent(1.0), participations=2),
    RandomCheckIn(1000, 100).event(4.0, Fraction(1, 2)),
    ShuffledEpochsEvent(1, 1, 1, GaussianEvent(1.0)),
    ShuffledEpochsEvent(1000, 100, 1, LaplaceEvent(1.0)),
]


@pytest.mark.parametrize("event", ROUND_TRIP, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_dp_accounting(event):
    theirs = to_dp_event(event)
    assert isinstance(theirs, dpe.DpEvent)
    assert to_event(theirs) == event
    # dp_accounting's own serialisation of its events (and of ours) round-trips too
    assert dpe.DpEvent.from_named_tuple(theirs.to_named_tuple()) == theirs


def test_to_dp_event_uses_dp_accountings_classes_and_our_views():
    assert to_dp_event(PoissonSampledEvent(0.1, GaussianEvent(1.0))) == P(0.1, G(1.0))
    assert to_dp_event(FixedBatchEvent(100, 10, GaussianEvent(1.0))) == \
        dpe.SampledWithoutReplacementDpEvent(100, 10, G(1.0))
    assert to_dp_event(UnsupportedEvent("loader")) == dpe.UnsupportedDpEvent()
    assert to_dp_event(RandomAllocationEvent(10, 3, GaussianEvent(1.0))) == \
        RandomAllocationDpEvent(1.0, 10, 3)
    assert to_dp_event(ShuffledEpochsEvent(1000, 30, Fraction(3, 2), GaussianEvent(1.0))) == \
        ShuffledEpochsDpEvent(1.0, 1000, 30, 1.5)
    swap = SwapEvent(100, 2, GaussianEvent(1.0))
    assert to_dp_event(swap) == DPPluginsDpEvent(swap)
    with pytest.raises(ParameterError):
        to_dp_event(G(1.0))
    with pytest.raises(ParameterError):
        DPPluginsDpEvent("not an event")


# -- our views are our samplers' events ---------------------------------------------------------
def test_views_are_exactly_the_samplers_events():
    assert ShuffledEpochsDpEvent(1.1, 1000, 100, 2).to_event() == \
        ShuffledEpochs(1000, 100).event(1.1, 2)
    assert ShuffledEpochsDpEvent(1.1, 1000, 30, 1.5).to_event() == \
        ShuffledEpochs(1000, 30).event(1.1, Fraction(3, 2))
    # drop_last: 33 steps per epoch, 1.5 epochs begin 50 steps (ceil(1.5 * 33))
    assert ShuffledEpochsDpEvent(1.1, 1000, 30, 1.5, drop_last=True).to_event() == \
        ShuffledEpochs(1000, 30, drop_last=True).event(1.1).with_steps(50)
    # a float number of epochs that is not whole steps runs the first ceil(epochs * T) steps
    assert ShuffledEpochsDpEvent(1.0, 1000, 30, 1.01).to_event().steps == 35
    assert RandomCheckInDpEvent(2.0, 1000, 100, 0.5, num_passes=3).to_event() == \
        RandomCheckIn(1000, 100, checkin_probability=0.5).event(2.0, 3)
    assert RandomCheckInDpEvent(2.0, 1000, 100, variant="averaged",
                                max_batch_size=20).to_event() == \
        RandomCheckIn(1000, 100, variant="averaged", max_batch_size=20).event(2.0)
    assert RandomCheckInDpEvent(2.0, 100, variant="sliding", window=10).to_event() == \
        SlidingWindowCheckIn(100, 10).event(2.0)
    assert RandomAllocationDpEvent(1.0, 10, 3).to_event() == RandomAllocationEvent(
        10, 3, GaussianEvent(1.0))
    view = PNSGDDpEvent(2.0, 1.0, 2.0, 0.5, 1000, 2, noise="laplace", smoothness=4.0)
    assert view.to_event() == PNSGDEvent(1000, 2, LaplaceEvent(2.0), 1.0, 2.0, 0.5,
                                         smoothness=4.0)
    for v in (ShuffledEpochsDpEvent(1.1, 1000, 30, 1.5), view):   # JSON of our event
        assert from_dict(json.loads(json.dumps(v.to_event().to_dict()))) == v.to_event()


def test_random_allocation_wrapper_accounts_the_balls_and_bins_sampler_view():
    # balls_and_bins(n, t) is RandomCheckIn(n, t, 1.0, "averaged"): its view is random
    # allocation, so the random-allocation wrapper accounts it with the numbers of the
    # RandomAllocationDpEvent of the same steps
    sampler = balls_and_bins(1000, 10)
    view = RandomCheckInDpEvent(1.0, 1000, 10, variant="averaged", num_passes=3)
    assert view.to_event() == sampler.event(1.0, 3)
    ours = RandomAllocationAccountant().compose(view)
    reference = RandomAllocationAccountant().compose(RandomAllocationDpEvent(1.0, 10, 3))
    assert ours.get_epsilon_bounds(DELTA) == reference.get_epsilon_bounds(DELTA)
    capped = RandomCheckInDpEvent(1.0, 1000, 10, variant="averaged", max_batch_size=50)
    assert RandomAllocationAccountant().supports(capped) is False


def test_fixed_size_batches_through_dp_accountings_sampled_without_replacement():
    # SampledWithoutReplacementDpEvent is our FixedBatchEvent: the f-DP accountant accounts it
    # for replace-one neighbours (Dong, Roth, Su 2022, Thm 4.2), and refuses it for add/remove
    event = dpe.SampledWithoutReplacementDpEvent(1000, 10, G(1.0))
    wrapper = GDPAccountant(dpe.NeighboringRelation.REPLACE_ONE).compose(event, 200)
    core = create("fdp", sampling="uniform").compose(FixedBatchEvent(1000, 10, GaussianEvent(1.0)),
                                                     200)
    assert wrapper.get_epsilon(DELTA) == core.get_epsilon(DELTA)
    assert GDPAccountant().supports(event) is False


def test_any_of_our_events_through_dppluginsdpevent():
    event = DPPluginsDpEvent(SelfComposedEvent(PoissonSampledEvent(0.01, GaussianEvent(1.0)),
                                               1000))
    theirs = S(P(0.01, G(1.0)), 1000)
    assert PLDAccountant().compose(event).get_epsilon(DELTA) == \
        PLDAccountant().compose(theirs).get_epsilon(DELTA)
    # dp_accounting's own accountants do not know it
    assert dpe.rdp.RdpAccountant().supports(event) is False


def test_get_delta_at_infinite_epsilon_is_the_mass_at_infinite_loss():
    """``get_delta(inf)`` raised a ParameterError about epsilon=inf.  It is now the certified
    delta at the largest finite epsilon: at least the exact mass at infinite loss (delta0 of
    an (epsilon, delta) event, 1 - (1 - delta0)^k for k of them) and, for Gaussian steps
    (no such mass), below 1e-20."""
    gauss = PLDAccountant()
    gauss.compose(S(P(0.01, G(1.0)), 100))
    assert 0.0 <= gauss.get_delta(math.inf) < 1e-20
    mixed = PLDAccountant()
    mixed.compose(C([EpsilonDeltaDpEvent(1.0, 1e-6), EpsilonDeltaDpEvent(2.0, 1e-6)]))
    exact = 1 - (1 - 1e-6) ** 2
    assert exact <= mixed.get_delta(math.inf) <= exact * (1 + 1e-6)
    assert PLDAccountant().get_delta(math.inf) == 0.0


@pytest.mark.parametrize("kind", ["composed", "poisson", "self", "sampled"])
def test_deeply_nested_dp_accounting_events_are_refused_clearly(kind):
    """A dp_accounting event nested 400 deep raised RecursionError in the translation (before
    our constructors refuse anything deeper than events.MAX_NESTING); now a ParameterError. The
    deepest event our constructors accept (MAX_NESTING levels) still translates, and a
    composition that deep accounts as the Gaussian it is: epsilon equals dp_accounting's PLD
    of the plain GaussianDpEvent."""
    from dp_accounting.pld import pld_privacy_accountant

    from dpplugins.events import MAX_NESTING

    wrap = {"composed": lambda e: dp_accounting.ComposedDpEvent([e]),
            "poisson": lambda e: dp_accounting.PoissonSampledDpEvent(1.0, e),
            "self": lambda e: dp_accounting.SelfComposedDpEvent(e, 1),
            "sampled": lambda e: dp_accounting.SampledWithoutReplacementDpEvent(5, 5, e)}[kind]

    def nest(depth):
        event = dp_accounting.GaussianDpEvent(1.0)
        for _ in range(depth - 1):
            event = wrap(event)
        return event

    for depth in (MAX_NESTING + 1, 400, 5000):
        with pytest.raises(ParameterError, match="nested more than 100 deep"):
            to_event(nest(depth))
        with pytest.raises(ParameterError, match="nested more than 100 deep"):
            PLDAccountant().compose(nest(depth))
    assert to_event(nest(MAX_NESTING)) is not None
    if kind in ("poisson", "sampled"):
        return   # sampling inside sampling: no accountant supports it (tested elsewhere)
    deepest = PLDAccountant().compose(nest(MAX_NESTING))
    plain = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4).compose(
        dp_accounting.GaussianDpEvent(1.0))
    assert deepest.get_epsilon(1e-5) == pytest.approx(plain.get_epsilon(1e-5), rel=2e-3)
