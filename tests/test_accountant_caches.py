"""What the accountants keep between queries: bounded, reused for the same history, never
pickled -- and never a change in the answers.

The measured quantities are the privacy-loss distributions (any object with an
``epsilon_for_delta`` method) and the bytes of the numpy arrays reachable from an accountant,
found by walking the object graph (:func:`_held`), so the tests do not depend on where an
accountant keeps them.  Each answer is compared, bit for bit, with that of a fresh accountant
given the same history (no cache: the old code's path).
"""

from __future__ import annotations

import gc
import pickle
import types
import warnings

import numpy as np
import pytest

from dpplugins.accountants import create
from dpplugins.events import GaussianEvent, PNSGDEvent
from dpplugins.pld import AccuracyWarning
from dpplugins.samplers import RandomCheckIn

_LEAVES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, str, bytes, int, float)
from conftest import legacy_step  # noqa: E402


def _held(root) -> tuple[list, int]:
    """The privacy-loss distributions reachable from ``root`` and the bytes of the numpy arrays
    reachable from it (each buffer once).  Functions, classes and modules are not followed (they
    lead to the whole interpreter)."""
    seen, stack, plds, nbytes = set(), [root], [], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _LEAVES):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            if obj.base is None:
                nbytes += obj.nbytes
            else:
                stack.append(obj.base)
            continue
        if obj is not root and hasattr(type(obj), "epsilon_for_delta"):
            plds.append(obj)
        stack.extend(gc.get_referents(obj))
    return plds, nbytes


def _fresh(name: str, history, **options):
    acc = create(name, **options)
    acc.history = history
    return acc


# -- balls_and_bins: the epoch PLDs ---------------------------------------------------------------
def _noise_schedule_accountant():
    """A noise multiplier that grows every epoch: each epoch moves the first grid (its step
    follows the least private epoch's loss scale), so no epoch PLD of one query serves the next."""
    return create("balls_and_bins"), [1.2 + 0.05 * e for e in range(4)]


def test_balls_and_bins_keeps_only_what_the_queried_history_uses():
    """Queried after every epoch of a noise schedule, the accountant holds no more PLDs (and no
    more bytes) than a fresh accountant that answered the same query once, and its answers are
    the fresh one's bit for bit.  (The epoch cache used to keep every epoch PLD ever built:
    e (e + 1) / 2 after e epochs here; 3,160 of them, 471 MB, after 78 epochs of a longer
    run.)"""
    acc, sigmas = _noise_schedule_accountant()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        for sigma in sigmas:
            acc.compose(legacy_step(acc, sigma, 0.1), 10)
            bounds = acc.get_epsilon_bounds(1e-5)
            fresh = _fresh("balls_and_bins", acc.history)
            assert fresh.get_epsilon_bounds(1e-5) == bounds
            (mine, mine_bytes), (theirs, theirs_bytes) = _held(acc), _held(fresh)
            assert len(mine) <= len(theirs) and mine_bytes <= theirs_bytes
        # a repeated query of the same history (another delta) reuses every PLD it holds
        before = {id(pld) for pld in _held(acc)[0]}
        again = acc.get_epsilon_bounds(1e-6)
        assert before <= {id(pld) for pld in _held(acc)[0]}
        assert again == _fresh("balls_and_bins", acc.history).get_epsilon_bounds(1e-6)


def test_balls_and_bins_pickle_and_state_dict_carry_no_cache():
    """After queries, a pickle (and so a deepcopy) holds no PLD and is exactly as long as the
    pickle of an accountant that was never queried; the state dict is the same."""
    acc, sigmas = _noise_schedule_accountant()
    for sigma in sigmas[:2]:
        acc.compose(legacy_step(acc, sigma, 0.1), 10)
        bounds = acc.get_epsilon_bounds(1e-5)
    never = _fresh("balls_and_bins", acc.history)
    assert _held(acc)[0]   # it has something to leave out
    pickled = pickle.dumps(acc)
    assert len(pickled) == len(pickle.dumps(never))
    clone = pickle.loads(pickled)
    assert not _held(clone)[0]
    assert clone.get_epsilon_bounds(1e-5) == bounds
    assert acc.state_dict() == never.state_dict()


# -- checkin and pnsgd: the composed PLD of the passes --------------------------------------------
ONE_PASS = {
    # amplified fixed check-ins: the PLD path (test_checkin_accountant)
    "checkin": RandomCheckIn(10**6, 100, 0.01).event(50.0, 1),
    "pnsgd": PNSGDEvent(100, 1, GaussianEvent(2.0), lipschitz=1.0, diameter=1.0,
                        learning_rate=0.5),
}


@pytest.mark.parametrize("name", sorted(ONE_PASS))
def test_per_pass_queries_hold_one_composed_pld(name):
    """Queried after every pass, the accountant holds no more PLDs (and bytes) than a fresh
    accountant that answered the same queries once -- one composed PLD -- and answers as it does
    bit for bit.  (The composed PLDs were kept in the answer cache, one per history queried:
    1.8 GB after 250 passes.)  A repeated query reuses the PLD; a pickle holds none."""
    acc = create(name)
    for _ in range(4):
        acc.compose(ONE_PASS[name])
        answers = acc.get_epsilon(1e-5), acc.get_delta(1.0)
        fresh = _fresh(name, acc.history)
        assert (fresh.get_epsilon(1e-5), fresh.get_delta(1.0)) == answers
        (mine, mine_bytes), (theirs, theirs_bytes) = _held(acc), _held(fresh)
        assert len(mine) <= len(theirs) and mine_bytes <= theirs_bytes
    before = {id(pld) for pld in _held(acc)[0]}
    assert before   # the passes are composed (more than one pass: a PLD)
    acc.get_epsilon(1e-7)
    assert {id(pld) for pld in _held(acc)[0]} == before
    assert not _held(pickle.loads(pickle.dumps(acc)))[0]
