"""The ``dpplugins shuffle`` subcommand (dpplugins.cli_shuffle), called through run() with a
namespace from its own parser.  Independent check: exact shuffled binary randomized response
(the law of the number of reported ones, by convolving binomial pmfs from scipy, maximised over
every dataset) brackets the printed upper and lower bounds."""

from __future__ import annotations

import argparse
import json
import math
import re

import numpy as np
import pytest
from scipy import stats

from dpplugins import cli_shuffle
from dpplugins.amplification import shuffle_model as sm
from dpplugins.amplification import shuffle_model_families as fam
from dpplugins.errors import ParameterError


def parse(*argv):
    parser = argparse.ArgumentParser(prog="dpplugins")
    cli_shuffle.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["shuffle", *argv])


def run_json(*argv):
    lines = []
    assert cli_shuffle.run(parse(*argv, "--json"), out=lines.append) == 0
    return json.loads(lines[0])


def exact_binary_rr_delta(eps0, n, eps):
    """max over j (others holding 1) and both directions of the hockey-stick divergence of the
    number of reported ones."""
    a = math.exp(eps0) / (math.exp(eps0) + 1)
    best = 0.0
    for j in range(n):
        w = np.convolve(stats.binom.pmf(np.arange(j + 1), j, a),
                        stats.binom.pmf(np.arange(n - j), n - 1 - j, 1 - a))
        w = np.concatenate([[0.0], w, [0.0]])
        p0 = (1 - a) * w[:-1] + a * w[1:]
        p1 = a * w[:-1] + (1 - a) * w[1:]
        x = math.exp(eps)
        best = max(best, np.maximum(p0 - x * p1, 0).sum(), np.maximum(p1 - x * p0, 0).sum())
    return best


@pytest.mark.parametrize("n", [6, 40])
def test_binary_rr_rows_bracket_the_exact_value(n):
    eps0, delta = 2.0, 1e-3
    out = run_json("--eps0", str(eps0), "--n", str(n), "--delta", str(delta), "--randomizer", "rr")
    fmt21, family, lower = (row["epsilon"] for row in out["rows"][:3])
    assert [row["kind"] for row in out["rows"][:3]] == ["upper", "upper", "lower"]
    assert 0 <= lower <= family <= fmt21 <= eps0
    # every certified upper row (FMT23's stronger clone among them) holds for the exact value;
    # Wang et al.'s number is labelled as not certified
    uppers = [row for row in out["rows"] if row["kind"] == "upper"]
    assert {row["method"] for row in uppers} >= {"fmt21", "binary_rr_exact", "fmt23"}
    for row in uppers:
        assert exact_binary_rr_delta(eps0, n, row["epsilon"]) <= delta * (1 + 1e-9), row
    assert [row["method"] for row in out["rows"] if row["kind"] == "not certified"] == [
        "variation_ratio"]
    if lower > 0:
        assert exact_binary_rr_delta(eps0, n, lower * (1 - 1e-9)) >= delta * (1 - 1e-9)


@pytest.mark.parametrize("argv,family", [
    (["--randomizer", "oue", "--d", "32"], fam.unary_encoding(3.0, 32, optimized=True)),
    (["--randomizer", "sue", "--d", "32"], fam.unary_encoding(3.0, 32)),
    (["--randomizer", "subset", "--d", "12", "--k", "3"], fam.subset_selection(3.0, 12, 3)),
    (["--randomizer", "olh", "--g", "6"], fam.local_hashing(3.0, 6)),
    (["--randomizer", "laplace"], fam.laplace_bounded(3.0)),
])
def test_family_rows_are_the_module_bounds(argv, family):
    out = run_json("--eps0", "3", "--n", "20000", "--delta", "1e-6", *argv)
    fmt21, up, low = (row["epsilon"] for row in out["rows"][:3])
    bound = fam.epsilon(family, 20_000, 1e-6)
    assert up == bound.epsilon
    for row in out["rows"][3:]:   # the other candidates, then Wang et al.'s number
        if row["kind"] == "upper":
            assert row["epsilon"] == min(bound.candidates[row["method"]], 3.0) >= min(
                bound.candidates.values())
        else:
            assert row["kind"] == "not certified" and row["method"] == "variation_ratio"
    assert low == fam.lower_bound(family, 20_000, 1e-6).epsilon
    assert fmt21 == sm.epsilon(("general", 3.0), 20_000, 1e-6).candidates["fmt21"]
    assert low <= up <= fmt21
    assert out["infinite"] == [] and out["neighbouring"] == "replace_one"


def test_general_and_krr_text_output():
    lines = []
    cli_shuffle.run(parse("--eps0", "1", "--n", "5000", "--delta", "1e-6", "--randomizer",
                          "krr", "--k", "5"), out=lines.append)
    text = lines[0]
    assert "5-RR" in text and "lower" in text and "FMT21" in text
    out = run_json("--eps0", "1", "--n", "5000", "--delta", "1e-6")
    # general: FMT21 (row 0) above the stronger clone, the general randomizer's own bound
    assert out["rows"][1]["method"] == "fmt23"
    assert out["rows"][1]["epsilon"] < out["rows"][0]["epsilon"]
    assert out["rows"][0]["epsilon"] == sm.epsilon(("general", 1.0), 5000, 1e-6).candidates["fmt21"]
    assert out["rows"][2]["epsilon"] <= out["rows"][1]["epsilon"]
    approx = run_json("--eps0", "1", "--n", "5000", "--delta", "1e-6", "--delta0", "1e-9")
    assert approx["rows"][0]["method"] in ("balle2020", "none")


def test_strict_json_writes_infinity_as_null():
    report = {"eps0": 1.0, "n": 10, "delta": 1e-6, "delta0": 0.0, "randomizer": "general",
              "parameters": {}, "neighbouring": "replace_one",
              "rows": [{"bound": "x", "kind": "upper", "epsilon": math.inf, "method": "none"}]}
    out = json.loads(cli_shuffle.to_json(report))
    assert out["rows"][0]["epsilon"] is None and out["infinite"] == ["x"] and out["reason"]


def test_bad_input_names_the_option():
    with pytest.raises(ParameterError, match="k=None"):
        cli_shuffle.run(parse("--eps0", "1", "--n", "100", "--delta", "1e-6", "--randomizer",
                              "krr"), out=lambda text: None)
    with pytest.raises(ParameterError, match="d=None"):
        cli_shuffle.run(parse("--eps0", "1", "--n", "100", "--delta", "1e-6", "--randomizer",
                              "oue"), out=lambda text: None)
    with pytest.raises(ParameterError, match="delta0"):
        cli_shuffle.run(parse("--eps0", "1", "--n", "100", "--delta", "1e-6", "--randomizer",
                              "rr", "--delta0", "1e-9"), out=lambda text: None)
    with pytest.raises(ParameterError, match="n=1"):
        cli_shuffle.run(parse("--eps0", "1", "--n", "1", "--delta", "1e-6"),
                        out=lambda text: None)
    with pytest.raises(SystemExit):
        parse("--eps0", "nan", "--n", "100", "--delta", "1e-6")
    with pytest.raises(SystemExit):
        parse("--eps0", "1", "--n", "100", "--delta", "1e-6", "--randomizer", "gaussian")


@pytest.mark.parametrize("eps0", ["1e-11", "1e-9"])
def test_laplace_at_tiny_eps0_prints_every_row(eps0):
    """Laplace's beta = 1 - e^(-eps0/2) is below tanh(eps0/2), but p = e^eps0 is rounded, so the
    variation-ratio check of beta <= (p-1)/(p+1) (relative 1e-12) refused it at eps0 = 1e-9
    (p - 1 is off by 2e-7 relative) and the command exited 2.  The total variation is below
    delta, so every certified row is 0 (post-processing; see the families' tests)."""
    report = run_json("--eps0", eps0, "--n", "1000", "--delta", "1e-6", "--randomizer",
                      "laplace")
    rows = report["rows"]
    assert rows and all(row["epsilon"] == 0.0 for row in rows if row["kind"] == "lower")
    assert all(0.0 <= row["epsilon"] <= 2 * float(eps0) for row in rows if row["kind"] == "upper")


def exact_grouped_krr_epsilon(groups, k, delta):
    """Exact epsilon(delta) of shuffled k-RR with a local epsilon per user, by enumeration: the
    release is the histogram of the reports (the law of a shuffled multiset), computed by
    convolving every user's report law; the maximum over every dataset, every user who changes
    value and both directions of the hockey-stick divergence; epsilon by bisection."""
    import itertools

    eps_of = [eps for eps, users in groups for _ in range(users)]

    def law(values):
        hist = {(0,) * k: 1.0}
        for eps, x in zip(eps_of, values):
            z = math.exp(eps) + k - 1
            step = {}
            for h, p in hist.items():
                for y in range(k):
                    key = h[:y] + (h[y] + 1,) + h[y + 1:]
                    step[key] = step.get(key, 0.0) + p * (math.exp(eps) if y == x else 1.0) / z
            hist = step
        return hist

    pairs = []
    for values in itertools.product(range(k), repeat=len(eps_of)):
        for i in range(len(eps_of)):
            if values[i] == 0:          # by symmetry of the values, user i changes 0 -> 1
                other = values[:i] + (1,) + values[i + 1:]
                pairs.append((law(values), law(other)))

    def delta_of(eps):
        x = math.exp(eps)
        return max(sum(max(p.get(h, 0.0) - x * q.get(h, 0.0), 0.0) for h in set(p) | set(q))
                   for a, b in pairs for p, q in ((a, b), (b, a)))

    lo, hi = 0.0, max(eps for eps, _ in groups)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return lo, hi


@pytest.mark.parametrize("argv,groups,k", [
    (("--randomizer", "rr", "--groups", "0.5:4,2:3"), ((0.5, 4), (2.0, 3)), 2),
    (("--randomizer", "krr", "--k", "3", "--groups", "1:3,3:2"), ((1.0, 3), (3.0, 2)), 3),
])
def test_groups_rows_bracket_exact_enumeration(argv, groups, k):
    """--groups (users with their own local epsilons): the printed upper and lower bounds
    bracket the exact epsilon computed by enumerating every dataset (at delta = 0.1 the
    amplification is visible: exact 0.688 for the first case, 2.349 for the second)."""
    report = run_json("--delta", "0.1", *argv)
    rows = {row["kind"]: row["epsilon"] for row in report["rows"][1:]}
    low, high = exact_grouped_krr_epsilon(groups, k, 0.1)
    assert high < 0.9 * report["eps0"]
    assert rows["lower"] <= high + 1e-9 and low - 1e-9 <= rows["upper"]
    assert report["n"] == sum(n for _, n in groups) and report["eps0"] == max(
        eps for eps, _ in groups)
    assert report["rows"][0]["epsilon"] >= low - 1e-9      # FMT21 is an upper bound too
    text = []
    cli_shuffle.run(parse("--delta", "0.1", *argv), out=text.append)
    assert "groups=" in text[0] and "per group" in text[0]


@pytest.mark.parametrize("argv, option", [
    (("--randomizer", "rr", "--d", "9"), "--d=9"),
    (("--randomizer", "rr", "--k", "3"), "--k=3"),
    (("--randomizer", "krr", "--k", "3", "--g", "4"), "--g=4"),
    (("--randomizer", "oue", "--d", "8", "--k", "2"), "--k=2"),
    (("--randomizer", "olh", "--g", "4", "--d", "8"), "--d=8"),
    (("--randomizer", "laplace", "--g", "4"), "--g=4"),
    (("--randomizer", "general", "--k", "4"), "--k=4"),
    (("--randomizer", "sue", "--d", "8", "--delta0", "1e-9"), "--delta0=1e-09"),
    (("--groups", "1:50,4:50", "--randomizer", "rr", "--d", "9"), "--d=9"),
])
def test_an_option_the_randomizer_does_not_use_is_refused(argv, option):
    """``--randomizer rr --d 9`` was answered as if ``--d`` had not been given; every option
    a randomizer does not use is now refused by name, with the randomizers that use it."""
    base = ("--delta", "1e-6") + (() if "--groups" in argv else ("--eps0", "1", "--n", "100"))
    with pytest.raises(ParameterError, match=re.escape(option) + ".*it is used by"):
        cli_shuffle.run(parse(*base, *argv), out=lambda text: None)


def test_the_options_a_randomizer_uses_are_accepted():
    for argv in (("--randomizer", "krr", "--k", "3"), ("--randomizer", "subset", "--d", "8",
                                                       "--k", "2"),
                 ("--randomizer", "olh", "--g", "4"), ("--randomizer", "general", "--delta0",
                                                        "1e-9"),
                 ("--randomizer", "rr", "--delta0", "0")):
        text = []
        cli_shuffle.run(parse("--delta", "1e-6", "--eps0", "1", "--n", "100", *argv),
                        out=text.append)
        assert text


def test_groups_bad_input_names_the_option():
    base = ("--delta", "1e-6")
    for argv, match in [
        (("--groups", "1:50,4:50", "--randomizer", "rr", "--eps0", "1"), "eps0=1.0"),
        (("--groups", "1:50,4:50", "--randomizer", "rr", "--n", "100"), "n=100"),
        (("--groups", "1:50,4:50"), "randomizer='general'"),
        (("--groups", "1:50", "--randomizer", "oue", "--d", "8"), "randomizer='oue'"),
        (("--groups", "1:50", "--randomizer", "krr"), "k=None"),
        (("--groups", "1:1", "--randomizer", "rr"), "2 to 1e"),
        (("--groups", "1:50", "--randomizer", "rr", "--delta0", "1e-9"), "delta0"),
        (("--randomizer", "rr"), "eps0=None"),
    ]:
        with pytest.raises(ParameterError, match=re.escape(match)):
            cli_shuffle.run(parse(*base, *argv), out=lambda text: None)
    for bad in ("1-50", "1:x", "1:50,", "nan:50"):
        with pytest.raises(SystemExit):
            parse(*base, "--groups", bad)


def test_plot_draws_the_reports_and_they_bracket_exact_binary_rr(tmp_path, monkeypatch):
    """``--plot``: one report per number of users of ``plot_users`` (the given n among them),
    drawn as they are; each plotted upper bound holds and each lower bound is violated for the
    exact shuffled binary RR at that n (worst dataset, both directions)."""
    pytest.importorskip("matplotlib")
    from dpplugins import plots
    drawn = []
    real = plots.plot_shuffle_against_users

    def spy(reports, path, **kwargs):
        drawn.extend(reports)
        return real(reports, path, **kwargs)
    monkeypatch.setattr(plots, "plot_shuffle_against_users", spy)
    eps0, delta, path = 2.0, 1e-3, tmp_path / "shuffle.png"
    lines = []
    assert cli_shuffle.run(parse("--eps0", str(eps0), "--n", "60", "--delta", str(delta),
                                 "--randomizer", "rr", "--plot", str(path), "--points", "3"),
                           out=lines.append) == 0
    assert lines[-1] == f"wrote {path}" and path.stat().st_size > 0
    assert [r["n"] for r in drawn] == cli_shuffle.plot_users(60, 3) == [2, 11, 60]
    for report in drawn:
        n = report["n"]
        fmt21, family, lower = (row["epsilon"] for row in report["rows"][:3])
        assert exact_binary_rr_delta(eps0, n, family) <= delta * (1 + 1e-9), n
        assert exact_binary_rr_delta(eps0, n, fmt21) <= delta * (1 + 1e-9), n
        if lower > 0:
            assert exact_binary_rr_delta(eps0, n, lower * (1 - 1e-9)) >= delta * (1 - 1e-9), n


def test_plot_writes_an_image_of_the_figure_size(tmp_path):
    pytest.importorskip("matplotlib")
    import subprocess
    import sys

    import matplotlib.image
    path = tmp_path / "oue.png"
    result = subprocess.run([sys.executable, "-m", "dpplugins", "shuffle", "--eps0", "4", "--n",
                             "20000", "--delta", "1e-6", "--randomizer", "oue", "--d", "16",
                             "--plot", str(path), "--points", "3", "--json"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["n"] == 20000          # --json output stays valid JSON
    assert matplotlib.image.imread(path).shape[:2] == (400, 640)   # 6.4 x 4 in at 100 dpi


@pytest.mark.parametrize("extra,match", [
    (["--plot", "{tmp}/no/such/dir/x.png"], "plot=.*existing directory"),
    (["--plot", "{tmp}/x.txt"], "plot=.*image format"),
    (["--plot", "{tmp}/x.png", "--points", "1"], "points=1"),
    (["--plot", "{tmp}/x.png", "--points", "51"], "points=51"),
])
def test_plot_options_are_checked_before_any_bound(tmp_path, monkeypatch, extra, match):
    def fail(args):
        raise AssertionError("a bound was computed before the options were checked")
    monkeypatch.setattr(cli_shuffle, "bounds", fail)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    with pytest.raises(ParameterError, match=match):
        cli_shuffle.run(parse("--eps0", "1", "--n", "1000", "--delta", "1e-6", *argv),
                        out=lambda text: None)


def test_plot_refuses_groups_and_mixed_reports(tmp_path):
    from dpplugins import plots
    with pytest.raises(ParameterError, match="plot=.*omitted with --groups"):
        cli_shuffle.run(parse("--groups", "1:100,2:100", "--randomizer", "rr", "--delta", "1e-6",
                              "--plot", str(tmp_path / "x.png")), out=lambda text: None)
    a = cli_shuffle.bounds(parse("--eps0", "1", "--n", "100", "--delta", "1e-6"))
    b = cli_shuffle.bounds(parse("--eps0", "2", "--n", "200", "--delta", "1e-6"))
    with pytest.raises(ParameterError, match="reports"):
        plots.plot_shuffle_against_users([a, b], tmp_path / "x.png")


def test_plot_without_matplotlib_fails_before_any_bound(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib -> ImportError

    def fail(args):
        raise AssertionError("a bound was computed before matplotlib was checked")
    monkeypatch.setattr(cli_shuffle, "bounds", fail)
    with pytest.raises(ImportError, match=r"dpplugins\[plot\]"):
        cli_shuffle.run(parse("--eps0", "1", "--n", "1000", "--delta", "1e-6", "--plot",
                              str(tmp_path / "x.png")), out=lambda text: None)


def test_eps0_zero_answers_zero_and_a_family_names_its_own_range():
    """eps0 = 0 (reports independent of the data: epsilon 0 at every delta, the exact value)
    raised "p=1.0 is invalid" from the variation-ratio row; and a family's eps0 was first
    checked against FMT21's range "0 or in [1e-12, 300]", which the family then narrowed to
    [1e-12, 50] (found by a hostile sweep of the command line)."""
    for randomizer in ("general", "rr"):
        report = run_json("--eps0", "0", "--n", "100000", "--delta", "1e-6", "--randomizer",
                          randomizer)
        assert report["rows"] and all(row["epsilon"] == 0 for row in report["rows"])
    for eps0 in ("0", "1e-13", "300"):
        with pytest.raises(ParameterError, match=re.escape("must be in [1e-12, 50]")):
            cli_shuffle.run(parse("--eps0", eps0, "--n", "1000", "--delta", "1e-6",
                                  "--randomizer", "oue", "--d", "64"), out=lambda line: None)


@pytest.mark.parametrize("argv,start", [
    (("--eps0", "-1", "--n", "1000"), "--eps0=-1.0 is invalid"),
    (("--eps0", "1", "--n", "1"), "--n=1 is invalid"),
    (("--eps0", "1", "--n", "1000", "--delta0", "2"), "--delta0=2.0 is invalid"),
    (("--eps0", "1", "--n", "1000", "--randomizer", "oue"), "--d=None is invalid"),
    (("--eps0", "1", "--n", "1000", "--randomizer", "krr", "--k", "1"), "--k=1 is invalid"),
    (("--eps0", "90", "--n", "1000", "--randomizer", "laplace"), "--eps0=90.0 is invalid"),
])
def test_errors_name_the_option(argv, start):
    """From a hostile sweep: the errors named the library's parameters (``eps0=-1.0 is
    invalid``), not the options that set them (``--eps0``), as the other commands do."""
    with pytest.raises(ParameterError) as raised:
        cli_shuffle.run(parse(*argv, "--delta", "1e-6"), out=lambda text: None)
    assert str(raised.value).startswith(start)


def test_a_lower_bound_above_the_upper_one_is_refused_not_hidden(monkeypatch, capsys):
    # the table printed min(lower, upper) as the lower bound: a crossing (k-RR with k = 2^53
    # before its blanket kept 1 - gamma: lower 0.8837 above upper 0.6455) showed as the band
    # [0.645523, 0.645524]; it now fails like every other place that pairs two bounds
    from dpplugins import cli

    real = sm.lower_bound

    def crossing(spec, n, delta):
        bound = real(spec, n, delta)
        return bound.__class__(**{**bound.__dict__, "epsilon": 2 * bound.epsilon})

    monkeypatch.setattr(sm, "lower_bound", crossing)
    status = cli.main(["shuffle", "--eps0", "1", "--n", "1000", "--delta", "1e-6",
                       "--randomizer", "krr", "--k", "4"])
    err = capsys.readouterr().err
    assert status != 0 and "above the certified upper bound" in err
