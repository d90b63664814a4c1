"""TF-Privacy 0.9.0's signatures (issue 20 item 3), and accountants chosen by supports(event).

References: TF-Privacy 0.9.0's own tests (``tensorflow_privacy/privacy/analysis/
compute_dp_sgd_privacy_test.py``): the same calls, with their expected numbers where our
statement computes the same thing (the Poisson RDP lines are dp_accounting's RdpAccountant, as
theirs; their once-per-epoch lines are RDP/PLD conversions of the unsampled Gaussian, which our
certified shuffled-epochs line may only undercut), and the closed-form Gaussian profile
(``conftest``).
"""

import inspect
import math
import re

import pytest

from conftest import epsilon_from_delta_curve, gaussian_delta_exact

dp_accounting = pytest.importorskip("dp_accounting")

from dpplugins.accountants import create, registry  # noqa: E402
from dpplugins.accountants.pld import PLDAccountant as CorePLD  # noqa: E402
from dpplugins.accountants.shuffle import ShuffleAccountant as CoreShuffle  # noqa: E402
from dpplugins.errors import ParameterError  # noqa: E402
from dpplugins.integrations.tf_privacy import (compute_dp_sgd_privacy,  # noqa: E402
                                               compute_dp_sgd_privacy_numbers,
                                               compute_dp_sgd_privacy_statement, dp_sgd_event,
                                               statement_accountants)

# TF-Privacy's statement test arguments (DP_SGD_STATEMENT_KWARGS) and its expected figures
KWARGS = dict(number_of_examples=10000, batch_size=64, num_epochs=5.0, noise_multiplier=2.0,
              delta=1e-6)
POSITIONAL = (10000, 64, 5.0, 2.0, 1e-6)


def _lib():
    try:
        from tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib
    except ImportError:     # pragma: no cover - TF-Privacy is a test dependency
        return None
    return compute_dp_sgd_privacy_lib


class _AccountantType:
    """Stand-in for TF-Privacy's ``AccountantType`` (an enum with values ``'RDP'``/``'PLD'``)
    when TF-Privacy is not installed."""

    class _Member:
        def __init__(self, value):
            self.value = value

    RDP, PLD = _Member("RDP"), _Member("PLD")


def _types():
    lib = _lib()
    return lib.AccountantType if lib is not None else _AccountantType


def _float_after(label, text):
    match = re.search(re.escape(label) + r"\s+([0-9.]+|inf)", text)
    assert match, f"{label!r} not in\n{text}"
    return float(match.group(1))


def _user(text):
    return text.partition("User-level DP")[2]


def _gaussian_epsilon(mu, delta):
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


# -- the signature --------------------------------------------------------------------------------
def test_statement_has_tf_privacys_parameters_in_tf_privacys_order():
    ours = list(inspect.signature(compute_dp_sgd_privacy_statement).parameters.values())
    names = ["number_of_examples", "batch_size", "num_epochs", "noise_multiplier", "delta",
             "used_microbatching", "max_examples_per_user", "accountant_type"]
    assert [p.name for p in ours[:8]] == names
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in ours[:8])
    assert [p.default for p in ours[5:7]] == [True, None]
    assert all(p.kind is p.KEYWORD_ONLY for p in ours[8:])
    lib = _lib()
    if lib is not None:
        theirs = list(inspect.signature(lib.compute_dp_sgd_privacy_statement).parameters)
        assert theirs == names


# -- TF-Privacy's statement tests, called as they call theirs -------------------------------------
@pytest.mark.parametrize("call", ["keywords", "positional"])
def test_tf_privacy_statement_rdp_no_user_dp(call):
    rdp = _types().RDP
    text = (compute_dp_sgd_privacy_statement(**KWARGS, accountant_type=rdp) if call == "keywords"
            else compute_dp_sgd_privacy_statement(*POSITIONAL, True, None, rdp))
    # their Poisson line (RDP): 1.616, the same dp_accounting computation (ours rounded up)
    assert 1.616 <= _float_after("Poisson sampling (*):", text) <= 1.617
    assert "rdp accountant (dp_accounting RdpAccountant" in text
    # their once-per-epoch line is RDP of 5 unsampled Gaussian steps at noise 2 / 2 (13.376);
    # ours is the certified shuffled-epochs bound, the exact mu = sqrt(5) Gaussian (their PLD
    # statement prints 12.595 for it)
    ours = _float_after("once per epoch:", text)
    assert ours <= 13.376 and ours == pytest.approx(12.595, abs=1.5e-3)
    assert ours == pytest.approx(_gaussian_epsilon(math.sqrt(5), 1e-6), abs=1e-3)
    assert "User-level privacy: none without a bound" in text


@pytest.mark.parametrize("call", ["keywords", "positional"])
def test_tf_privacy_statement_rdp_user_dp(call):
    rdp = _types().RDP
    text = (compute_dp_sgd_privacy_statement(**KWARGS, max_examples_per_user=3,
                                             accountant_type=rdp) if call == "keywords"
            else compute_dp_sgd_privacy_statement(*POSITIONAL, True, 3, rdp))
    assert 1.616 <= _float_after("Poisson sampling (*):", text.partition("User-level")[0]) <= 1.617
    user = _user(text)
    assert 6.425 <= _float_after("Poisson sampling (*):", user) <= 6.426   # theirs, rounded up
    # their once-per-epoch user line (85.940) is RDP group privacy; ours is exact group privacy
    # of the mu = sqrt(5) Gaussian bound: mu -> 3 mu (Dong, Roth, Su 2022, Thm 2.14)
    ours = _float_after("once per epoch:", user)
    assert ours <= 85.940
    assert ours == pytest.approx(_gaussian_epsilon(3 * math.sqrt(5), 1e-6), abs=1.5e-3)


def test_tf_privacy_statement_rdp_user_dp_infinite():
    text = compute_dp_sgd_privacy_statement(**KWARGS, max_examples_per_user=10,
                                            accountant_type=_types().RDP)
    user = _user(text)
    # theirs: inf (**) for both lines.  The Poisson line is the same conversion: inf too
    assert re.search(r"Poisson sampling \(\*\):\s+inf \(\*\*\)", user)
    # the shuffled line is exact group privacy of Gaussian DP: finite (where theirs is inf)
    assert math.isfinite(_float_after("once per epoch:", user))
    assert "(**)" in text.partition("(*) ")[2]


@pytest.mark.parametrize("call", ["keywords", "positional"])
def test_tf_privacy_statement_pld(call):
    pld = _types().PLD
    text = (compute_dp_sgd_privacy_statement(**KWARGS, accountant_type=pld) if call == "keywords"
            else compute_dp_sgd_privacy_statement(*POSITIONAL, True, None, pld))
    # their PLD figures (dp_accounting's PLD): ours is our certified PLD, equal to 3 decimals
    assert _float_after("Poisson sampling (*):", text) == pytest.approx(1.199, abs=1.5e-3)
    assert _float_after("once per epoch:", text) == pytest.approx(12.595, abs=1.5e-3)
    assert "pld accountant (dpplugins PLD), certified upper bound" in text
    # TF-Privacy refuses user-level DP with PLD; ours converts the certified PLD (Vadhan)
    numbers = compute_dp_sgd_privacy_numbers(*POSITIONAL, True, 3, pld)
    assert numbers.poisson_accountant == "pld"
    assert numbers.user_poisson_epsilon >= 3 * numbers.poisson_epsilon * (1 - 1e-9) or \
        math.isinf(numbers.user_poisson_epsilon)


def test_accountant_type_and_accountant_must_agree():
    rdp = _types().RDP
    assert compute_dp_sgd_privacy_numbers(*POSITIONAL, True, None, rdp,
                                          accountant="rdp").poisson_accountant == "rdp"
    for kwargs, name in [(dict(accountant_type=rdp, accountant="pld"), "accountant"),
                         (dict(accountant_type="GDP"), "accountant_type")]:
        with pytest.raises(ParameterError) as info:
            compute_dp_sgd_privacy_statement(*POSITIONAL, **kwargs)
        assert info.value.name == name
    # the strings TF-Privacy's enum carries are accepted too
    assert compute_dp_sgd_privacy_numbers(*POSITIONAL, True, None, "RDP").poisson_accountant == \
        "rdp"


# -- compute_dp_sgd_privacy: TF-Privacy's name, not its argument order ----------------------------
def test_compute_dp_sgd_privacy_refuses_tf_privacys_positional_call():
    # TF-Privacy's test: compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta)
    with pytest.raises(TypeError, match="compute_dp_sgd_privacy_numbers"):
        compute_dp_sgd_privacy(60000, 150, 1.3, 15, 1e-5)
    with pytest.raises(TypeError, match="keyword arguments only"):
        compute_dp_sgd_privacy(n=60000, batch_size=150, noise_multiplier=1.3, epochs=15,
                               delta=1e-5)
    # with our keywords it is compute_dp_sgd_privacy_numbers
    args = dict(number_of_examples=60000, batch_size=150, num_epochs=15, noise_multiplier=1.3,
                delta=1e-5, used_microbatching=False, accountant="rdp")
    numbers = compute_dp_sgd_privacy(**args)
    assert numbers == compute_dp_sgd_privacy_numbers(**args)
    # TF-Privacy's expected value (0.7242234026109595, on a coarser grid of RDP orders): the
    # same 6000 steps at q = 0.0025; dp_accounting's default orders include theirs' neighbours,
    # so ours is at most theirs and within 1 percent
    assert numbers.poisson_steps == 6000
    assert 0.99 * 0.7242234026109595 <= numbers.poisson_epsilon <= 0.7242234026109595 * (1 + 1e-9)
    lib = _lib()
    if lib is not None:
        eps, _ = lib.compute_dp_sgd_privacy(60000, 150, 1.3, 15, 1e-5)
        assert eps == pytest.approx(0.7242234026109595)
    # our certified PLD is below RDP
    pld = compute_dp_sgd_privacy_numbers(60000, 150, 15, 1.3, 1e-5, False)
    assert pld.poisson_epsilon < numbers.poisson_epsilon


# -- validity is supports(event), for any registered accountant -----------------------------------
def test_sampler_vocabulary_goes_through_one_event_function():
    checkin = dp_sgd_event("random_checkin", 4000, 100, 1.5, 1.0)
    assert checkin == dp_sgd_event("checkin", 4000, 100, 1.5, 1.0)
    assert (checkin.steps_per_epoch, checkin.steps) == (40, 60)
    assert dp_sgd_event("poisson", 1000, 30, 1.5, 1.0).steps == 50
    same = compute_dp_sgd_privacy_numbers(4000, 100, 1.5, 2.0, 1e-5, True,
                                          sampler="random_checkin")
    assert same == compute_dp_sgd_privacy_numbers(4000, 100, 1.5, 2.0, 1e-5, True,
                                                  sampler="checkin")
    with pytest.raises(ParameterError) as info:
        dp_sgd_event("uniform", 1000, 30, 1.0, 1.0)
    assert info.value.name == "sampler"
    # every choice is create(name).supports(event) on these events
    assert statement_accountants(4000, 100, 1.5, 1.0, sampler="checkin") == {
        "shuffled_epochs": "shuffle", "checkin": "balls_and_bins", "poisson": "pld"}
    assert create("balls_and_bins").supports(checkin)
    assert not create("pld").supports(checkin)


def test_user_registered_accountants_work_in_the_statement(monkeypatch):
    class MyPLD(CorePLD):
        name = "my_pld"

    class MyShuffle(CoreShuffle):
        name = "my_shuffle"

    monkeypatch.setitem(registry._REGISTRY, "my_pld", MyPLD)
    monkeypatch.setitem(registry._REGISTRY, "my_shuffle", MyShuffle)
    args = (10000, 100, 2, 0.8, 1e-5, False)
    reference = compute_dp_sgd_privacy_numbers(*args, sampler="shuffled_epochs")
    # a Poisson accountant: the Poisson line, with its name and the PLD's numbers
    mine = compute_dp_sgd_privacy_numbers(*args, accountant="my_pld", sampler="shuffled_epochs")
    assert mine.poisson_accountant == "my_pld" and mine.shuffled_accountant == "shuffle"
    assert mine.poisson_epsilon == reference.poisson_epsilon
    text = compute_dp_sgd_privacy_statement(*args, accountant="my_pld")
    assert "my_pld accountant (" in text and "MyPLD), certified upper bound" in " ".join(
        text.split())
    # a shuffled-epochs accountant: the training's line
    shuffle = compute_dp_sgd_privacy_numbers(*args, 2, accountant="my_shuffle",
                                             sampler="shuffled_epochs")
    assert shuffle.shuffled_accountant == "my_shuffle" and shuffle.poisson_accountant == "pld"
    assert shuffle.shuffled_upper == reference.shuffled_upper
    assert "<= Epsilon with each example occurring once per epoch" in \
        compute_dp_sgd_privacy_statement(*args, accountant="my_shuffle",
                                         sampler="shuffled_epochs")
    # neither the sampler's event nor Poisson: refused, naming the ones that support it
    with pytest.raises(ParameterError, match="accountants that support sampler='checkin': "
                                             "balls_and_bins") as info:
        compute_dp_sgd_privacy_numbers(*args, accountant="my_shuffle", sampler="checkin")
    assert info.value.name == "accountant"
    # replace-one accountants do not fit the statement's add-or-remove adjacency
    with pytest.raises(ParameterError, match="add-or-remove-one adjacency") as info:
        compute_dp_sgd_privacy_numbers(*args, accountant="checkin", sampler="checkin")
    assert info.value.name == "accountant"
