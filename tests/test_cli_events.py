"""The command line over events: every failure is one line on stderr and exit status 2 (real
processes), strict JSON, sampler aliases, every accountant reachable from ``epsilon``."""

import argparse
import json
import math
import os
import subprocess
import sys

import pytest

from dpplugins import report
from dpplugins.accountants import available, create
from dpplugins.cli import _config, build_parser, main

SMALL = ["--dataset-size", "600", "--batch-size", "60", "--epochs", "1", "--delta", "1e-5"]
POISSON = ["--sample-rate", "0.01", "--steps", "10", "--delta", "1e-5"]
#: random allocation is fast with many steps per epoch (here 100)
ALLOCATION = ["--dataset-size", "1000", "--batch-size", "10", "--epochs", "1", "--delta", "1e-5"]


def run(*argv, **kwargs):
    return subprocess.run([sys.executable, "-m", "dpplugins", *argv], capture_output=True,
                          text=True, timeout=300, **kwargs)


def _reject(token):
    raise AssertionError(f"non-strict JSON token {token}")


def assert_one_line_exit_2(result):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


FAILURES = {
    "sigma 1e400": ["epsilon", "--noise-multiplier", "1e400", *POISSON],
    "sigma NaN": ["epsilon", "--noise-multiplier", "nan", *POISSON],
    "delta inf": ["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps",
                  "10", "--delta", "inf"],
    "dataset size 1e400": ["compare", "--noise-multiplier", "1", "--dataset-size", "1e400",
                           "--batch-size", "60", "--epochs", "1", "--delta", "1e-5"],
    "target NaN": ["noise", "--target-epsilon", "nan", *POISSON],
    "unsupported pair": ["epsilon", "--noise-multiplier", "1", "--sampler", "shuffled_epochs",
                         *SMALL, "--accountant", "pld"],
    "unsupported reference": ["epsilon", "--noise-multiplier", "1", "--sampler",
                              "random_allocation", *SMALL, "--accountant", "opacus.rdp"],
    "unsupported noise pair": ["noise", "--target-epsilon", "1", *SMALL,
                               "--accountant", "balls_and_bins"],
    "unknown sampler": ["epsilon", "--noise-multiplier", "1", "--sampler", "shuffled", *SMALL],
    "option of another sampler": ["epsilon", "--noise-multiplier", "1", "--window", "3",
                                  *SMALL],
    "missing window": ["epsilon", "--noise-multiplier", "1", "--sampler", "sliding_window",
                       *SMALL, "--accountant", "checkin"],
    "missing output directory": ["plot", "--noise-multiplier", "1", *SMALL, "--points", "1",
                                 "--output", "missing/dir/x.png"],
}


@pytest.mark.parametrize("argv", list(FAILURES.values()), ids=list(FAILURES))
def test_every_failure_is_one_line_and_exit_2(argv, tmp_path):
    result = run(*argv, cwd=tmp_path)
    assert_one_line_exit_2(result)
    if argv[-1] == "missing/dir/x.png":
        assert "missing/dir" in result.stderr and not (tmp_path / "missing").exists()


def test_tiny_noise_answers_infinity():
    """sigma = 1e-300 is valid (> 0): a step is then (almost) non-private, so at delta = 1e-5
    the certified upper bound is inf -- an answer, exit 0 (it used to be a ZeroDivisionError).
    Closed form: a Poisson step at rate q with disjoint outputs has delta(eps) >= q for every
    eps, so 10 steps at q = 0.01 have delta >= 1 - 0.99^10 = 0.096 > 1e-5."""
    result = run("epsilon", "--noise-multiplier", "1e-300", *POISSON)
    assert result.returncode == 0, result.stderr
    assert "epsilon in [" in result.stdout and "inf]" in result.stdout
    result = run("compare", "--noise-multiplier", "1e-300", *SMALL, "--no-references",
                 "--accountants", "pld,shuffle", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["accountant"]: r for r in json.loads(result.stdout, parse_constant=_reject)}
    assert rows["pld"]["valid"] and rows["pld"]["epsilon"] is None
    # the truth is inf (above); the certified lower bound is finite: the engine's grid ends near
    # loss 600 and its lower constructions round larger losses down to it (valid, loose)
    assert "epsilon" in rows["pld"]["infinite"]
    assert not rows["shuffle"]["valid"]


def test_unsupported_pair_names_the_accountants_that_support_it():
    result = run(*FAILURES["unsupported pair"])
    assert "accountants that support it: shuffle" in result.stderr


def test_broken_pipe_is_one_line_and_exit_2():
    read_end, write_end = os.pipe()
    os.close(read_end)            # the reader is gone before anything is written
    try:
        result = subprocess.run(
            [sys.executable, "-m", "dpplugins", "compare", "--noise-multiplier", "1", *SMALL,
             "--json", "--no-references", "--accountants", "pld"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert_one_line_exit_2(result)
    assert "broken pipe" in result.stderr


def test_compare_json_is_strict_and_infinity_is_null():
    result = run("compare", "--noise-multiplier", "1", *ALLOCATION, "--sampler", "checkin",
                 "--json", "--accountants", "checkin,balls_and_bins,pld")
    assert result.returncode == 0, result.stderr
    rows = {r["accountant"]: r for r in json.loads(result.stdout, parse_constant=_reject)}
    assert list(rows) == ["checkin", "balls_and_bins", "pld"]   # only the named ones
    # the check-in accountant has no amplification for central noise: each pass is a
    # post-processing of one Gaussian mechanism of replace-one sensitivity 2, i.e. 2/sigma-GDP
    # (Dong, Roth, Su 2022); closed form of its epsilon (Balle & Wang 2018, Thm 8) by brentq
    assert rows["checkin"]["valid"] and rows["checkin"]["infinite"] == []
    assert rows["checkin"]["epsilon"] == pytest.approx(_gdp_epsilon(2.0, 1e-5), rel=1e-6)
    assert rows["balls_and_bins"]["valid"] and rows["balls_and_bins"]["epsilon"] > 0
    assert not rows["pld"]["valid"] and rows["pld"]["number_for"] == "poisson"


def _gdp_epsilon(mu, delta):
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps):
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta
    return brentq(excess, 0.0, 100.0, xtol=1e-13)


def test_version():
    from dpplugins import __version__
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"dpplugins {__version__}"


def test_every_option_has_help_and_aliases_are_documented():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help not in (None, "", argparse.SUPPRESS), (name, action.dest)
        text = " ".join(sub.format_help().split())
        if name != "shuffle":      # the shuffle model takes no training-run sampler
            assert "Aliases" in text and "'shuffle' = shuffled_epochs" in text
            assert "'checkin' = random_allocation" in text
        if "--json" in text:
            assert "strict JSON" in text and "null" in text


def test_sampler_aliases_give_the_same_numbers(capsys):
    out = {}
    for sampler in ("shuffle", "shuffled_epochs"):
        assert main(["epsilon", "--accountant", "shuffle", "--noise-multiplier", "1", *SMALL,
                     "--sampler", sampler, "--json"]) == 0
        out[sampler] = json.loads(capsys.readouterr().out, parse_constant=_reject)
    assert out["shuffle"] == {**out["shuffled_epochs"], "seconds": out["shuffle"]["seconds"]}
    assert out["shuffle"]["sampler"] == "shuffled_epochs"


#: one small training run per kind of event the command line can describe
RUNS = [
    [*POISSON],
    ["--sampler", "shuffled_epochs", *SMALL],
    ["--sampler", "shuffled_epochs", "--dataset-size", "200", "--batch-size", "1", "--epochs",
     "1", "--delta", "1e-5"],
    ["--sampler", "random_allocation", *ALLOCATION],
    ["--sampler", "random_checkin", "--dataset-size", "600", "--steps-per-epoch", "10",
     "--checkin-probability", "0.5", "--epochs", "1", "--delta", "1e-5"],
    ["--sampler", "sliding_window", "--dataset-size", "200", "--window", "150", "--epochs", "1",
     "--delta", "1e-5"],
    ["--sampler", "shuffled_epochs", "--dataset-size", "200", "--batch-size", "1", "--epochs",
     "1", "--delta", "1e-5", "--lipschitz", "1", "--diameter", "2", "--learning-rate", "0.5"],
]


def _run_for(name):
    """The first of RUNS whose event the accountant supports."""
    acc = create(name)
    for argv in RUNS:
        args = build_parser().parse_args(["epsilon", "--noise-multiplier", "2", *argv])
        if acc.supports(_config(args).event()):
            return argv
    return None


@pytest.mark.parametrize("name", available())
def test_every_accountant_is_reachable_from_epsilon(name, capsys):
    argv = _run_for(name)
    assert argv is not None, f"no command-line run describes an event {name!r} supports"
    assert main(["epsilon", "--accountant", name, "--noise-multiplier", "2", *argv]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"accountant {name} (") and "epsilon in [" in text
    assert main(["epsilon", "--accountant", name, "--noise-multiplier", "2", *argv,
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=_reject)
    assert data["valid"] and data["accountant"] == name


@pytest.mark.parametrize("name", list(report.REFERENCES))
def test_references_are_usable_by_name_in_epsilon(name, capsys):
    if not report._installed(report.REFERENCES[name].module):
        pytest.skip(f"{report.REFERENCES[name].module} not installed")
    assert main(["epsilon", "--accountant", name, "--noise-multiplier", "1", *POISSON]) == 0
    text = capsys.readouterr().out
    assert f"accountant {name} (" in text
    upper = float(text.splitlines()[1].split(",")[1].split("]")[0])
    pld = create("pld")
    pld.step(noise_multiplier=1.0, sample_rate=0.01, count=10)
    lower, certified = pld.get_epsilon_bounds(1e-5)
    assert 0.9 * lower <= upper <= 4 * certified   # RDP is loose for 10 steps


@pytest.mark.parametrize("name", ["shuffle", "pnsgd"])
def test_noise_reaches_protocol_accountants(name, capsys):
    argv = _run_for(name)
    assert main(["noise", "--accountant", name, "--target-epsilon", "4", *argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=_reject)
    args = build_parser().parse_args(["epsilon", "--noise-multiplier",
                                      repr(data["noise_multiplier"]), *argv])
    acc = create(name).compose(_config(args).event())
    assert acc.get_epsilon(1e-5) <= 4.0
