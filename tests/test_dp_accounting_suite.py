"""Drop-in for dp_accounting users, measured by dp_accounting's own tests.

1. :class:`OurAccountantsAreDpAccountingAccountants` subclasses dp_accounting's abstract
   ``privacy_accountant_test.PrivacyAccountantTest`` (shipped in the installed dp_accounting)
   with our PLD and f-DP wrappers (every neighbouring relation of the PLD one).
2. :class:`DpAccountingsPLDTestsOnOurPLD` runs every test of the installed
   ``pld/pld_privacy_accountant_test.py`` with ``pld_privacy_accountant.PLDAccountant`` replaced
   by our wrapper (the tests build their accountant from that module attribute).  No test is
   adapted.
3. :class:`NewerDpAccountingPLDBehaviour` carries the behaviours that later dp_accounting
   releases (0.4.4 and up) test in the same file and the installed 0.4.3 does not ship:
   randomized response and ``EpsilonDeltaDpEvent`` (our views of
   :mod:`dpplugins.integrations.dp_events` where the installed dp_accounting lacks the classes),
   the neighbouring relations, the Gaussian support matrix, and delta = 0 queries (exact pure-DP
   epsilon where finite, inf where none).  Written here from dp_accounting's definitions (the
   expected numbers are closed forms); the tests adapted to our certified bounds say so.
"""

import math
from unittest import mock

import pytest

dp_accounting = pytest.importorskip("dp_accounting")

from absl.testing import parameterized  # noqa: E402
from dp_accounting import dp_event, privacy_accountant, privacy_accountant_test  # noqa: E402
from dp_accounting.pld import pld_privacy_accountant, pld_privacy_accountant_test  # noqa: E402

from dpplugins.integrations.dp_accountants import GDPAccountant, PLDAccountant  # noqa: E402
from dpplugins.integrations.dp_events import (EpsilonDeltaDpEvent,  # noqa: E402
                                              RandomizedResponseDpEvent)

Rel = privacy_accountant.NeighboringRelation
UnsupportedEventError = privacy_accountant.UnsupportedEventError


class OurAccountantsAreDpAccountingAccountants(privacy_accountant_test.PrivacyAccountantTest):
    """dp_accounting's contract for every PrivacyAccountant: unsupported events (nested too) are
    refused naming the sub-event, no events / no-op give 0, non-private gives inf."""

    def _make_test_accountants(self):
        return [PLDAccountant(), PLDAccountant(Rel.REPLACE_ONE),
                PLDAccountant(Rel.REPLACE_SPECIAL), GDPAccountant()]


class DpAccountingsPLDTestsOnOurPLD(pld_privacy_accountant_test.PldPrivacyAccountantTest):
    """The installed ``pld_privacy_accountant_test`` with our PLD wrapper swapped in."""

    def setUp(self):
        super().setUp()
        patcher = mock.patch.object(pld_privacy_accountant, "PLDAccountant", PLDAccountant)
        patcher.start()
        self.addCleanup(patcher.stop)

    def _make_test_accountants(self):
        return [PLDAccountant(), GDPAccountant()]

    def test_the_swap_is_in_place(self):
        self.assertIs(pld_privacy_accountant.PLDAccountant, PLDAccountant)
        self.assertIsInstance(pld_privacy_accountant.PLDAccountant(), PLDAccountant)


_GAUSSIAN_EVENTS = [
    dp_event.GaussianDpEvent(1.0),
    dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), 6),
    dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0), dp_event.GaussianDpEvent(2.0)]),
    dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.0)),
    dp_event.ComposedDpEvent([dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.0)),
                              dp_event.GaussianDpEvent(2.0)]),
]


class NewerDpAccountingPLDBehaviour(parameterized.TestCase):
    """What dp_accounting >= 0.4.4 tests of its PLD accountant, on our PLD wrapper."""

    # -- support by neighbouring relation ----------
    @parameterized.product(event=_GAUSSIAN_EVENTS,
                           relation=[Rel.ADD_OR_REMOVE_ONE, Rel.REPLACE_ONE,
                                     Rel.REPLACE_SPECIAL])
    def test_supports_gaussian(self, event, relation):
        self.assertTrue(PLDAccountant(relation).supports(event))

    @parameterized.named_parameters(('replace_one', Rel.REPLACE_ONE, True),
                                    ('replace_special', Rel.REPLACE_SPECIAL, True),
                                    ('add_or_remove_one', Rel.ADD_OR_REMOVE_ONE, False))
    def test_supports_randomized_response(self, relation, supported):
        # randomized response releases a function of one record: it is defined for replacing
        # the record (by another, or by a special one), not for adding or removing it
        event = RandomizedResponseDpEvent(noise_parameter=0.1, num_buckets=3)
        self.assertEqual(PLDAccountant(relation).supports(event), supported)

    @parameterized.parameters((Rel.REPLACE_ONE, True), (Rel.REPLACE_SPECIAL, True),
                              (Rel.ADD_OR_REMOVE_ONE, False))
    def test_supports_subsampled_gaussian_and_rr_composition(self, relation, supported):
        event = dp_event.ComposedDpEvent([
            dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.0)),
            RandomizedResponseDpEvent(noise_parameter=0.1, num_buckets=3)])
        self.assertEqual(PLDAccountant(relation).supports(event), supported)

    @parameterized.parameters(
        # randomized response has no add/remove reading (dp_accounting: "neighboring_relation
        # must be REPLACE_ONE or REPLACE_SPECIAL")
        (RandomizedResponseDpEvent(0.1, 3), Rel.ADD_OR_REMOVE_ONE),
        # ADAPTED: dp_accounting also refuses LaplaceDpEvent under REPLACE_ONE; ours accounts
        # it with sensitivity 2 (checked against the closed form in
        # tests/test_pld_other_mechanisms.py); Poisson-subsampled Laplace stays refused
        (dp_event.PoissonSampledDpEvent(0.1, dp_event.LaplaceDpEvent(1.0)), Rel.REPLACE_ONE),
    )
    def test_composition_errors_for_neighboring_relation(self, event, relation):
        accountant = PLDAccountant(relation)
        self.assertFalse(accountant.supports(event))
        with self.assertRaisesRegex(UnsupportedEventError, "caused by subevent"):
            accountant.compose(event)

    # -- randomized response ----------
    @parameterized.named_parameters(('replace_one', Rel.REPLACE_ONE),
                                    ('replace_special', Rel.REPLACE_SPECIAL))
    def test_randomized_response_with_single_bucket(self, relation):
        accountant = PLDAccountant(relation).compose(RandomizedResponseDpEvent(0.0, 1))
        self.assertEqual(accountant.get_delta(0), 0)
        self.assertEqual(accountant.get_epsilon(0), 0)

    def test_randomized_response_with_zero_noise_parameter(self):
        accountant = PLDAccountant(Rel.REPLACE_SPECIAL).compose(RandomizedResponseDpEvent(0.0, 3))
        self.assertEqual(accountant.get_delta(1.0), 1)
        self.assertEqual(accountant.get_epsilon(0.01), math.inf)

    @parameterized.parameters(
        # replace one: e^eps = (1 - p + p/k) / (p/k) = e for p = k / (k - 1 + e)
        (Rel.REPLACE_ONE, 4 / (3 + math.e), 4, 1.0),
        # replace by a special record (whose output is uniform): e^eps = max(k (1 - p) + p,
        # 1 / p) = e for these two
        (Rel.REPLACE_SPECIAL, (4 - math.e) / 3, 4, 1.0),
        (Rel.REPLACE_SPECIAL, math.exp(-1), 2, 1.0),
    )
    def test_randomized_response(self, relation, noise_parameter, num_buckets, epsilon):
        accountant = PLDAccountant(relation).compose(
            RandomizedResponseDpEvent(noise_parameter, num_buckets))
        self.assertAlmostEqual(accountant.get_delta(epsilon), 0.0)
        self.assertAlmostEqual(accountant.get_epsilon(0), epsilon, delta=1e-9)

    # -- (epsilon, delta) events ----------
    def test_epsilon_delta_basic_adapted(self):
        # ADAPTED: dp_accounting asserts get_delta(3) == 0.28 and get_epsilon(0.28) == 3.0
        # exactly.  The composition of (1, 0.1)- and (2, 0.2)-DP has delta(eps) = 1 - 0.9 * 0.8
        # = 0.28 for every eps >= 3 (its largest finite privacy loss; Kairouz, Oh, Viswanath
        # 2015), so a certified upper bound on delta(3) -- ours carries floating-point error
        # terms -- is just above 0.28, and no finite epsilon is certified at exactly 0.28 (ours
        # answers inf there, which is a valid bound).  Checked instead: delta(3) within 1e-9
        # relative above 0.28, and epsilon 3 at a delta 1e-9 relative above 0.28.
        accountant = PLDAccountant()
        accountant.compose(EpsilonDeltaDpEvent(epsilon=1.0, delta=0.1))
        accountant.compose(EpsilonDeltaDpEvent(epsilon=2.0, delta=0.2))
        delta = accountant.get_delta(3.0)
        self.assertGreaterEqual(delta, 0.28)
        self.assertLessEqual(delta, 0.28 * (1 + 1e-9))
        self.assertAlmostEqual(accountant.get_epsilon(0.28 * (1 + 1e-9)), 3.0, delta=1e-6)

    def test_pure_epsilon_delta_events_compose_to_the_sum_at_delta_zero(self):
        accountant = PLDAccountant().compose(EpsilonDeltaDpEvent(1.0, 0.0)).compose(
            EpsilonDeltaDpEvent(2.0, 0.0))
        self.assertAlmostEqual(accountant.get_epsilon(0), 3.0, delta=1e-9)
        self.assertEqual(PLDAccountant().compose(EpsilonDeltaDpEvent(1.0, 0.1)).get_epsilon(0),
                         math.inf)

    # -- delta = 0: the pure-DP epsilon ---------------------------------------------------------
    def test_delta_zero_laplace_is_the_sum_of_the_epsilons(self):
        accountant = PLDAccountant()
        accountant.compose(dp_event.LaplaceDpEvent(1.0), 3)
        accountant.compose(dp_event.LaplaceDpEvent(2.0), 2)
        self.assertAlmostEqual(accountant.get_epsilon(0), 4.0, delta=1e-9)

    def test_delta_zero_poisson_subsampled_laplace_is_amplified(self):
        # eps' = log(1 + q (e^(1/b) - 1)) per step (Balle, Barthe, Gaboardi 2018, Thm 8)
        accountant = PLDAccountant().compose(
            dp_event.PoissonSampledDpEvent(0.2, dp_event.LaplaceDpEvent(0.5)), 3)
        self.assertAlmostEqual(accountant.get_epsilon(0),
                               3 * math.log1p(0.2 * math.expm1(2.0)), delta=1e-9)

    def test_delta_zero_gaussian_has_no_finite_epsilon(self):
        self.assertEqual(PLDAccountant().compose(dp_event.GaussianDpEvent(1.0)).get_epsilon(0),
                         math.inf)
        self.assertEqual(PLDAccountant().compose(dp_event.PoissonSampledDpEvent(
            0.1, dp_event.GaussianDpEvent(1.0))).get_epsilon(0), math.inf)

    def test_delta_zero_no_events_and_non_private(self):
        for accountant in (PLDAccountant(), GDPAccountant()):
            self.assertEqual(accountant.get_epsilon(0), 0)
            accountant.compose(dp_event.NonPrivateDpEvent())
            self.assertEqual(accountant.get_epsilon(0), math.inf)
