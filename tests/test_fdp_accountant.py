"""The "fdp" accountant (GDPAccountant): contract, certified values against closed forms and
quadrature, the CLT estimate against BDLS' formula and published numbers, and its labelling.

BDLS = Bu, Dong, Long, Su (2020), "Deep learning with Gaussian differential privacy";
DRS = Dong, Roth, Su (2022), "Gaussian differential privacy".
"""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from conftest import epsilon_from_delta_curve, gaussian_delta_exact, hockey_stick_by_quadrature
from dpplugins.accountants import available, create, get_class
from dpplugins.accountants.fdp import GDPAccountant
from dpplugins.errors import NumericalError, ParameterError
from dpplugins.events import FixedBatchEvent, GaussianEvent
from dpplugins.pld import AccuracyWarning
from dpplugins.fdp import CLTEstimateWarning

DELTA = 1e-5


def bdls_mu_poisson(sigma, q, steps):
    """BDLS' CLT for Poisson subsampling, typed from the paper:
    mu = q sqrt(T (e^(1/sigma^2) - 1))."""
    return q * math.sqrt(steps * (math.exp(sigma ** -2) - 1))


def gdp_epsilon(mu, delta):
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


def clt_value(acc, delta):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CLTEstimateWarning)
        return acc.get_epsilon(delta, method="clt")


# -- registry and options -------------------------------------------------------------------
def test_registered_as_fdp():
    assert "fdp" in available()
    assert get_class("fdp") is GDPAccountant
    acc = create("fdp")
    assert acc.name == "fdp" and acc.bound_type == "certified upper bound"
    assert (acc.sampling, acc.neighbouring) == ("poisson", "add_remove")
    assert create("fdp", sampling="uniform").neighbouring == "replace_one"


@pytest.mark.parametrize("options,name", [
    (dict(sampling="shuffle"), "sampling"),
    (dict(sampling="uniform", neighbouring="add_remove"), "neighbouring"),
    (dict(neighbouring="swap"), "neighbouring"),
    (dict(eps_tolerance=0.0), "eps_tolerance"),
    (dict(value_discretization_interval=-1.0), "value_discretization_interval"),
])
def test_bad_options(options, name):
    with pytest.raises(ParameterError, match=name):
        create("fdp", **options)


def test_bad_queries():
    acc = create("fdp")
    acc.step(noise_multiplier=1.0, sample_rate=0.1, count=10)
    with pytest.raises(ParameterError, match="method"):
        acc.get_epsilon(DELTA, method="rdp")
    with pytest.raises(ParameterError, match="delta"):
        acc.get_epsilon(0.0, method="clt")
    with pytest.raises(ParameterError, match="epsilon"):
        acc.get_delta(-1.0, method="clt")
    with pytest.raises(ParameterError, match="noise_multiplier"):
        acc.step(noise_multiplier=-1.0, sample_rate=0.1)


def test_state_dict_round_trip_keeps_sampling():
    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=2.0, sample_rate=0.02, count=200)
    state = json.loads(json.dumps(acc.state_dict()))
    assert state["options"]["sampling"] == "uniform"
    assert state["options"]["neighbouring"] == "replace_one"
    restored = create("fdp", sampling="uniform")
    restored.load_state_dict(state)
    assert restored.history == acc.history
    assert restored.get_epsilon(DELTA) == acc.get_epsilon(DELTA)
    with pytest.raises(ParameterError, match="sampling"):
        create("fdp").load_state_dict(state)


def test_empty_history():
    acc = create("fdp")
    assert acc.get_epsilon(DELTA) == 0.0
    assert acc.get_mu() == 0.0
    assert acc.get_epsilon(DELTA, method="clt") == 0.0
    curve = acc.tradeoff_curve(np.linspace(0, 1, 11))
    assert np.allclose(curve.exact.values, 1 - curve.alphas)


# -- certified path ---------------------------------------------------------------------------
def test_poisson_certified_path_is_the_pld_engine():
    """Reuse, not re-implementation: identical to the PLD accountant on the same history."""
    acc, pld = create("fdp"), create("pld")
    for a in (acc, pld):
        a.step(noise_multiplier=1.0, sample_rate=0.01, count=2000)
    assert acc.get_epsilon_bounds(DELTA) == pld.get_epsilon_bounds(DELTA)
    assert acc.get_delta_bounds(2.0) == pld.get_delta_bounds(2.0)


def test_far_tail_queries_are_not_retried_on_top(monkeypatch):
    """Below delta = 1e-6 an accountant whose lower bound is 0 retries at larger deltas.  The
    fdp accountant does not add its own retries: on Poisson sampling its bounds are the pld
    accountant's query, which retries itself (nested, they took 19.5 s for one fuzz history),
    and on fixed-size batches its lower bound is a pld accountant's query too (before it had
    one, the retries only recomputed the upper bound: three times more work, counted here)."""
    acc, pld = create("fdp"), create("pld")
    for a in (acc, pld):
        a.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
    assert acc.get_epsilon_bounds(1e-15) == pld.get_epsilon_bounds(1e-15)
    uniform = create("fdp", sampling="uniform")
    uniform.step(noise_multiplier=1.0, sample_rate=0.01, count=100)
    calls = []
    original = GDPAccountant._uniform_upper

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(GDPAccountant, "_uniform_upper", counted)
    bounds = uniform.get_epsilon_bounds(1e-10)
    sensitivity_two = create("pld", eps_tolerance=1e-2)  # its accuracy target
    sensitivity_two.step(noise_multiplier=0.5, sample_rate=0.01, count=100)
    assert bounds.lower == sensitivity_two.get_epsilon_bounds(1e-10).lower
    assert 0 < bounds.lower < bounds.upper and len(calls) == 1


def test_poisson_without_subsampling_is_gaussian_composition():
    """q = 1: T Gaussian steps are sqrt(T)/sigma-GDP (DRS Cor. 3.3); exact eps by root finding."""
    acc = create("fdp")
    acc.step(noise_multiplier=4.0, sample_rate=1.0, count=16)
    exact = gdp_epsilon(1.0, DELTA)
    lower, upper = acc.get_epsilon_bounds(DELTA)
    assert lower <= exact <= upper and (upper - lower) / upper <= 1e-3


def test_uniform_without_subsampling_is_gaussian_with_sensitivity_two():
    """q = 1: C_1(G_{2/sigma}) = G_{2/sigma}; T steps are 2 sqrt(T)/sigma-GDP."""
    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=4.0, sample_rate=1.0, count=4)
    exact = gdp_epsilon(1.0, DELTA)
    lower, upper = acc.get_epsilon_bounds(DELTA)
    # q = 1 is exactly G_mu: the closed form gives both bounds (within its rounding margin)
    assert exact * (1 - 1e-6) <= lower <= exact <= upper <= exact * (1 + 2e-3)


def test_uniform_single_step_against_quadrature():
    """One fixed-size-batch step is C_q(G_{2/sigma}); its profile is the larger hockey-stick of
    q N(2/sigma, 1) + (1-q) N(0, 1) and N(0, 1) in the two orders (integrated numerically)."""
    sigma, q = 2.0, 0.2
    m = 2 / sigma
    mix = lambda x: q * stats.norm.pdf(x, m) + (1 - q) * stats.norm.pdf(x)

    def profile(eps):
        kinks = [(math.log((r - 1 + q) / q) + m * m / 2) / m
                 for r in (math.exp(eps), math.exp(-eps)) if r - 1 + q > 0]
        return max(hockey_stick_by_quadrature(mix, stats.norm.pdf, eps, -30, 31, kinks),
                   hockey_stick_by_quadrature(stats.norm.pdf, mix, eps, -30, 31, kinks))

    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=sigma, sample_rate=q)
    for delta in (1e-2, 1e-4):
        exact = epsilon_from_delta_curve(profile, delta)
        upper = acc.get_epsilon(delta)
        assert exact <= upper <= exact * (1 + 2e-3) + 1e-6


@pytest.mark.parametrize("sigma,q,steps", [(2.0, 0.01, 1000), (4.0, 0.05, 200)])
def test_uniform_between_one_direction_and_plain_gaussian(sigma, q, steps):
    """C_q(G) <= f_q = p G + (1-p) Id, whose composition is the Poisson add/remove pair with
    sensitivity 2 (noise sigma/2): so the uniform eps is >= that one's certified lower bound.
    And C_q(G_mu) >= G_mu (f_q >= G_mu, symmetric), so eps <= the GDP value of 2 sqrt(T)/sigma."""
    uniform, poisson = create("fdp", sampling="uniform"), create("pld")
    uniform.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    poisson.step(noise_multiplier=sigma / 2, sample_rate=q, count=steps)
    eps = uniform.get_epsilon(DELTA)
    assert poisson.get_epsilon_bounds(DELTA).lower <= eps
    assert eps <= gdp_epsilon(2 * math.sqrt(steps) / sigma, DELTA)


def test_uniform_lower_bound_is_the_delta_of_a_real_dataset_pair():
    """The fixed-size-batch lower bound (module docstring of the fdp accountant) against a Monte
    Carlo simulation of the mechanism itself: batches of m of N records without replacement
    (numpy's hypergeometric law for the differing record), every other record's clipped
    gradient -1, the differing record's +1 on one dataset and -1 on the other, Gaussian noise on
    the batch sum.  For any statistic L, ``P(L > eps) - e^eps Q(L > eps)`` estimated from the two
    simulated datasets is at most their delta(eps), with equality for the true log-likelihood
    ratio: with that L the estimate must meet our certified lower bound within its standard
    error, and neither may exceed the certified upper bound."""
    sigma, n_records, m, steps, eps = 2.0, 40, 4, 20, 1.0
    q = m / n_records
    rng = np.random.default_rng(7)
    samples = 200_000

    def batch_sums(with_x: bool) -> np.ndarray:
        sampled = (rng.hypergeometric(1, n_records - 1, m, size=(samples, steps)) if with_x
                   else np.zeros((samples, steps)))
        # m - sampled other records (-1 each), plus the differing record's +1 when it is in
        return -(m - sampled) + sampled + sigma * rng.standard_normal((samples, steps))

    def log_ratio(y: np.ndarray) -> np.ndarray:
        z = y + m  # centred on the other dataset's (constant) batch sum
        mixture = np.logaddexp(math.log1p(-q) - z ** 2 / (2 * sigma ** 2),
                               math.log(q) - (z - 2) ** 2 / (2 * sigma ** 2))
        return (mixture + z ** 2 / (2 * sigma ** 2)).sum(axis=1)

    on_x, on_other = log_ratio(batch_sums(True)), log_ratio(batch_sums(False))
    p_set, q_set = on_x > eps, on_other > eps
    estimate = p_set.mean() - math.exp(eps) * q_set.mean()
    se = math.sqrt(p_set.var() / samples + math.exp(2 * eps) * q_set.var() / samples)
    acc = create("fdp", sampling="uniform")
    acc.compose(FixedBatchEvent(n_records, m, GaussianEvent(sigma)), steps)
    lower, upper = acc.get_delta_bounds(eps)
    assert abs(estimate - lower) <= 4 * se and se < 0.1 * lower
    assert estimate + 4 * se < upper
    # the lower bound is a real improvement on 0 and below the upper bound
    assert 0.5 * upper < lower < upper


UNIFORM_SETTINGS = [(1.0, 0.01, 100_000), (2.0, 0.01, 10_000), (1.1, 256 / 60000, 4688),
                    (8.0, 0.05, 2000), (0.6, 0.3, 50), (20.0, 1e-4, 10 ** 6)]


def _uniform_bounds(sigma, q, steps, delta):
    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        return acc, acc.get_epsilon_bounds(delta)


@pytest.mark.parametrize("sigma,q,steps", UNIFORM_SETTINGS)
def test_uniform_lower_bound_below_upper_in_both_queries(sigma, q, steps):
    for delta in (1e-3, 1e-6):
        acc, (lower, upper) = _uniform_bounds(sigma, q, steps, delta)
        assert 0 < lower <= upper
        low_delta, up_delta = acc.get_delta_bounds(lower)
        assert low_delta <= up_delta and up_delta >= delta * (1 - 1e-9)


@pytest.mark.anchor
@pytest.mark.parametrize("sigma,q,steps", UNIFORM_SETTINGS)
def test_uniform_lower_bound_below_dp_accounting_rdp(sigma, q, steps):
    """The lower bound stays below dp-accounting's RDP bound for sampling without replacement
    (Wang, Balle, Kasiviswanathan 2019; replace-one, noise sigma/2 for the sum's sensitivity
    2C), an independent implementation."""
    dp_accounting = pytest.importorskip("dp_accounting")
    rdp = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    rate = Fraction(q)   # the float's exact value, as the accountant's step records it
    rdp.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        rate.denominator, rate.numerator, dp_accounting.GaussianDpEvent(sigma / 2)), steps))
    for delta in (1e-3, 1e-6):
        _, (lower, _) = _uniform_bounds(sigma, q, steps, delta)
        assert 0 < lower <= rdp.get_epsilon(delta)


def test_uniform_query_below_the_construction_error_refuses_with_its_lower_bound():
    """delta below what the fixed-size-batch construction certifies: NumericalError that says
    why, what to change and what the lower bound certifies, decided on the first grid (delta =
    1e-30 used to return [0, inf] after four finer grids, while 1e-10 raised)."""
    calls = []
    original = GDPAccountant._uniform_pld

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    for delta in (1e-12, 1e-30):
        acc = create("fdp", sampling="uniform")
        acc.step(noise_multiplier=1.0, sample_rate=0.01, count=100_000)
        sensitivity_two = create("pld", eps_tolerance=1e-2)  # its accuracy target
        sensitivity_two.step(noise_multiplier=0.5, sample_rate=0.01, count=100_000)
        lower = sensitivity_two.get_epsilon_bounds(delta).lower
        assert 200 < lower < math.inf
        calls.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(GDPAccountant, "_uniform_pld", counted)
            with pytest.raises(NumericalError, match=re.escape(f"lower bound on epsilon is "
                                                                f"{lower:.6g}") + ".*delta above"):
                acc.get_epsilon_bounds(delta)
        assert len(calls) <= 2   # the first grid (and the window budget's coarser one at most)


def test_uniform_delta_and_epsilon_are_consistent():
    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=3.0, sample_rate=0.05, count=300)
    eps = acc.get_epsilon(DELTA)
    assert acc.get_delta(eps) <= DELTA * (1 + 1e-3)
    assert acc.get_delta(eps * 0.9) > DELTA


def test_calibration_through_the_registry():
    from dpplugins.calibration import find_noise_multiplier

    sigma = find_noise_multiplier(target_epsilon=3.0, delta=DELTA, sample_rate=0.05, steps=100,
                                  accountant="fdp", sampling="uniform", sigma_tolerance=1e-2)
    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=sigma, sample_rate=0.05, count=100)
    assert acc.get_epsilon(DELTA) <= 3.0


# -- CLT estimate -----------------------------------------------------------------------------
def test_get_mu_is_bdls_formula_and_clt_epsilon_warns():
    acc = create("fdp")
    acc.step(noise_multiplier=1.1, sample_rate=256 / 60000, count=4688)
    assert acc.get_mu() == pytest.approx(bdls_mu_poisson(1.1, 256 / 60000, 4688), rel=1e-12)
    with pytest.warns(CLTEstimateWarning) as record:
        estimate = acc.get_epsilon(DELTA, method="clt")
    assert estimate == pytest.approx(gdp_epsilon(acc.get_mu(), DELTA), rel=1e-9)
    message = str(record[0].message)
    certified = acc.get_epsilon(DELTA)
    assert "not a bound" in message and "add/remove" in message
    assert f"{certified:.6g}" in message  # says what the certified value is
    assert issubclass(CLTEstimateWarning, UserWarning)


def test_clt_delta_warns_too():
    acc = create("fdp", sampling="uniform")
    acc.step(noise_multiplier=2.0, sample_rate=0.01, count=1000)
    with pytest.warns(CLTEstimateWarning, match="replace-one"):
        value = acc.get_delta(1.0, method="clt")
    assert value == pytest.approx(gaussian_delta_exact(1.0, acc.get_mu()), rel=1e-9)


@pytest.mark.parametrize("sigma,epochs,mu_printed,eps_printed", [(1.06, 20, 0.35, 1.34),
                                                                  (0.638, 70, 1.78, 8.68)])
def test_bdls_mnist_settings(sigma, epochs, mu_printed, eps_printed):
    """BDLS Fig. 4: p = 256/60000, sigma~ = 1.06 (20 epochs) -> mu = 0.35, eps = 1.34;
    sigma~ = 0.638 (70 epochs) -> mu = 1.78, eps = 8.68 at delta = 1e-5 (printed to 2 digits;
    sigma~ to 3, hence the tolerance).  The certified value for the same run is larger."""
    p = 256 / 60000
    acc = create("fdp")
    acc.step(noise_multiplier=sigma, sample_rate=p, count=round(epochs / p))
    assert acc.get_mu() == pytest.approx(mu_printed, abs=0.006)
    assert clt_value(acc, DELTA) == pytest.approx(eps_printed, abs=0.04)
    assert acc.get_epsilon_bounds(DELTA).lower > clt_value(acc, DELTA)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.05, 20), (0.8, 0.1, 10), (1.5, 0.02, 50)])
def test_clt_under_reports_for_small_T(sigma, q, steps):
    """The exact mu-equivalent (from the certified *lower* bound on eps) exceeds the CLT mu."""
    from dpplugins.fdp import equivalent_gdp_mu

    acc = create("fdp")
    acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    lower = acc.get_epsilon_bounds(DELTA).lower
    assert clt_value(acc, DELTA) < lower
    assert equivalent_gdp_mu(lower, DELTA) > acc.get_mu()


def test_exact_and_clt_converge_as_T_grows_with_q_sqrt_T_fixed():
    """DRS Cor. 5.4 / BDLS: with q sqrt(T) = 0.5 fixed the CLT mu is constant and the exact
    composition approaches it from above (monotone here) as T grows."""
    from dpplugins.fdp import equivalent_gdp_mu

    gaps = []
    for steps in (25, 100, 400, 1600, 6400):
        acc = create("fdp")
        acc.step(noise_multiplier=1.0, sample_rate=0.5 / math.sqrt(steps), count=steps)
        mu_exact = equivalent_gdp_mu(acc.get_epsilon_bounds(DELTA).lower, DELTA)
        gaps.append(mu_exact / acc.get_mu() - 1)
    assert all(g > 0 for g in gaps)
    assert all(b < a for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] < 0.05 < gaps[0]


def test_uniform_exact_approaches_clt():
    from dpplugins.fdp import equivalent_gdp_mu

    gaps = []
    for steps in (25, 1600):
        acc = create("fdp", sampling="uniform")
        acc.step(noise_multiplier=2.0, sample_rate=0.5 / math.sqrt(steps), count=steps)
        gaps.append(abs(equivalent_gdp_mu(acc.get_epsilon(DELTA), DELTA) / acc.get_mu() - 1))
    assert gaps[1] < gaps[0] / 5 and gaps[1] < 0.02


# -- trade-off curves, plot, report ------------------------------------------------------------
@pytest.mark.parametrize("sampling", ["poisson", "uniform"])
def test_tradeoff_curves(sampling):
    acc = create("fdp", sampling=sampling)
    acc.step(noise_multiplier=2.0, sample_rate=0.05, count=200)
    alphas = np.linspace(0, 1, 201)
    comparison = acc.tradeoff_curve(alphas)
    for curve in (comparison.exact, comparison.clt):
        v = curve.values
        assert np.all(v >= 0) and np.all(v <= 1 - alphas + 1e-12)
        assert np.all(np.diff(v) <= 1e-12)
        assert np.all(np.diff(v, 2) >= -1e-9)  # convex on the uniform grid
    assert np.allclose(comparison.clt.values, stats.norm.cdf(stats.norm.isf(alphas)
                                                             - acc.get_mu()), atol=1e-12)
    assert comparison.neighbouring == acc.neighbouring and comparison.steps == 200
    # the certified curve is sup_eps f_{eps, delta(eps)} over certified deltas, so its own
    # profile (DRS Prop. 2.12) cannot exceed the certified delta at any eps
    assert comparison.exact.privacy_profile(1.0)[0] <= acc.get_delta(1.0) + 1e-9


def test_exact_curve_of_plain_gaussian_is_g_mu():
    acc = create("fdp")
    acc.step(noise_multiplier=2.0, sample_rate=1.0, count=4)  # mu = 1
    alphas = np.linspace(0, 1, 101)
    exact = acc.tradeoff_curve(alphas).exact.values
    reference = stats.norm.cdf(stats.norm.isf(alphas) - 1.0)
    assert np.all(exact <= reference + 1e-12) and np.max(reference - exact) < 1e-3


def test_plot_tradeoff(tmp_path):
    acc = create("fdp")
    acc.step(noise_multiplier=1.0, sample_rate=0.05, count=100)
    target = tmp_path / "tradeoff.png"
    if importlib.util.find_spec("matplotlib") is not None:
        written = acc.plot_tradeoff(target, np.linspace(0, 1, 51))
        assert written == target and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:  # the core does not depend on matplotlib: a clear error, nothing written
        with pytest.raises(ImportError, match="matplotlib"):
            acc.plot_tradeoff(target)
        assert not target.exists()


def test_plot_tradeoff_writes_the_format_of_the_suffix_and_checks_its_size(tmp_path):
    """A '.pdf' path got PNG bytes (the format was fixed); the size is checked like the
    other plots' before anything is computed."""
    pytest.importorskip("matplotlib")
    acc = create("fdp")
    acc.step(noise_multiplier=1.0, sample_rate=0.05, count=10)
    target = tmp_path / "tradeoff.pdf"
    assert acc.plot_tradeoff(target, size=(4, 3), dpi=50).read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ParameterError, match="width"):
        acc.plot_tradeoff(tmp_path / "t.png", size=(0, 3))
    with pytest.raises(ParameterError, match="output"):
        acc.plot_tradeoff(tmp_path / "t.txt")
    assert not (tmp_path / "t.png").exists()


@pytest.mark.parametrize("sampling,words", [("poisson", "add/remove"), ("uniform", "2C")])
def test_report_states_relation_and_labels_estimate(sampling, words):
    acc = create("fdp", sampling=sampling)
    acc.step(noise_multiplier=2.0, sample_rate=0.02, count=100)
    text = acc.report(DELTA)
    assert words in text and "not a bound" in text and "Certified" in text
    assert words in acc.relation


def test_clt_warning_points_at_the_caller_and_comparison_can_be_skipped():
    acc = create("fdp")
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=100)
    with pytest.warns(CLTEstimateWarning, match="skipped") as record:
        acc.get_epsilon(DELTA, method="clt", compare=False)
    assert record[0].filename == __file__
    assert acc._cache == {}  # nothing certified was computed


def test_example_script_runs(tmp_path):
    """examples/fdp_clt_plot.py: the CLT's shortfall shrinks as T grows; PNG iff matplotlib."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "fdp_clt.png"
    result = subprocess.run([sys.executable, "examples/fdp_clt_plot.py", "--out", str(out)],
                            cwd=root, capture_output=True, text=True, timeout=300, check=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    shortfalls = [float(x) for x in re.findall(r"(-?[0-9.]+)%", result.stdout)]
    assert len(shortfalls) == 4 and all(b < a for a, b in zip(shortfalls, shortfalls[1:]))
    assert shortfalls[-1] > 0  # still under-reports at T = 10_000
    assert out.exists() == (importlib.util.find_spec("matplotlib") is not None)


# -- fixed-size batches with a tiny sample rate (reliability issue: 35 s, then a refusal) --------
def test_tiny_fixed_batches_use_a_bounded_grid_and_beat_rdp(monkeypatch):
    """n = 10^6, b = 1, 10^6 steps: every component of every grid has at most 2^20 bins (before:
    a grid up to eps = 1 at step 1e-6, 2 * 10^6 bins, 35 s per query), and the certified upper
    bound is below dp-accounting's RDP bound for sampling without replacement (Wang, Balle,
    Kasiviswanathan 2019, arXiv:1808.00087), which is valid and looser here.  dp-accounting's
    base Gaussian there has RDP ``alpha / (2 sigma^2)`` (sensitivity 1); our replace-one step
    moves the sum by 2C, so the anchor is given ``sigma / 2``."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dpplugins.events import FixedBatchEvent, GaussianEvent, SelfComposedEvent
    from dpplugins.pld import PrivacyLossDistribution
    sizes = []
    original = PrivacyLossDistribution.from_privacy_profile

    def record(profile, *args, epsilon_max, value_discretization_interval, **kwargs):
        sizes.append(2 * epsilon_max / value_discretization_interval)
        return original(profile, *args, epsilon_max=epsilon_max,
                        value_discretization_interval=value_discretization_interval, **kwargs)
    monkeypatch.setattr(PrivacyLossDistribution, "from_privacy_profile", staticmethod(record))
    sigma = 1.6487212707001282
    acc = create("fdp", neighbouring="replace_one").compose(
        SelfComposedEvent(FixedBatchEvent(10**6, 1, GaussianEvent(sigma)), 10**6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upper = acc.get_epsilon(1e-5)
    assert sizes and max(sizes) <= 2 ** 20 + 1
    rdp = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    rdp.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        10**6, 1, dp_accounting.GaussianDpEvent(sigma / 2)), 10**6))
    assert 0 < upper < rdp.get_epsilon(1e-5)


def test_uniform_one_grid_bound_keeps_within_a_small_memory_limit():
    """Fixed-size batches, 10^6 steps, memory_limit = 4 MiB: epsilon_upper_fast (calibration's
    search bound) raised NumericalError, its window did not fit; it now coarsens the grid like
    the first grid of a query, and stays within 5 % of the value at the default limit
    (measured 3.1 %: windows of at most 32,768 bins at 128 bytes each)."""
    small = create("fdp", sampling="uniform", memory_limit=2**22)
    default = create("fdp", sampling="uniform")
    for acc in (small, default):
        acc.step(noise_multiplier=300.0, sample_rate=0.5, count=10**6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        reference = default.get_epsilon(1e-5)
        assert reference * (1 - 1e-3) <= small.epsilon_upper_fast(1e-5) <= reference * 1.05


def test_fixed_batch_rates_are_rounded_against_each_bound():
    """batch_size / dataset_size is rarely a float: the upper bound uses the float at or above
    it, the lower bound the float at or below it (exact rationals), and a rate that rounds to 1
    keeps a lower bound below the full-batch closed form."""
    from dpplugins.accountants.fdp import _directed_rate

    for n, m in [(3, 1), (60000, 256), (10 ** 17 + 3, 7), (2 ** 60, 2 ** 60 - 1), (8, 2)]:
        event = FixedBatchEvent(n, m, GaussianEvent(1.0))
        up, down = _directed_rate(event, "up"), _directed_rate(event, "down")
        assert Fraction(down) <= Fraction(m, n) <= Fraction(up)
        assert up in (down, math.nextafter(down, 1.0))
    almost_full = create("fdp", sampling="uniform").compose(
        FixedBatchEvent(2 ** 60, 2 ** 60 - 1, GaussianEvent(4.0)), 4)
    lower, upper = almost_full.get_epsilon_bounds(DELTA)
    full = create("fdp", sampling="uniform").compose(FixedBatchEvent(8, 8, GaussianEvent(4.0)), 4)
    full_lower, full_upper = full.get_epsilon_bounds(DELTA)
    assert 0 < lower <= full_lower and upper == full_upper


@pytest.mark.parametrize("sigma", [5e-324, 1e-310, 1e-160])
def test_tiny_noise_multipliers_refuse_or_estimate_without_a_bare_exception(sigma):
    """Noise multipliers whose square underflows: the CLT mu is inf (it raised
    ZeroDivisionError), and on fixed-size batches a certified query refuses naming the noise
    multiplier (below about 1e-308 it raised a ParameterError about mu = inf, an argument the
    user never passed) and states a positive lower bound (the lower bound's sigma / 2 rounds up:
    5e-324 / 2 would be 0, a non-private step with epsilon inf)."""
    for sampling in ("poisson", "uniform"):
        acc = create("fdp", sampling=sampling)
        acc.step(noise_multiplier=sigma, sample_rate=0.01, count=10)
        assert acc.get_mu() == math.inf
    with pytest.raises(NumericalError, match="noise multiplier") as raised:
        acc.get_epsilon_bounds(DELTA)
    lower = float(re.search(r"lower bound on epsilon is (\d[0-9.e+]*\d)", str(raised.value)).group(1))
    assert 0 < lower < math.inf


def test_a_non_private_step_gives_infinite_mu_and_a_zero_tradeoff():
    """A non-private step in an fdp ledger: get_mu, report and tradeoff_curve raised an
    AttributeError (the runs read a noise multiplier the step does not have; found while
    probing every accountant with non-private steps).  The CLT mu is now inf, the report says
    epsilon~inf (a noise multiplier of 1e-200, mu = inf, printed epsilon~0.0000 before), and
    the exact trade-off curve is 0: the two datasets are told apart for sure."""
    from dpplugins.events import GaussianEvent, NonPrivateEvent, PoissonSampledEvent

    acc = create("fdp").compose(NonPrivateEvent()).compose(
        PoissonSampledEvent(0.01, GaussianEvent(1.0)))
    assert acc.get_mu() == math.inf and acc.get_epsilon_bounds(1e-5) == (math.inf, math.inf)
    assert "epsilon~inf" in acc.report(1e-5)
    assert not acc.tradeoff_curve().exact.values.any()
    assert acc.epsilon_upper_fast(1e-5) == math.inf
    tiny = create("fdp").compose(PoissonSampledEvent(0.01, GaussianEvent(1e-200)))
    assert "epsilon~inf" in tiny.report(1e-5)


def test_a_non_private_release_beside_fixed_size_batches_is_infinite_not_refused():
    """A NonPrivateEvent counted as a Poisson step, so fixed-size batches before or after it
    were refused (naming fdp itself as the accountant that supports them); a release without a
    guarantee makes epsilon infinite whatever else the run holds."""
    from dpplugins.events import NonPrivateEvent, SelfComposedEvent

    batches = SelfComposedEvent(FixedBatchEvent(1000, 10, GaussianEvent(1.0)), 100)
    for events in ([NonPrivateEvent(), batches], [batches, NonPrivateEvent()]):
        acc = create("fdp", neighbouring="replace_one")
        for event in events:
            acc.compose(event)
        assert acc.get_epsilon_bounds(1e-5) == (math.inf, math.inf)
        assert acc.get_delta(1.0) == 1.0


def test_a_scheme_mixed_across_the_ledger_is_refused_without_naming_the_refuser():
    """Poisson steps then fixed-size batches: refused, and the hint no longer says that fdp
    (the accountant refusing) supports the event; one event mixing both keeps the registry's
    answer (none)."""
    from dpplugins.accountants import UnsupportedEventError
    from dpplugins.events import ComposedEvent, PoissonSampledEvent

    fixed = FixedBatchEvent(1000, 10, GaussianEvent(1.0))
    poisson = PoissonSampledEvent(0.01, GaussianEvent(1.0))
    acc = create("fdp", neighbouring="replace_one")
    acc.compose(poisson)
    with pytest.raises(UnsupportedEventError) as info:
        acc.compose(fixed)
    assert info.value.ledger and "accountants that support it" not in str(info.value)
    assert "supports it on its own" in str(info.value)
    with pytest.raises(UnsupportedEventError) as info:
        create("fdp", neighbouring="replace_one").compose(ComposedEvent([poisson, fixed]))
    assert not info.value.ledger and "no registered accountant supports it" in str(info.value)


def test_clt_queries_on_a_ledger_beyond_two_to_the_63_steps():
    """``len()`` overflows above 2**63 - 1 steps; the CLT texts used it and raised a raw
    OverflowError.  The estimate is the mu-GDP epsilon of the CLT mu (closed form, brentq)."""
    from scipy.optimize import brentq

    from dpplugins.events import PoissonSampledEvent

    acc = create("fdp")
    acc.compose(PoissonSampledEvent(1e-12, GaussianEvent(1.0)), 2**63)
    mu = acc.get_mu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps = acc.get_epsilon(1e-5, method="clt", compare=False)
        assert acc.get_delta(0.001, method="clt") > 0

    def gdp_delta(e):
        return stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)
    assert eps == pytest.approx(brentq(lambda e: gdp_delta(e) - 1e-5, 0, 1), rel=1e-6)


def test_accuracy_warnings_name_the_fdp_accountant():
    """From a hostile sweep: fdp's Poisson path is answered by a PLD accountant, and its
    accuracy warnings said "pld: certified bounds ..." to a user who had asked for fdp.  (An
    accuracy target of 1e-7 cannot be met: the warning is certain.)"""
    acc = create("fdp", eps_tolerance=1e-7)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
    with pytest.warns(AccuracyWarning) as record:
        bounds = acc.get_epsilon_bounds(1e-5)
    messages = [str(w.message) for w in record if issubclass(w.category, AccuracyWarning)]
    assert messages and all(m.startswith("fdp: certified bounds") for m in messages)
    assert bounds.lower <= bounds.upper
