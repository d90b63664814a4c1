"""Shared test helpers: exact reference formulas that do not use our code."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # ``pytest -n 2`` runs two workers on two cores: one thread each, set before numpy is
    # imported (OpenBLAS' threads spinning against the other worker's made a 3 s test take 43 s)
    for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                      "TF_NUM_INTRAOP_THREADS"):
        os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402
import pytest
from scipy import integrate, stats
from scipy.special import log_ndtr

try:
    from hypothesis import settings
except ImportError:     # the Flower and pld-accounting CI venvs have no hypothesis
    settings = None

#: ``DPPLUGINS_HYPOTHESIS=ci`` (set by ``.ci/run``): property tests draw the same examples on
#: every run, so the gate is reproducible; a plain ``pytest`` draws new ones each run and may
#: find new failures (which then become ``@example`` cases)
if settings is not None:
    settings.register_profile("ci", derandomize=True)
    if os.environ.get("DPPLUGINS_HYPOTHESIS") == "ci":
        settings.load_profile("ci")


def gaussian_delta_exact(epsilon, mu):
    """delta(eps) of N(mu,1) vs N(0,1): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Balle & Wang 2018, Thm 8), evaluated independently of dpplugins."""
    a = np.exp(log_ndtr(-epsilon / mu + mu / 2))
    b = np.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))
    return a - b


def rr_composed_delta_exact(epsilon, eps0, k):
    """delta(eps) of k-fold binary randomized response: L = eps0 (2B - k), B ~ Bin(k, p)."""
    p = np.exp(eps0) / (1 + np.exp(eps0))
    b = np.arange(k + 1)
    loss = eps0 * (2 * b - k)
    pmf = stats.binom.pmf(b, k, p)
    return float(np.sum(pmf * np.maximum(0.0, -np.expm1(epsilon - loss))))


def hockey_stick_by_quadrature(p_density, q_density, epsilon, lo, hi, breakpoints=()):
    """int (p - e^eps q)_+ dx by adaptive quadrature (independent of our discretisation)."""
    f = lambda x: max(p_density(x) - np.exp(epsilon) * q_density(x), 0.0)
    points = sorted(set([lo, hi, *breakpoints]))
    total = 0.0
    for a, b in zip(points[:-1], points[1:]):
        total += integrate.quad(f, a, b, limit=400, epsabs=1e-14, epsrel=1e-12)[0]
    return total


def convolution_power(pmf, lo: int, count: int, dtype=np.float64):
    """``(lo, pmf)`` of the ``count``-fold convolution of a PMF on consecutive integers starting
    at ``lo``, by binary powering with np.convolve (non-negative terms: no cancellation, every
    entry to a relative (terms) u) -- the independent reference for FFT compositions."""
    base = np.asarray(np.maximum(pmf, 0.0), dtype=dtype)
    result, result_lo, base_lo = np.array([1], dtype=dtype), 0, lo
    while count:
        if count & 1:
            result, result_lo = np.convolve(result, base), result_lo + base_lo
        count >>= 1
        if count:
            base, base_lo = np.convolve(base, base), 2 * base_lo
    return result_lo, result


def epsilon_from_delta_curve(delta_fn, delta, hi=1.0):
    """Smallest eps >= 0 with delta_fn(eps) <= delta, by bisection on a monotone function."""
    from scipy.optimize import brentq
    if delta_fn(0.0) <= delta:
        return 0.0
    while delta_fn(hi) > delta:
        hi *= 2
    return brentq(lambda e: delta_fn(e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-13)


#: test files that take long (framework training, anchors, long numerical sweeps): marked slow,
#: so ``pytest -m "not slow"`` is the quick subset
SLOW_FILES = frozenset({
    "test_balls_and_bins.py", "test_pld_anchors.py", "test_shuffle_model.py",
    "test_shuffle_bounds.py", "test_opacus_integration.py", "test_opacus_events.py",
    "test_tf_privacy_integration.py", "test_tf_keras.py", "test_tf_privacy_example.py",
    "test_tf_privacy_compat.py", "test_ddp.py", "test_examples.py", "test_pnsgd_torch.py",
    "test_dp_accounting_suite.py", "test_cli_events.py", "test_report_events.py",
    "test_flower.py", "test_fdp_accountant.py", "test_properties.py", "test_pld_exact.py",
    "test_opacus_peer.py", "test_reliability_pld.py", "test_allocation_reliability.py",
    "test_fuzz.py", "test_cli.py", "test_fdp.py", "test_iteration.py", "test_pld_performance.py",
    "test_allocation_mechanisms.py", "test_allocation_mechanisms_participations.py",
    "test_pld_fast_paths.py", "test_blanket_lattice.py", "test_shuffle_model_families.py",
    "test_shuffle_model_general.py", "test_pld_other_mechanisms.py",
    "test_shuffle_reliability.py", "test_laplace_full_statistic.py",
})


#: single tests of the other files that take a second or more (measured on a 2-core machine):
#: slow too, so that the quick subset stays under two minutes (by function name, or by the
#: name with its parameters)
SLOW_TESTS = frozenset({
    "test_docstring_examples[dpplugins.amplification.shuffle_model_families]",
    "test_a_round_of_more_than_max_users_leaves_the_other_rounds_lower_bounds",
    "test_a_refusal_at_little_noise_moves_the_search_to_more_noise",
    "test_the_full_epoch_profile_is_certified_once_and_reused_on_coarser_grids",
    "test_plot_writes_an_image_of_the_figure_size",
    "test_optimal_composition_of_many_steps_in_bounded_memory",
    "test_delta_below_the_engines_slack_keeps_a_lower_bound_from_a_larger_delta",
    "test_printed_intervals_hold_the_exact_epsilon",
    "test_a_profile_cut_off_by_its_grid_refuses_instead_of_infinity",
    "test_two_rounds_dominate_the_exact_product",
    "test_many_groups_share_one_blanket_and_still_bracket_enumeration",
    "test_accountant_accepts_participations_with_any_checkin_probability",
    "test_a_window_near_the_limit_stays_within_it",
    "test_monte_carlo_of_the_released_pair_is_inside_the_bracket",
    "test_calibration_with_a_small_memory_limit_answers",
    "test_queries_on_a_pure_dp_history_leak_no_floating_point_warning",
    "test_optimal_composition_random_cases_against_mpmath",
    "test_compare_rows_beside_poisson_at_the_same_expected_participation",
    "test_rounds_of_very_different_eps0_compose_on_a_grid_that_fits",
})


def allocation_rr_laws(eps0, k, t, participations, p, digits=30):
    """The laws ``(P, Q)`` (lists of mpmath numbers over the ``2^t`` report vectors) of one epoch
    of k-out-of-t random allocation of k-ary randomized response read as zero-out (add/remove),
    by enumeration.  Each step's report is reduced to "the true bucket or not" (the likelihood
    ratio is equal on the other buckets, so every divergence is kept): with the example, a step
    in its allocation reports the true bucket w.p. ``e^eps0 / (e^eps0 + k - 1)``, every other
    step w.p. ``1/k``; without it (``Q``), every step w.p. ``1/k``.  The example checks in w.p.
    ``p`` and then takes ``participations`` steps, uniformly among the subsets of that size."""
    import itertools

    import mpmath
    mpmath.mp.dps = digits
    e = mpmath.e ** eps0
    top, base = e / (e + k - 1), mpmath.mpf(1) / k
    subsets = [set(c) for c in itertools.combinations(range(t), participations)]

    def law(x, chosen):
        value = mpmath.mpf(1)
        for i, bit in enumerate(x):
            q1 = top if i in chosen else base
            value *= q1 if bit else 1 - q1
        return value
    outcomes = list(itertools.product((0, 1), repeat=t))
    q_law = [law(x, ()) for x in outcomes]
    p_law = [(1 - p) * q + p * mpmath.fsum(law(x, c) for c in subsets) / len(subsets)
             for x, q in zip(outcomes, q_law)]
    return p_law, q_law


def krr_histogram_law_mp(data, eps0s, k):
    """Law of the histogram of k-ary randomized-response reports of ``data`` (user i holds
    ``data[i]`` and reports it with probability ``e^eps0s[i] / (e^eps0s[i] + k - 1)``, each other
    value with ``1 / (...)``), by enumeration in mpmath at the caller's precision: the output
    of the shuffled protocol.  Keys are the counts of the k values."""
    import itertools

    import mpmath
    law = {}
    for reports in itertools.product(range(k), repeat=len(data)):
        pr = mpmath.mpf(1)
        for value, report, eps0 in zip(data, reports, eps0s):
            e = mpmath.exp(mpmath.mpf(eps0))
            pr *= (e if report == value else 1) / (e + k - 1)
        key = tuple(reports.count(v) for v in range(k))
        law[key] = law.get(key, 0) + pr
    return law


def hockey_stick_mp(p, q, eps):
    """``max(sum (p - e^eps q)_+, sum (q - e^eps p)_+)`` of two laws given as dicts, in mpmath."""
    import mpmath
    g = mpmath.exp(mpmath.mpf(eps))
    keys = set(p) | set(q)
    return max(sum(max(0, p.get(x, 0) - g * q.get(x, 0)) for x in keys),
               sum(max(0, q.get(x, 0) - g * p.get(x, 0)) for x in keys))


#: the fuzz summaries that pytest-xdist workers sent back (tests/test_fuzz.py), printed once
_WORKER_FUZZ_SUMMARIES: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _WORKER_FUZZ_SUMMARIES.extend(getattr(node, "workeroutput", {}).get(
        "dpplugins_fuzz_summary", []))


def pytest_terminal_summary(terminalreporter):
    for line in ["", *_WORKER_FUZZ_SUMMARIES] if _WORKER_FUZZ_SUMMARIES else []:
        terminalreporter.write_line(line)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or item.name in SLOW_TESTS or \
                getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


def legacy_step(accountant, noise_multiplier, sample_rate):
    """What ``accountant.step(noise_multiplier, sample_rate)`` recorded in version 0.1 (and
    what its 0.1 state dicts load as): ``balls_and_bins`` and ``swap`` now refuse ``step()``
    (Opacus' Poisson step), so their tests compose this event instead -- random allocation into
    ``1 / sample_rate`` steps, and a shuffled step of one example; every other accountant's
    ``step_event``."""
    return accountant._legacy_step_event(noise_multiplier, sample_rate)


def legacy_history(accountant, entries):
    """``(noise_multiplier, sample_rate, steps)`` entries read as :func:`legacy_step`."""
    from dpplugins.events import SelfComposedEvent

    return [SelfComposedEvent(legacy_step(accountant, sigma, q), steps)
            for sigma, q, steps in entries]
