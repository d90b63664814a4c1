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
from typing import NamedTuple

import numpy as np
from scipy import fft as sp_fft

__all__ = ["SpectralTerms", "spectral_terms", "transform_size", "SPECTRA_CACHE_BYTES",
           "clear_spectra_cache"]

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
    power_term: np.ndarray  #: ``min(|log|a|| + |arg a|, -log eta)`` (no min if ``eta = 0``)

    @property
    def nbytes(self) -> int:
        return sum(int(x.nbytes) for x in self)


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


def _compute(lo: int, pmf: np.ndarray, size: int, work, eta: float) -> SpectralTerms:
    positions = (lo + np.arange(len(pmf))) % size  # composed index S lands on S mod size
    wrapped = np.bincount(positions, weights=pmf, minlength=size).astype(work, copy=False)
    spectrum = sp_fft.rfft(wrapped)
    re, im = spectrum.real, spectrum.imag
    del spectrum
    # logarithm as (log-modulus, phase) in the working precision: real logarithms and
    # arctangents are much faster than complex ones in long double, and k * (-inf) stays clean
    squares = re * re + im * im
    with np.errstate(divide="ignore"):
        log_mod = 0.5 * np.log(squares)
    arg = np.arctan2(im, re)
    # m = |a| + eta with |a| rounded up (a square root of a sum of two squares: relative
    # error below 3 u; 4 u covers it), so that m bounds the computed and the exact coefficient;
    # where the squares fall below the normal range (|a| < 1.5e-154) the square root is off by
    # at most sqrt(2^-1074) < 1e-160 absolutely, which the added 1e-160 covers
    modulus = np.sqrt(np.asarray(squares, dtype=float))
    magnitude = modulus * (1 + 4 * _U) + (eta + 1e-160)
    del squares, modulus
    with np.errstate(divide="ignore"):
        log_bound = np.log(magnitude)
    # |log a| = hypot(log|a|, arg a) <= |log|a|| + |arg a|: the bound is used (it only enters
    # the rounding term of the powers, which it at most multiplies by sqrt 2)
    log_mod_f = np.asarray(log_mod, dtype=float)
    abs_log = np.abs(log_mod_f) + np.abs(np.asarray(arg, dtype=float))
    power = np.minimum(abs_log, -math.log(eta)) if eta > 0 else abs_log
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
