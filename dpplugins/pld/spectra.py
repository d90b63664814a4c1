"""The per-component terms of an FFT composition, computed once per transform size and cached.

:func:`~dpplugins.pld.compose.compose_grid_pmfs` needs, for every component PMF ``c`` and the
transform size ``N`` of the composition, the spectrum ``a = DFT_N(c)`` as log-modulus and phase,
and the terms of its floating-point error bound: ``log m`` and ``eta / m`` with ``m = |a| +
eta`` and ``eta = c u log2(N) sum|c|``, and ``min(|log a|, -log eta)`` (see the module docstring
of :mod:`dpplugins.pld.compose`).  None of them depends on the count ``k`` of the component, so
composing ``k`` copies is ``k`` times each of them, summed over the components.  Computing them
is most of the work of a composition with few distinct components (a binning, a forward
transform, a complex logarithm); caching them makes the next composition with the same
components and size -- the history after the next epoch, a query at another epsilon, the
other accuracy level -- cost a few vector operations and one inverse transform.

**Transform sizes.**  :func:`transform_size` rounds a window length up to one of a sparse
ladder of fast sizes (``m x 2^j``, ``m`` in 8, 9, 10, 12, 14, 15; neighbours at most 1.2
apart), so that a window growing with the number of steps keeps its size, and the cached terms,
over several epochs: the window of ``T`` steps grows like ``sqrt(T)``, so one size serves step
counts over a range of up to a factor 1.44.  Over windows of 10^3 to 3 x 10^6 bins the sizes
are on average 5.8 % (at most 18.5 %) above scipy's smallest fast length.  A larger size than
the window only changes where folded mass lands, which the truncation terms charge either
way.

**Memory.**  The cache is process-wide and bounded: at most ``SPECTRA_CACHE_BYTES`` (64 MiB) of
arrays, least recently used first out; an entry larger than a quarter of that is not kept.  An
entry is keyed by the component's identity (held by a weak reference, so a dropped component's
entry is never returned for another object), the size and the working precision.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple, Sequence

import numpy as np
from scipy import fft as sp_fft

from dpplugins.pld.threads import ordered_map

__all__ = ["SpectralTerms", "spectral_terms", "summed_spectral_terms", "transform_size",
           "SPECTRA_CACHE_BYTES",
           "clear_spectra_cache", "log_polar", "power_rounding", "from_log_polar",
           "reduce_phase"]

_U = np.finfo(float).eps / 2

#: the bound on the arrays the process-wide cache holds, in bytes
SPECTRA_CACHE_BYTES = 64 * 2 ** 20

_CACHE: "OrderedDict[tuple, tuple[weakref.ref, SpectralTerms]]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_cache_bytes = 0


class SpectralTerms(NamedTuple):
    """The count-independent terms of one component at one transform size (arrays over the
    ``N // 2 + 1`` frequencies of a real transform)."""

    log_modulus: np.ndarray  #: ``log |a|`` in the working precision (``-inf`` where ``a = 0``)
    phase: np.ndarray  #: ``arg a`` in the working precision
    log_bound: np.ndarray  #: ``log m``, ``m = |a| + eta``
    error_ratio: np.ndarray  #: ``eta / m``
    power_term: np.ndarray  #: :func:`power_rounding` (``min(|log|a|| + |arg a|, -log eta) + 0.2``)

    @property
    def nbytes(self) -> int:
        return sum(int(x.nbytes) for x in self)


#: bytes of FFT plans the engine lets scipy keep: scipy.fft (pocketfft) caches the plans of
#: its last 16 transform lengths per precision, about ``itemsize`` bytes a point (30 MB at
#: 3.9e6 points in double, 60 MB in long double), and no public call frees them -- one
#: balls_and_bins query (randomized response with 10^6 buckets, 50-out-of-100, p = 0.9)
#: left 420 MB of plans behind, a fifth of its peak
FFT_PLAN_BYTES = 64 * 2 ** 20

_PLANS: dict = {}  # (length, itemsize) -> bytes of the plans made since the last release
_PLANS_LOCK = threading.Lock()


def before_transform(size: int, dtype) -> None:
    """Call before a real transform of length ``size`` in precision ``dtype``: when the plans
    of the lengths transformed since the last release and this one's would exceed
    :data:`FFT_PLAN_BYTES`, scipy's plan cache is flushed first (16 tiny transforms per
    precision push its plans out, least recently used first).  A plan is a function of the
    length alone: the values are unchanged, only made again (30-90 ms at 4e6 points)."""
    key = (int(size), np.dtype(dtype).itemsize)
    with _PLANS_LOCK:
        if key in _PLANS:
            return
        total = sum(_PLANS.values()) + key[0] * key[1]
        flush = bool(_PLANS) and total > FFT_PLAN_BYTES
        if flush:
            precisions = {itemsize for _, itemsize in _PLANS}
            _PLANS.clear()
        _PLANS[key] = key[0] * key[1]
    if flush:
        for itemsize in precisions:
            work = np.longdouble if itemsize == np.dtype(np.longdouble).itemsize else np.float64
            for n in range(2, 18):
                sp_fft.irfft(sp_fft.rfft(np.zeros(n, dtype=work)), n=n)


#: the mantissas of :func:`transform_size`: neighbours at most 1.2 apart, factors 2, 3, 5, 7
_SIZE_MANTISSAS = (8, 9, 10, 12, 14, 15, 16)


def transform_size(bins: int) -> int:
    """The smallest ``m x 2^j >= bins`` with ``m`` in 8, 9, 10, 12, 14, 15 (or ``bins`` itself
    below 16): a fast transform size at most 1.2 times the window."""
    bins = max(int(bins), 1)
    if bins <= 16:
        return bins
    shift = max(bins - 1, 0).bit_length() - 4  # 2^(shift + 3) < bins <= 2^(shift + 4)
    for mantissa in _SIZE_MANTISSAS:
        if mantissa << shift >= bins:
            return mantissa << shift
    return 16 << shift


def clear_spectra_cache() -> None:
    """Empty the process-wide cache (benchmarks use it to start cold)."""
    global _cache_bytes
    with _CACHE_LOCK:
        _CACHE.clear()
        _cache_bytes = 0


def log_polar(spectrum: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log|a|, arg a, |a|^2)`` of complex coefficients ``a``, in their own precision.

    Real logarithms and arctangents are much faster than complex ones in long double, and
    ``k * (-inf)`` (a zero coefficient) stays clean.  Rounding, in units ``u`` of the precision
    (our derivation, from the standard model of Higham 2002, Sec. 2.2): the sum of squares is
    within relative ``2 u`` (two products and a sum), so ``log|a|`` is within ``u`` absolutely
    (half the logarithm of ``1 + 2 u``) plus the logarithm's own relative rounding; the
    arctangent is within a few ulps of ``arg a``.  So ``k`` times either is off by at most
    ``c u k (|log|a|| + |arg a|) + 2 u k`` for a small constant ``c``: :func:`power_rounding`.
    """
    re, im = spectrum.real, spectrum.imag
    squares = re * re + im * im
    with np.errstate(divide="ignore"):
        log_mod = 0.5 * np.log(squares)
    return log_mod, np.arctan2(im, re), squares


#: the log-modulus's absolute rounding (``u``), doubled, in units of ``c u = 10 u``
_LOG_MODULUS_TERM = 0.2


def power_rounding(log_modulus: np.ndarray, phase: np.ndarray, eta: float = 0.0) -> np.ndarray:
    """``min(|log|a|| + |arg a|, -log eta) + 0.2`` in double (no minimum if ``eta = 0``): per
    unit of count ``k``, the bound (in units of ``c u``, ``c = 10`` as in
    :mod:`dpplugins.pld.compose`) on the rounding of ``k log a`` computed from :func:`log_polar`.
    The ``+ 0.2`` is twice the absolute error ``u`` of the log-modulus (see there), which does
    not vanish where ``|a|`` is near 1.  ``|log a| = hypot(log|a|, arg a) <= |log|a|| +
    |arg a|`` is used.  The cap (``eta``: the bound on the coefficient's own error): beyond it
    ``|a| < e^pi eta``, so the error ratio ``eta / (|a| + eta) > 1/25`` that the composition
    charges per count already exceeds any rounding, and a zero coefficient (``log 0 = -inf``)
    stays finite."""
    abs_log = (np.abs(np.asarray(log_modulus, dtype=float))
               + np.abs(np.asarray(phase, dtype=float)))
    if eta > 0:
        abs_log = np.minimum(abs_log, -math.log(eta))
    return abs_log + _LOG_MODULUS_TERM


def from_log_polar(log_modulus: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """``exp(log_modulus) (cos phase + i sin phase)`` in the precision of the inputs, the phase
    reduced modulo ``2 pi`` first (in that precision).  Relative rounding: a few ``u`` of the
    precision on top of the inputs' own error (``exp`` relative ``u``; ``cos``, ``sin`` of an
    argument in ``[0, 2 pi)`` absolute ``u``; one complex product).  Underflow to zero is
    silent: callers pass only frequencies whose bound is in range and charge the rest."""
    with np.errstate(under="ignore"):
        reduced = reduce_phase(phase)
        return np.exp(log_modulus) * (np.cos(reduced) + 1j * np.sin(reduced))


#: 2 pi to long-double accuracy (``2 * np.longdouble(np.pi)`` is only as accurate as double:
#: reducing a phase of ``k pi`` by it would be off by about ``k * 1e-16``)
_TWO_PI_LD = np.longdouble("6.28318530717958647692528676655900577")


def reduce_phase(phase: np.ndarray) -> np.ndarray:
    """``phase`` modulo ``2 pi`` in ``[0, 2 pi)``, in the precision of ``phase``, with ``2 pi``
    to that precision: the result is within a few ``u`` of ``[0, 2 pi)`` plus ``u |phase|`` of
    the exact reduction (the remainder itself is exact, the constant carries relative ``u``)."""
    phase = np.asarray(phase)
    two_pi = _TWO_PI_LD if phase.dtype == np.longdouble else 2 * np.pi
    return np.remainder(phase, two_pi)


def _compute(lo: int, pmf: np.ndarray, size: int, work, eta: float) -> SpectralTerms:
    positions = (lo + np.arange(len(pmf))) % size  # composed index S lands on S mod size
    wrapped = np.bincount(positions, weights=pmf, minlength=size).astype(work, copy=False)
    before_transform(size, work)
    spectrum = sp_fft.rfft(wrapped)
    log_mod, arg, squares = log_polar(spectrum)
    del spectrum
    # m = |a| + eta with |a| rounded up (a square root of a sum of two squares: relative
    # error below 3 u; 4 u covers it), so that m bounds the computed and the exact coefficient;
    # where the squares fall below the normal range (|a| < 1.5e-154) the square root is off by
    # at most sqrt(2^-1074) < 1e-160 absolutely, which the added 1e-160 covers
    modulus = np.sqrt(np.asarray(squares, dtype=float))
    magnitude = modulus * (1 + 4 * _U) + (eta + 1e-160)
    del squares, modulus
    with np.errstate(divide="ignore"):
        log_bound = np.log(magnitude)
    power = power_rounding(log_mod, arg, eta)
    terms = SpectralTerms(log_mod, arg, log_bound, eta / magnitude, power)
    for values in terms:  # shared through the cache: never to be changed in place
        values.setflags(write=False)
    return terms


def spectral_terms(component, size: int, work, eta: float) -> SpectralTerms:
    """The :class:`SpectralTerms` of ``component`` (a :class:`~dpplugins.pld.grid.GridPMF`) at
    transform size ``size`` in precision ``work`` (``eta``: the forward-transform error bound of
    the stored masses at that size and precision), from the cache when present."""
    global _cache_bytes
    key = (id(component), int(size), np.dtype(work).name, float(eta))
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None and found[0]() is component:
            _CACHE.move_to_end(key)
            return found[1]
    terms = _compute(component.lo, component.pmf, int(size), work, eta)
    nbytes = terms.nbytes
    if nbytes > SPECTRA_CACHE_BYTES // 4:
        return terms
    with _CACHE_LOCK:
        old = _CACHE.pop(key, None)
        if old is not None:
            _cache_bytes -= old[1].nbytes
        _CACHE[key] = (weakref.ref(component), terms)
        _cache_bytes += nbytes
        while _cache_bytes > SPECTRA_CACHE_BYTES and len(_CACHE) > 1:
            _, (_, dropped) = _CACHE.popitem(last=False)
            _cache_bytes -= dropped.nbytes
    return terms


#: components whose terms one task computes and sums (the chunks are fixed, whatever the number
#: of threads, so the result does not depend on it)
SUM_CHUNK = 32
#: above this transform size the chunks are summed in the calling thread only: each thread
#: holds a partial sum (five arrays of half the size), and a large window is composed of few
#: components anyway
_THREADED_MAX_SIZE = 2 ** 20
#: below this much work (components times transform size) the chunks are summed in the calling
#: thread: starting the threads costs more than they save (measured on 2 cores: 100 distinct
#: steps, about 2 x 10^6, 0.30 s with two threads against 0.28 s with one; 1000 distinct steps,
#: about 6 x 10^7, 3.4 s against 4.0 s)
_THREADED_MIN_WORK = 2 ** 24


def summed_spectral_terms(parts: Sequence[tuple[object, int, float]], size: int,
                          work) -> list[np.ndarray]:
    """``[sum_i k_i x_i for each field x of SpectralTerms]`` over ``parts = ((component, k_i,
    eta_i), ...)`` (:func:`spectral_terms` of each).

    The components are summed in fixed chunks of :data:`SUM_CHUNK`, each chunk in order, then
    the chunks in order; chunks run on :func:`~dpplugins.pld.threads.engine_threads` threads,
    at most that many partial sums held at a time.  Rounding: every term passes through at
    most ``K - 1`` additions whatever the order, so the sum of ``K`` terms is within
    ``gamma_(K-1) = (K - 1) u / (1 - (K - 1) u)`` of the sum of their absolute values (Higham
    2002, Sec. 4.2), the bound :func:`~dpplugins.pld.compose.compose_grid_pmfs` charges."""

    def chunk_sum(chunk):
        sums = None
        for component, k, eta in chunk:
            terms = spectral_terms(component, size, work, eta)
            if sums is None:
                sums = [k * x for x in terms]
            else:
                for total, x in zip(sums, terms):
                    total += k * x
        return sums

    chunks = [parts[i:i + SUM_CHUNK] for i in range(0, len(parts), SUM_CHUNK)]
    threads = None if size <= _THREADED_MAX_SIZE and len(parts) * size >= _THREADED_MIN_WORK \
        else 1
    return _add_in_order(ordered_map(chunk_sum, chunks, threads))


def _add_in_order(partials) -> list[np.ndarray]:
    total = None
    for partial in partials:
        if total is None:
            total = partial
        else:
            for into, x in zip(total, partial):
                into += x
    return total
