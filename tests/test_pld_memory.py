"""Memory of the PLD engine: an FFT window and its evaluation tables stay within
``memory_limit`` (measured as the peak resident memory of a fresh process, independently of the
engine's own accounting), freed evaluation tables are rebuilt identical, and a query whose
composition would need more than the limit refuses with the reason instead of taking it."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from dpplugins.errors import NumericalError
from dpplugins.pld import PrivacyLossDistribution
from dpplugins.pld.compose import compose_grid_pmfs, window_limit
from dpplugins.pld.grid import GridPMF

_MEASURE = r"""
import json, resource, sys
import numpy as np
from dpplugins.pld.grid import GridPMF
from dpplugins.pld.compose import compose_grid_pmfs
extended, tilt, limit = sys.argv[1] == "extended", float(sys.argv[2]), int(sys.argv[3])
width = 20000
x = np.arange(width)
pmf = np.exp(-0.5 * ((x - width / 2) / (width / 12)) ** 2)
pmf /= pmf.sum() * (1 + 1e-9)
component = GridPMF(1e-4, -width // 2, pmf, 0.0, 1e-16)
composed = compose_grid_pmfs([(component, 1), (component, 1)], memory_limit=limit)  # warm up
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
composed = compose_grid_pmfs([(component, 150)], tail_mass=1e-300, memory_limit=limit,
                             extended=extended, extended_inverse=extended, tilt=tilt)
composed.delta_upper(0.0)      # the evaluation tables
composed.delta_lower(0.0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"bins": len(composed.pmf), "bytes": peak - base}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB on Linux")
@pytest.mark.parametrize("precision,tilt", [("double", 0.0), ("extended", 0.0),
                                            ("double", 0.5), ("extended", 0.5)])
def test_a_window_near_the_limit_stays_within_it(precision, tilt):
    """150 compositions of a 20000-bin component need a window of about 1.5e6 bins; under a
    limit of 200 MiB (window_limit: 1.6e6 bins) it is composed, and the process grows by less
    than the limit while composing and evaluating it (the limit was 48 bytes a bin, and such a
    window took up to 114)."""
    limit = 200 << 20
    out = subprocess.run([sys.executable, "-c", _MEASURE, precision, str(tilt), str(limit)],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    measured = json.loads(out)
    assert 0.5 * window_limit(limit) < measured["bins"] <= window_limit(limit)
    assert measured["bytes"] <= limit, measured


def test_freed_tables_are_rebuilt_identical():
    x = np.arange(400)
    pmf = np.exp(-0.5 * ((x - 200) / 30.0) ** 2)
    pmf /= pmf.sum() * (1 + 1e-9)
    component = GridPMF(1e-3, -150, pmf, 1e-12, 1e-16)
    for tilt in (0.0, 2.0):
        composed = compose_grid_pmfs([(component, 50)], tilt=tilt)
        eps = [0.0, 0.05, 0.2, 0.5]
        before = [(composed.delta_upper(e), composed.delta_lower(e)) for e in eps]
        assert composed.tables_built()
        composed.drop_tables()
        assert not composed.tables_built()
        assert [(composed.delta_upper(e), composed.delta_lower(e)) for e in eps] == before
        assert composed.tables_built()


def test_a_query_beyond_the_memory_limit_refuses_with_the_reason():
    """sigma = 0.5, q = 1e-5, 1000 steps at delta = 1e-300 under a 16 MiB limit: the untilted
    composition cannot go below its floating-point floor (7e-15) and the tilted one, which
    certifies such deltas, needs 2.2e6 bins where the limit allows 131,072.  The engine refuses
    at once, naming both reasons and both ways out (with the limit counted at 48 bytes a bin,
    the default 1 GiB let such windows take 7 GB)."""
    pld = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        0.5, 1e-5, value_discretization_interval=1e-3, memory_limit=16 << 20).self_compose(1000)
    with pytest.raises(NumericalError, match="memory_limit") as info:
        pld.epsilon_for_delta(1e-300)
    message = str(info.value)
    assert "delta above" in message and "131,072" in message
    # a delta the engine can certify still answers
    bounds = pld.epsilon_for_delta(1e-20)
    assert 0 < bounds.lower <= bounds.upper < math.inf


@pytest.mark.parametrize("name", ["pld", "fdp"])
@pytest.mark.parametrize("bad", [2.5, 0, 1000, True, -1, "1e9"])
def test_a_memory_limit_below_one_mebibyte_or_not_an_integer_is_refused(name, bad):
    """Found by the long fuzz: memory_limit=2.5 was truncated to 2 bytes, and every query then
    raised NumericalError (a window limit of 0 bins) instead of the option being refused."""
    from dpplugins.accountants import create
    from dpplugins.errors import ParameterError

    with pytest.raises(ParameterError, match="memory_limit"):
        create(name, memory_limit=bad)
    assert create(name, memory_limit=1 << 20).memory_limit == 1 << 20


def test_a_refused_tilted_composition_is_not_retried(monkeypatch):
    """A composition refused for memory was built again at every later epsilon (its tilted
    components, their cumulants and window: 0.2 s a query with 10^6-bucket randomized
    response, so a check-in profile evaluated at 1,600 epsilons took minutes).  The refusal is
    remembered, each tilt is tried once, and the answers still contain the exact delta of the
    composed Gaussian (closed form, Balle & Wang 2018, Thm. 8)."""
    from scipy.special import log_ndtr

    from dpplugins.pld import distribution

    import gc
    import weakref

    real = distribution.compose_grid_pmfs
    tilted_attempts, work_done = [], []

    def refusing(parts, **options):
        if options.get("tilt", 0.0) > 0:
            tilted_attempts.append((options["tilt"], options.get("extended"),
                                    tuple(id(c) for c, _ in parts)))
            work = np.ones(1000)    # the refused composition's arrays: not to be kept alive
            work_done.append(weakref.ref(work))
            raise NumericalError("a tilted window beyond the memory limit (test)", "none")
        return real(parts, **options)

    monkeypatch.setattr(distribution, "compose_grid_pmfs", refusing)
    steps = 20
    pld = PrivacyLossDistribution.from_gaussian(
        1.0, value_discretization_interval=1e-2).self_compose(steps)
    mu = math.sqrt(steps)
    # delta from 1e-6 down to far below the untilted floating-point floor, where the tilted
    # levels are asked for
    for epsilon in [40.0, 40.05, 40.1, 40.15, 50.0, 50.05]:
        bounds = pld.delta_for_epsilon(epsilon)
        exact = math.exp(log_ndtr(-epsilon / mu + mu / 2)) - math.exp(
            epsilon + log_ndtr(-epsilon / mu - mu / 2))
        assert bounds.lower <= exact <= bounds.upper, (epsilon, bounds, exact)
    assert len(tilted_attempts) == len(set(tilted_attempts)) >= 1, tilted_attempts
    gc.collect()
    assert all(ref() is None for ref in work_done)   # no traceback holds the refused work


@pytest.mark.parametrize("tilt", [0.0, 0.5])
def test_evaluation_tables_are_built_without_window_length_copies(tilt):
    """Building the evaluation tables of a window holds what they need: two suffix-sum tables
    (16 bytes a bin each in long double), the indices and losses (8 each) and one long-double
    copy of the masses, at most 64 bytes a bin (numpy's allocations, traced).  The suffix sums
    and the tail were built in temporaries and then copied (82 bytes a bin tilted; with the
    other levels' tables rebuilt at once, 2.9 GB under a 1 GiB limit at 10^8 Laplace steps)."""
    import tracemalloc

    width = 20000
    x = np.arange(width)
    pmf = np.exp(-0.5 * ((x - width / 2) / (width / 12)) ** 2)
    pmf /= pmf.sum() * (1 + 1e-9)
    component = GridPMF(1e-4, -width // 2, pmf, 0.0, 1e-16)
    composed = compose_grid_pmfs([(component, 100)], tail_mass=1e-300, tilt=tilt)
    reference = compose_grid_pmfs([(component, 100)], tail_mass=1e-300, tilt=tilt)
    if composed.tables_built():
        composed.drop_tables()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        composed._prepare(0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (peak - before) / len(composed.pmf) <= 64
    # the same values as tables built from scratch by the public evaluation
    for epsilon in (0.0, 0.5, 1.0, 2.0):
        assert composed.delta_upper(epsilon) == reference.delta_upper(epsilon)


def test_a_failed_lazy_epoch_build_is_not_kept_alive():
    """An allocation epoch whose build failed kept the NumericalError, and with its traceback
    the failed build's arrays, as long as the epoch lived; its messages are kept instead, the
    same refusal is raised again, and the build is not run twice."""
    import gc
    import weakref

    from dpplugins.amplification.allocation import _Lazy

    built, held = [], []

    def build():
        work = np.ones(1000)        # the failed build's arrays
        held.append(weakref.ref(work))
        built.append(1)
        raise NumericalError("the epoch's grid does not fit (test)", "use more memory")

    lazy = _Lazy(build)
    messages = []
    for _ in range(2):
        with pytest.raises(NumericalError) as caught:
            lazy.get()
        messages.append(str(caught.value))
        del caught
    gc.collect()
    assert built == [1] and messages[0] == messages[1] and "does not fit" in messages[0]
    assert held[0]() is None


def _held_pmf_bins(plds) -> int:
    """Bins of the grid PMFs that the PLDs ``plds`` hold, counted by walking their components:
    every distinct PMF array (by identity) once, upper PMFs and the lower PMFs built so far."""
    arrays = {}
    for pld in plds:
        for direction in pld._directions.values():
            for component, _ in direction:
                for grid in (component.upper, component._lower):
                    if grid is not None:
                        arrays[id(grid.pmf)] = len(grid.pmf)
    return sum(arrays.values())


def test_the_cached_plds_hold_their_components_within_the_bound():
    """The accountant keeps its last composed PLDs within 2^22 grid bins (about 160 MiB), and
    a composed PLD keeps its components (the per-step PLDs of each distinct (sigma, q)) alive
    after the per-step cache let them go; only the compositions were counted, so 2,000
    distinct steps queried at six deltas held 4.3 GB.  200 distinct steps at two deltas (two
    grids: the loss range depends on delta) hold about 5 million component bins per grid;
    counted here by walking the cached PLDs, they stay within the bound with the
    compositions."""
    from dpplugins.accountants import create
    from dpplugins.accountants.pld import _PLD_CACHE_BINS

    acc = create("pld")
    for i in range(200):
        acc.step(noise_multiplier=1.0 + i * 1e-3, sample_rate=0.01)
    for delta in (1e-5, 1e-7):
        acc.get_epsilon_bounds(delta)
        plds = list(acc._plds.values())
        held = _held_pmf_bins(plds) + sum(pld.cached_bins() for pld in plds)
        assert held <= _PLD_CACHE_BINS, (delta, held)


def _held_bytes(pld) -> int:
    """Bytes of the arrays the components of ``pld`` hold, counted by walking them: every
    distinct buffer once, the upper PMFs, the lower PMFs built so far and the interval masses
    kept for those not built yet."""
    def base(array):
        while isinstance(array.base, np.ndarray):
            array = array.base
        return array

    buffers = {}
    for direction in pld._directions.values():
        for component, _ in direction:
            arrays = [component.upper.pmf]
            if component._lower is not None:
                arrays.append(component._lower.pmf)
            build = component._build_lower
            for argument in getattr(build, "args", ()):
                arrays.extend(getattr(argument, name) for name in ("p", "q")
                              if isinstance(getattr(argument, name, None), np.ndarray))
            for array in arrays:
                buffer = base(array)
                buffers[id(buffer)] = buffer.nbytes
    return sum(buffers.values())


def _distinct_steps(accountant, count: int) -> None:
    for i in range(count):
        accountant.step(noise_multiplier=1.0 + i * 1e-3, sample_rate=0.01)


def test_many_distinct_steps_keep_their_grids_within_the_memory_limit():
    """Every distinct (sigma, q) of a history has its own per-step PLD, all held while a query
    composes them, and only one component's bins were checked against memory_limit: 10,000
    distinct steps took 5 GB under the default 1 GiB.  24 distinct steps under memory_limit
    = 4 MiB hold about 10 MiB of grids on the first grid; now the grid is coarsened until they
    hold at most half of the limit (their arrays counted here by walking the composed PLDs),
    the bounds contain those of the default limit, and an AccuracyWarning says that
    memory_limit limited them."""
    from dpplugins.accountants import create
    from dpplugins.pld import AccuracyWarning

    limit = 4 << 20
    small, default = create("pld", memory_limit=limit), create("pld")
    _distinct_steps(small, 24)
    _distinct_steps(default, 24)
    with pytest.warns(AccuracyWarning, match="memory_limit limits the grid.*raise memory_limit"):
        bounds = small.get_epsilon_bounds(1e-5)
    reference = default.get_epsilon_bounds(1e-5)
    assert bounds.lower <= reference.lower <= reference.upper <= bounds.upper
    held = [_held_bytes(pld) for pld in small._plds.values()]
    assert held and max(held) <= limit // 2, held


def test_distinct_steps_that_fit_no_grid_are_refused_naming_memory_limit():
    """100 distinct steps under memory_limit = 1 MiB: their per-step PLDs' objects alone (about
    8 KiB each) are above half of it on every grid, so the query refuses, naming memory_limit
    and the bytes it would need."""
    from dpplugins.accountants import create

    acc = create("pld", memory_limit=1 << 20)
    _distinct_steps(acc, 100)
    with pytest.raises(NumericalError, match="memory_limit") as caught:
        acc.get_epsilon_bounds(1e-5)
    assert "raise memory_limit to at least" in str(caught.value)


def test_a_fixed_grid_too_fine_for_many_distinct_steps_names_the_smallest_valid_step():
    """A value_discretization_interval fine enough for one component (3,000 of the 16,384 bins
    a 4 MiB limit allows each) but not for 24 of them at once is a ParameterError naming the
    smallest valid step, as a step too fine for one component is; at that step the query
    answers and its grids, counted here by walking the composed PLD, hold at most half of the
    limit."""
    import re

    from dpplugins.accountants import create
    from dpplugins.errors import ParameterError

    limit = 4 << 20
    acc = create("pld", memory_limit=limit, value_discretization_interval=1e-3)
    _distinct_steps(acc, 24)
    with pytest.raises(ParameterError, match="value_discretization_interval.*>= ") as caught:
        acc.get_epsilon_bounds(1e-5)
    smallest = float(re.search(r">= ([0-9.e+-]+)", str(caught.value)).group(1))
    fits = create("pld", memory_limit=limit, value_discretization_interval=1.01 * smallest)
    _distinct_steps(fits, 24)
    bounds = fits.get_epsilon_bounds(1e-5)
    assert 0 < bounds.lower <= bounds.upper < math.inf
    held = [_held_bytes(pld) for pld in fits._plds.values()]
    assert held and max(held) <= limit // 2, held
