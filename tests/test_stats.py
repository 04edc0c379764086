"""stats.py checked against independent implementations (statsmodels, scipy, numpy) and by
simulation. Expected figures never come from re-typing the formula under test."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps
from statsmodels.regression.linear_model import OLS
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from pytest_modal_eval.stats.format import describe_detectable
from pytest_modal_eval.stats.summary import (
    TEST_MCNEMAR,
    TEST_PAIRED_T,
    ExampleMeans,
    ExampleRewards,
    PairedComparison,
    compare_paired,
    natural_key,
    summarize,
    summarize_within,
)

Rng = np.random.Generator


def _rollouts(rng: Rng, n: int, r: int, *, binary: bool) -> dict[str, list[float]]:
    """Clustered rewards: each example has its own difficulty shared by its rollouts."""
    p = rng.beta(0.6, 0.6, size=n)
    if binary:
        draws = (rng.random((n, r)) < p[:, None]).astype(float)
    else:
        draws = np.clip(p[:, None] + rng.normal(0, 0.2, (n, r)), 0, 1)
    return {str(i): [float(x) for x in row] for i, row in enumerate(draws)}


def _means(per_example: dict[str, list[float]]) -> np.ndarray:
    return np.array([np.mean(v) for v in per_example.values()])


# --- summarize --------------------------------------------------------------------------------


def test_summarize_fixed_data_matches_statsmodels() -> None:
    data = {"1": [1.0, 0.0, 1.0], "2": [0.0, 0.0, 0.0], "3": [1.0, 1.0, 1.0], "4": [1.0, 0.0, 0.0]}
    s = summarize(data)
    ref = DescrStatsW(_means(data))
    assert s.mean == pytest.approx(0.5)
    assert s.stderr == pytest.approx(ref.std_mean)
    assert 0.0 <= s.ci_low < s.mean < s.ci_high <= 1.0
    assert (s.n_examples, s.n_rollouts, s.rollouts_per_example) == (4, 12, 3)


def test_two_rollouts_of_pass_fail_rewards_stay_within_0_and_1() -> None:
    # One solved rollout among 20: a t interval reached below 0 here ([-0.055, 0.155]).
    data = {str(i): [1.0 if i == 0 else 0.0, 0.0] for i in range(10)}
    s = summarize(data)
    assert 0.0 <= s.ci_low < s.mean < s.ci_high <= 1.0
    assert s.interval == "betting" and s.reward_range == (0.0, 1.0)


def test_rewards_of_unknown_range_get_a_t_interval_within_the_observed_rewards() -> None:
    data = {str(i): [float(i), float(i) + 0.5] for i in range(3)} | {"3": [9.0, 9.0]}
    s = summarize(data)
    low, high = DescrStatsW(_means(data)).tconfint_mean(alpha=0.05)
    assert low < 0.0  # the plain t interval leaves the rewards seen
    assert (s.ci_low, s.ci_high) == pytest.approx((0.0, min(high, 9.0)))
    assert s.interval == "t-clipped" and s.reward_range == (0.0, 9.0)


@pytest.mark.parametrize("seed", range(12))
def test_summarize_random_matches_cluster_robust_ols(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, r = int(rng.integers(2, 300)), int(rng.integers(1, 9))
    confidence = float(rng.choice([0.8, 0.9, 0.95, 0.99]))
    data = _rollouts(rng, n, r, binary=bool(seed % 2))
    s = summarize(data, confidence)

    # Intercept-only OLS with CR1 standard errors clustered by example: for a balanced design its
    # estimate is the mean of example means and its SE is the clustered SE we claim to compute.
    y = np.concatenate([np.asarray(v) for v in data.values()])
    groups = np.repeat(np.arange(n), r)
    fit = OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert s.mean == pytest.approx(fit.params[0], rel=1e-12, abs=1e-12)
    assert s.stderr == pytest.approx(fit.bse[0], rel=1e-9)

    if r == 1 and seed % 2:
        # Single pass/fail rollouts: the Wilson score interval of the proportion.
        successes = int(sum(v[0] for v in data.values()))
        expected = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
        assert s.interval == "wilson"
        assert (s.ci_low, s.ci_high) == pytest.approx(expected)
    else:
        assert s.interval == "betting"
        assert 0.0 <= s.ci_low <= s.mean <= s.ci_high <= 1.0
    assert (s.n_examples, s.n_rollouts, s.rollouts_per_example) == (n, n * r, r)


@pytest.mark.parametrize(("solved", "n"), [(200, 200), (0, 50), (1, 1), (37, 40)])
def test_binary_single_rollout_interval_is_wilson_and_never_collapses(solved: int, n: int) -> None:
    data = {str(i): [1.0 if i < solved else 0.0] for i in range(n)}
    s = summarize(data)
    low, high = proportion_confint(solved, n, alpha=0.05, method="wilson")
    assert (s.ci_low, s.ci_high) == pytest.approx((low, high))
    assert s.ci_low < s.ci_high  # all solved still leaves room below 1.0


def test_summarize_weighs_examples_equally_with_unbalanced_rollouts() -> None:
    data = {"a": [1.0], "b": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]}
    s = summarize(data)
    assert s.mean == pytest.approx(np.mean([1.0, 1 / 8]))  # not the pooled 2/9
    assert s.stderr == pytest.approx(sps.sem([1.0, 1 / 8]))
    assert (s.n_rollouts, s.rollouts_per_example) == (9, 8)


def test_clustered_stderr_tracks_true_sampling_error_and_iid_understates_it() -> None:
    # Replicate an eval many times: the spread of its mean across replications is the stderr a
    # single run should report. Rollouts of one example are correlated (shared difficulty).
    rng = np.random.default_rng(7)
    n, r, reps = 60, 8, 300
    difficulty = rng.beta(0.5, 0.5, size=n)
    means, clustered, iid = [], [], []
    for _ in range(reps):
        p = rng.choice(difficulty, size=n)  # a fresh sample of examples each replication
        draws = (rng.random((n, r)) < p[:, None]).astype(float)
        s = summarize({str(i): list(row) for i, row in enumerate(draws)})
        means.append(s.mean)
        clustered.append(s.stderr)
        iid.append(sps.sem(draws.ravel()))
    true_sd = float(np.std(means, ddof=1))
    assert np.mean(clustered) == pytest.approx(true_sd, rel=0.15)
    assert np.mean(iid) < 0.6 * true_sd


@pytest.mark.parametrize(("reward", "n", "r"), [(0.3037, 40, 2), (0.999, 5, 1), (0.5013, 200, 4)])
def test_partial_credit_examples_that_agree_never_give_a_zero_width_interval(
    reward: float, n: int, r: int
) -> None:
    s = summarize({str(i): [reward] * r for i in range(n)})
    assert s.interval == "betting"
    assert 0.0 <= s.ci_low < reward < s.ci_high <= 1.0
    # n examples that agree cannot rule out that examples not drawn score anywhere in [0, 1].
    assert s.ci_high - s.ci_low > 0.02
    # An example that differs by a hair changes the interval by about as much.
    nudged = summarize({str(i): [reward] * r for i in range(n - 1)} | {"x": [reward - 1e-4] * r})
    assert (nudged.ci_low, nudged.ci_high) == pytest.approx((s.ci_low, s.ci_high), abs=2e-3)


def test_summarize_zero_examples_is_an_error() -> None:
    with pytest.raises(ValueError, match="zero examples"):
        summarize({})


def test_summarize_example_without_rollouts_is_an_error() -> None:
    with pytest.raises(ValueError, match="without any rollout"):
        summarize({"1": [1.0], "2": []})


@pytest.mark.parametrize(
    "rewards", [[math.nan], [math.inf], [math.inf, -math.inf], [1e308, 1e308]], ids=str
)
def test_summarize_non_finite_reward_is_an_error(rewards: list[float]) -> None:
    with pytest.raises(ValueError, match="NaN or infinite"):
        summarize({"1": [1.0], "2": rewards})


def test_summarize_single_example_has_undefined_spread_as_json_null() -> None:
    s = summarize({"only": [1.0, 0.0]})
    assert s.mean == 0.5
    assert math.isnan(s.stderr)
    # One example says nothing of how examples differ: the whole range.
    assert (s.ci_low, s.ci_high) == (0.0, 1.0)
    d = s.to_dict()
    assert d["stderr"] is None and d["reward_range"] == [0.0, 1.0]
    json.dumps(d, allow_nan=False)
    unbounded = summarize({"only": [3.0, 5.0]}).to_dict()
    assert unbounded["ci_low"] is None and unbounded["ci_high"] is None


def test_summarize_all_equal_rewards_has_zero_stderr_but_not_a_zero_width_interval() -> None:
    s = summarize({str(i): [0.7, 0.7] for i in range(10)})
    assert s.stderr == 0.0
    assert 0.4 < s.ci_low < 0.7 < s.ci_high < 0.9
    assert s.stderr == pytest.approx(sps.sem(np.full(10, 0.7)))


def test_summarize_bounds_declare_the_range_the_interval_lies_within() -> None:
    data = {str(i): [4.1, 5.0] for i in range(19)} | {"19": [0.0, 0.0]}
    assert summarize(data).interval == "t-clipped"
    declared = summarize(data, bounds=(0.0, 5.0))
    rescaled = summarize({k: [x / 5 for x in v] for k, v in data.items()})
    assert declared.interval == "betting" and declared.reward_range == (0.0, 5.0)
    assert (declared.ci_low, declared.ci_high) == pytest.approx(
        (5 * rescaled.ci_low, 5 * rescaled.ci_high)
    )
    with pytest.raises(ValueError, match="bounds"):
        summarize(data, bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="outside bounds"):
        summarize(data, bounds=(0.0, 1.0))


def test_summarize_within_a_declared_range() -> None:
    """Payoffs in a declared [-2, 2]: the betting interval within it; every reward at one
    end of it: pass/fail; a reward outside it: the range it does not hold is not used."""
    ids = np.arange(30)
    payoffs = ExampleRewards(ids, np.linspace(-1.5, 1.8, 60).reshape(30, 2))
    s = summarize_within(payoffs, [-2.0, 2.0])
    assert s.interval == "betting" and s.reward_range == (-2.0, 2.0)
    assert -2.0 <= s.ci_low < s.mean < s.ci_high <= 2.0
    assert summarize_within(payoffs, None).interval == "t-clipped"
    ends = ExampleRewards(ids, np.where(ids % 3, 2.0, -2.0)[:, None])
    assert summarize_within(ends, (-2.0, 2.0)).interval == "wilson"
    assert summarize_within(payoffs, (-1.0, 1.0)).interval == "t-clipped"


def test_summarize_rejects_bad_confidence() -> None:
    with pytest.raises(ValueError, match="confidence"):
        summarize({"1": [1.0]}, confidence=95)


# --- compare_paired: McNemar ------------------------------------------------------------------


def _binary_pair(b: int, c: int, both: int, neither: int) -> tuple[dict[str, float], ...]:
    """b solved->missed, c missed->solved, plus concordant pairs; ids 0.. in that order."""
    cells = [(1.0, 0.0)] * b + [(0.0, 1.0)] * c + [(1.0, 1.0)] * both + [(0.0, 0.0)] * neither
    base = {str(i): x for i, (x, _) in enumerate(cells)}
    run = {str(i): y for i, (_, y) in enumerate(cells)}
    return base, run


def _statsmodels_one_sided(b: int, c: int, both: int, neither: int) -> float:
    # statsmodels' exact McNemar is two-sided: 2 * P(X <= min(b, c)). With b > c the one-sided
    # tail for "run worse", P(X >= b), is exactly half of it by the symmetry of Binomial(n, 1/2).
    assert b > c
    return float(mcnemar([[both, b], [c, neither]], exact=True).pvalue) / 2


def test_mcnemar_fixed_table_matches_statsmodels() -> None:
    base, run = _binary_pair(b=21, c=8, both=150, neither=41)  # n = 220
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert cmp.test == TEST_MCNEMAR
    assert cmp.n_shared == 220
    assert cmp.p_value == pytest.approx(_statsmodels_one_sided(21, 8, 150, 41), rel=1e-10)
    assert cmp.p_value < 0.05 and cmp.regressed
    assert cmp.diff == pytest.approx((8 - 21) / 220)
    assert cmp.baseline_mean == pytest.approx(171 / 220)
    assert cmp.run_mean == pytest.approx(158 / 220)
    assert cmp.solved_to_missed == [str(i) for i in range(21)]
    assert cmp.missed_to_solved == [str(i) for i in range(21, 29)]
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx(_mcnemar_ci(21, 8, 220), abs=1e-7)
    assert cmp.confidence == 0.90  # 1 - 2 alpha: its upper end is the test's one-sided bound


def _mcnemar_ci(down: int, up: int, n: int, confidence: float = 0.90) -> tuple[float, float]:
    """The interval shown with an exact McNemar test: Tango's, widened to hold the inversion
    of the exact test (the Clopper-Pearson interval of the share of discordant pairs going
    down, scaled to the difference), at ``confidence``."""
    tango = _tango(down, up, n, confidence)
    if down + up == 0:
        return tango
    share = sps.binomtest(down, down + up).proportion_ci(confidence, method="exact")
    scale = (down + up) / n
    exact = scale * (1 - 2 * share.high), scale * (1 - 2 * share.low)
    return min(tango[0], exact[0]), max(tango[1], exact[1])


def _tango(down: int, up: int, n: int, confidence: float = 0.90) -> tuple[float, float]:
    """Tango's score interval of (up - down) / n by brute force: the restricted maximum
    likelihood of P(down) found numerically, each end by root finding."""
    z2 = sps.norm.ppf(0.5 + confidence / 2) ** 2
    same = n - down - up

    def excess(delta: float) -> float:
        def minus_loglik(q: float) -> float:
            terms = (down, q), (up, q + delta), (same, 1 - 2 * q - delta)
            return -sum(count * math.log(p) for count, p in terms if count)

        lowest, highest = max(0.0, -delta), (1 - delta) / 2
        if highest - lowest < 1e-12:
            q = lowest
        else:
            q = optimize.minimize_scalar(
                minus_loglik,
                bounds=(lowest + 1e-13, highest - 1e-13),
                method="bounded",
                options={"xatol": 1e-13},
            ).x
        var = n * (2 * q + delta * (1 - delta))
        return float((up - down - n * delta) ** 2 - z2 * var)

    estimate = (up - down) / n
    ends = []
    for edge in (-1.0, 1.0):
        if excess(edge) <= 1e-9:
            ends.append(edge)
        else:
            start = estimate + edge * 1e-9  # inside, also when the estimate is an end
            ends.append(optimize.brentq(excess, start, edge * (1 - 1e-12), xtol=1e-12))
    return ends[0], ends[1]


@pytest.mark.parametrize(
    ("b", "c", "both", "neither"),
    [(10, 0, 0, 0), (5, 0, 1, 0), (0, 0, 5, 5), (3, 3, 10, 4), (0, 7, 2, 1), (1, 0, 0, 0)],
)
def test_mcnemar_interval_holds_tangos_and_the_exact_tests_within_minus_1_and_1(
    b: int, c: int, both: int, neither: int
) -> None:
    base, run = _binary_pair(b, c, both, neither)
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    n = b + c + both + neither
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx(_mcnemar_ci(b, c, n), abs=1e-6)
    assert -1.0 <= cmp.diff_ci_low <= cmp.diff <= cmp.diff_ci_high <= 1.0
    assert cmp.diff_ci_high - cmp.diff_ci_low > 0.2  # never zero width, even when all flipped


@pytest.mark.parametrize("seed", range(20))
def test_mcnemar_random_tables_match_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    b, c, both, neither = (int(x) for x in rng.integers(0, 40, size=4))
    base, run = _binary_pair(b, c, both, neither)
    if not base:
        return
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    if b > c:
        assert cmp.p_value == pytest.approx(_statsmodels_one_sided(b, c, both, neither), rel=1e-9)
    else:
        assert cmp.p_value >= 0.5  # no evidence at all that the run is worse
        assert not cmp.regressed
    assert len(cmp.solved_to_missed) == b and len(cmp.missed_to_solved) == c


def test_mcnemar_no_discordant_pairs() -> None:
    base, run = _binary_pair(b=0, c=0, both=5, neither=5)
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert (cmp.p_value, cmp.diff) == (1.0, 0.0)
    # Tango's interval with no flip among 10: Wilson's upper end for 0 of 10 on either side
    # (at 1 - 2 alpha = 90%).
    wilson = proportion_confint(0, 10, alpha=0.10, method="wilson")[1]
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx((-wilson, wilson))
    assert not cmp.regressed


# --- compare_paired: paired t -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_paired_t_random_matches_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(3, 400))
    base_p = rng.beta(2, 2, size=n)
    run_p = np.clip(base_p + rng.normal(-0.03, 0.1, size=n), 0, 1)
    base = {str(i): float(x) for i, x in enumerate(rng.binomial(5, base_p) / 5)}
    run = {str(i): float(x) for i, x in enumerate(rng.binomial(5, run_p) / 5)}
    cmp = compare_paired(base, run, baseline_binary_single=False, run_binary_single=False)

    d = DescrStatsW(np.array([run[k] - base[k] for k in base]))
    assert cmp.test == TEST_PAIRED_T
    assert cmp.p_value == pytest.approx(d.ttest_mean(0.0, alternative="smaller")[1], rel=1e-9)
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx(d.tconfint_mean(alpha=0.10))
    # One-sided test at alpha, two-sided interval at 1 - 2 alpha: they agree.
    assert (cmp.p_value < 0.05) == (cmp.diff_ci_high < 0)
    assert cmp.diff == pytest.approx(d.mean)
    assert cmp.regressed == (cmp.p_value < 0.05 and cmp.diff < 0)


def test_non_binary_or_multi_rollout_side_picks_paired_t() -> None:
    base, run = _binary_pair(b=10, c=2, both=20, neither=5)
    for flags in ((True, False), (False, True), (False, False)):
        cmp = compare_paired(base, run, baseline_binary_single=flags[0], run_binary_single=flags[1])
        assert cmp.test == TEST_PAIRED_T
    graded = {"1": 0.25, "2": 0.5, "3": 1.0}
    cmp = compare_paired(graded, graded, baseline_binary_single=False, run_binary_single=False)
    assert cmp.test == TEST_PAIRED_T


def test_binary_flag_with_graded_rewards_is_an_error() -> None:
    with pytest.raises(ValueError, match="run_binary_single=True"):
        compare_paired({"1": 1.0}, {"1": 0.5}, baseline_binary_single=True, run_binary_single=True)


def _uniform_shift_expected(d: float, n: int, w: float) -> tuple[float, float, float]:
    """p and interval for n differences all equal to d within [-w, w], from the binomial and
    Clopper-Pearson distributions rather than the closed forms the code uses."""
    # Clopper-Pearson upper end for 0 of n at 1 - 2 alpha: the beta(1, n) quantile at 1 - alpha.
    unseen = float(sps.beta.ppf(0.95, 1, n))
    assert unseen == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-12)
    assert unseen == pytest.approx(proportion_confint(0, n, alpha=0.10, method="beta")[1])
    # P(no example of n in a share pi0 = -d / (w - d) that would lift the mean to 0).
    p = float(sps.binom.pmf(0, n, -d / (w - d))) if d < 0 else 1.0
    return p, max(d - unseen * (d + w), -w), min(d + unseen * (w - d), w)


def test_identical_runs_have_no_evidence_of_a_drop() -> None:
    same = {str(i): 0.4 for i in range(30)}
    cmp = compare_paired(same, same, baseline_binary_single=False, run_binary_single=False)
    assert cmp.diff == 0.0 and cmp.p_value == 1.0 and not cmp.regressed
    # No difference seen among 30: up to the Clopper-Pearson share of examples may differ
    # unseen, by up to the whole range either way.
    unseen = float(sps.beta.ppf(0.95, 1, 30))
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx((-unseen, unseen), rel=1e-12)
    assert cmp.diff_ci_low < 0.0 < cmp.diff_ci_high


@pytest.mark.parametrize(
    ("before", "after", "n"),
    [(0.9, 0.8, 10), (0.9, 0.8, 100), (1.0, 0.0, 10), (1.0, 0.0, 3), (0.2, 0.7, 20), (0.0, 1.0, 5)],
)
def test_the_same_difference_on_every_example_gets_the_exact_binomial_test(
    before: float, after: float, n: int
) -> None:
    base = {str(i): before for i in range(n)}
    run = {str(i): after for i in range(n)}
    cmp = compare_paired(base, run, baseline_binary_single=False, run_binary_single=False)
    d = after - before
    p, low, high = _uniform_shift_expected(d, n, 1.0)
    assert cmp.p_value == pytest.approx(p, rel=1e-9)
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx((low, high), rel=1e-9)
    assert -1.0 <= cmp.diff_ci_low <= cmp.diff <= cmp.diff_ci_high <= 1.0
    assert cmp.diff_ci_low < cmp.diff_ci_high
    assert cmp.regressed == (cmp.p_value < 0.05)
    # The interval (two-sided at 1 - 2 alpha) leaves out 0 exactly when the one-sided p is
    # below alpha: verdict and interval agree.
    assert (cmp.diff_ci_high < 0.0) == (cmp.p_value < 0.05)


def test_equal_drops_of_a_tenth_regress_at_100_examples_not_at_10() -> None:
    def drop(n: int) -> PairedComparison:
        return compare_paired(
            {str(i): 0.9 for i in range(n)},
            {str(i): 0.8 for i in range(n)},
            baseline_binary_single=False,
            run_binary_single=False,
        )

    ten, hundred = drop(10), drop(100)
    assert ten.p_value == pytest.approx((1 - 0.1 / 1.1) ** 10) and not ten.regressed
    assert hundred.p_value == pytest.approx((1 - 0.1 / 1.1) ** 100) and hundred.regressed
    assert hundred.p_value < 1e-4
    # The smallest uniform drop the exact test calls significant at alpha 0.05.
    for c in (ten, hundred):
        assert c.detectable_drop == pytest.approx(0.05 ** (-1 / c.n_shared) - 1)
        assert (1 / (1 + c.detectable_drop)) ** c.n_shared == pytest.approx(0.05)
    assert hundred.detectable_drop < 0.1 < ten.detectable_drop


def test_runs_of_one_equal_score_outside_0_1_get_a_range_to_compare_within() -> None:
    same = {str(i): 3.0 for i in range(20)}
    cmp = compare_paired(same, same, baseline_binary_single=False, run_binary_single=False)
    assert cmp.p_value == 1.0 and not cmp.regressed
    unseen = float(sps.beta.ppf(0.95, 1, 20))
    # The range's length is taken as the scores' magnitude, 3: never 0.
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx((-3 * unseen, 3 * unseen))
    assert cmp.detectable_drop == pytest.approx(3 * (0.05 ** (-1 / 20) - 1))
    assert "no drop within the reward range" not in describe_detectable(cmp)
    negative = {str(i): -0.5 for i in range(20)}
    cmp = compare_paired(negative, negative, baseline_binary_single=False, run_binary_single=False)
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx((-unseen, unseen))


@pytest.mark.parametrize("bounds", [None, (0.0, 1.0), (0.0, 10.0)])
def test_paired_t_interval_stays_within_the_range_of_differences(
    bounds: tuple[float, float] | None,
) -> None:
    scale = 1.0 if bounds is None else bounds[1]
    base = {str(i): scale * x for i, x in enumerate([1.0, 1.0, 0.5, 1.0])}
    run = {str(i): scale * x for i, x in enumerate([0.0, 1.0, 0.0, 0.0])}
    cmp = compare_paired(
        base, run, baseline_binary_single=False, run_binary_single=False, bounds=bounds
    )
    plain = DescrStatsW(np.array([run[k] - base[k] for k in base])).tconfint_mean(alpha=0.10)
    assert plain[0] < -scale  # the t interval alone leaves the possible range
    assert (cmp.diff_ci_low, cmp.diff_ci_high) == pytest.approx((-scale, plain[1]))
    # No drop beyond the range is stated as undetectable.
    assert math.isnan(cmp.detectable_drop) or cmp.detectable_drop <= scale


def test_compare_rewards_outside_the_bounds_given_are_an_error() -> None:
    base = {str(i): 3.0 for i in range(5)}
    run = {str(i): 0.0 for i in range(5)}
    with pytest.raises(ValueError, match="outside bounds"):
        compare_paired(
            base, run, baseline_binary_single=False, run_binary_single=False, bounds=(0.0, 1.0)
        )
    with pytest.raises(ValueError, match="bounds"):
        compare_paired(
            base, run, baseline_binary_single=False, run_binary_single=False, bounds=(1.0, 0.0)
        )


def test_single_shared_example_is_undefined_and_not_a_regression() -> None:
    cmp = compare_paired(
        {"1": 0.9, "2": 0.1}, {"1": 0.2}, baseline_binary_single=False, run_binary_single=False
    )
    assert cmp.n_shared == 1 and math.isnan(cmp.p_value) and not cmp.regressed
    assert (cmp.only_in_baseline, cmp.only_in_run) == (1, 0)
    assert cmp.solved_to_missed == ["1"]
    d = cmp.to_dict()
    assert d["p_value"] is None and d["diff_ci_low"] is None
    json.dumps(d, allow_nan=False)


def test_no_shared_ids_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="share no example id"):
        compare_paired({"a": 1.0}, {"b": 1.0}, baseline_binary_single=True, run_binary_single=True)


def test_only_shared_ids_are_compared() -> None:
    base = {"1": 1.0, "2": 1.0, "3": 0.0, "9": 1.0}
    run = {"1": 0.0, "2": 1.0, "3": 1.0, "4": 0.0, "5": 0.0}
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert (cmp.n_shared, cmp.only_in_baseline, cmp.only_in_run) == (3, 1, 2)
    assert cmp.baseline_mean == pytest.approx(2 / 3) and cmp.run_mean == pytest.approx(2 / 3)


def test_improvement_never_regresses_and_max_drop_tolerates_small_drops() -> None:
    base, run = _binary_pair(b=2, c=60, both=100, neither=38)
    better = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert better.diff > 0 and not better.regressed and better.p_value > 0.99

    base, run = _binary_pair(b=30, c=10, both=100, neither=60)  # a significant 0.1 drop
    strict = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    lenient = compare_paired(
        base, run, baseline_binary_single=True, run_binary_single=True, max_drop=0.15
    )
    assert strict.regressed and not lenient.regressed
    # p is against the tolerated drop: a 0.1 drop is no evidence of one larger than 0.15.
    assert strict.p_value < 0.05 and lenient.p_value > 0.5


def test_a_drop_beyond_max_drop_by_its_point_estimate_but_not_its_interval_passes() -> None:
    # 400 examples, 30 flips down and 6 up: diff -0.060, 90% interval about [-0.086, -0.036].
    base, run = _binary_pair(b=30, c=6, both=200, neither=164)
    plain = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert plain.diff == pytest.approx(-0.06) and plain.regressed
    assert plain.p_value == pytest.approx(_statsmodels_one_sided(30, 6, 200, 164))
    assert plain.diff_ci_low == pytest.approx(-0.086, abs=5e-4)
    assert plain.diff_ci_high == pytest.approx(-0.036, abs=5e-4)
    tolerant = compare_paired(
        base, run, baseline_binary_single=True, run_binary_single=True, max_drop=0.05
    )
    # The interval allows drops under the 0.05 tolerated: no regression, p against the margin.
    assert (tolerant.diff_ci_low, tolerant.diff_ci_high) == (plain.diff_ci_low, plain.diff_ci_high)
    assert not tolerant.regressed and tolerant.p_value > 0.05
    # A margin the interval's upper end lies below is a regression again.
    tighter = compare_paired(
        base, run, baseline_binary_single=True, run_binary_single=True, max_drop=0.03
    )
    assert tighter.regressed and tighter.p_value < 0.05


@pytest.mark.parametrize("max_drop", [0.0, 0.01, 0.04, 0.1])
def test_mcnemar_against_a_margin_agrees_with_its_interval_and_the_exact_binomial(
    max_drop: float,
) -> None:
    for b, c, n in [(30, 6, 400), (12, 2, 60), (9, 0, 30), (40, 25, 300), (3, 3, 20)]:
        both = (n - b - c) // 2
        base, run = _binary_pair(b=b, c=c, both=both, neither=n - b - c - both)
        for alpha in (0.05, 0.1):
            cmp = compare_paired(
                base,
                run,
                baseline_binary_single=True,
                run_binary_single=True,
                alpha=alpha,
                max_drop=max_drop,
            )
            assert cmp.regressed == (cmp.diff_ci_high < -max_drop), (b, c, n, alpha)
            assert cmp.regressed == (cmp.p_value < alpha)
            # Never below the exact conditional test at the margin: down ~ Binomial(d, t0).
            t0 = (1 + n * max_drop / (b + c)) / 2
            exact = sps.binomtest(b, b + c, t0, alternative="greater").pvalue if t0 < 1 else 1.0
            assert cmp.p_value >= exact - 1e-12


@pytest.mark.parametrize("max_drop", [0.0, 0.05, 0.2])
def test_paired_t_against_a_margin_is_the_shifted_t_test(max_drop: float) -> None:
    rng = np.random.default_rng(5)
    for n in (8, 40, 200):
        base = rng.uniform(0, 1, n)
        run = np.clip(base + rng.normal(-0.1, 0.25, n), 0, 1)
        cmp = compare_paired(
            {str(i): float(x) for i, x in enumerate(base)},
            {str(i): float(x) for i, x in enumerate(run)},
            baseline_binary_single=False,
            run_binary_single=False,
            max_drop=max_drop,
        )
        expected = sps.ttest_1samp(run - base + max_drop, 0.0, alternative="less").pvalue
        assert cmp.p_value == pytest.approx(expected, rel=1e-9)
        assert cmp.regressed == (cmp.diff_ci_high < -max_drop) == (cmp.p_value < 0.05)


def test_a_uniform_drop_against_a_margin() -> None:
    # Every one of 30 examples drops by 0.3 of [0, 1]: p = ((1 + m) / 1.3)^30 against margin m.
    base = {str(i): 0.8 for i in range(30)}
    run = {str(i): 0.5 for i in range(30)}
    for max_drop, regressed in ((0.0, True), (0.1, True), (0.2, False), (0.3, False)):
        cmp = compare_paired(
            base, run, baseline_binary_single=False, run_binary_single=False, max_drop=max_drop
        )
        expected = ((1 + max_drop) / 1.3) ** 30 if max_drop < 0.3 else 1.0
        assert cmp.p_value == pytest.approx(expected, rel=1e-9)
        assert cmp.regressed == regressed == (cmp.diff_ci_high < -max_drop)


def test_bad_alpha_and_max_drop_are_errors() -> None:
    one = {"1": 1.0}
    with pytest.raises(ValueError, match="alpha"):
        compare_paired(one, one, baseline_binary_single=True, run_binary_single=True, alpha=5)
    with pytest.raises(ValueError, match="max_drop"):
        compare_paired(one, one, baseline_binary_single=True, run_binary_single=True, max_drop=-1)


def test_flips_are_sorted_naturally() -> None:
    ids = ["10", "2", "1", "q10", "q2", "b"]
    base = dict.fromkeys(ids, 1.0)
    run = dict.fromkeys(ids, 0.0)
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert cmp.solved_to_missed == ["1", "2", "10", "b", "q2", "q10"]
    assert sorted(["01", "1", "001"], key=natural_key) == ["001", "01", "1"]


def test_to_dict_is_plain_json() -> None:
    base, run = _binary_pair(b=3, c=1, both=4, neither=2)
    d = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True).to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert isinstance(d["regressed"], bool) and isinstance(d["p_value"], float)


# --- simulation: calibration and power --------------------------------------------------------
#
# 400 null replications: if the true false-alarm rate were exactly alpha = 0.05, the observed rate
# has sd sqrt(0.05 * 0.95 / 400) = 0.011, so "<= 0.05 + 3 sd = 0.083" would fail a calibrated test
# about once in 700 seeds (and the seeds are fixed, so this is deterministic). Exact McNemar is
# conservative, so it usually sits well below alpha.

NULL_REPS = 400
NULL_LIMIT = 0.05 + 3 * math.sqrt(0.05 * 0.95 / NULL_REPS)


def _simulate(rng: Rng, p_base: np.ndarray, p_run: np.ndarray, rollouts: int) -> tuple[bool, str]:
    n = len(p_base)
    base = rng.binomial(rollouts, p_base, size=n) / rollouts
    run = rng.binomial(rollouts, p_run, size=n) / rollouts
    single = rollouts == 1
    cmp = compare_paired(
        {str(i): float(x) for i, x in enumerate(base)},
        {str(i): float(x) for i, x in enumerate(run)},
        baseline_binary_single=single,
        run_binary_single=single,
    )
    return cmp.regressed, cmp.test


@pytest.mark.parametrize(("rollouts", "test"), [(1, TEST_MCNEMAR), (4, TEST_PAIRED_T)])
def test_false_alarm_rate_under_the_null_is_at_most_alpha(rollouts: int, test: str) -> None:
    rng = np.random.default_rng(2026)
    n = 200
    alarms = 0
    for _ in range(NULL_REPS):
        p = rng.beta(1.5, 1.0, size=n)  # per-example success probability, same for both runs
        regressed, used = _simulate(rng, p, p, rollouts)
        assert used == test
        alarms += regressed
    assert alarms / NULL_REPS <= NULL_LIMIT


@pytest.mark.parametrize("rollouts", [1, 4])
def test_real_drop_is_detected_almost_always(rollouts: int) -> None:
    rng = np.random.default_rng(11)
    n, reps = 200, 200
    detected = sum(
        _simulate(rng, np.full(n, 0.8), np.full(n, 0.6), rollouts)[0] for _ in range(reps)
    )
    assert detected / reps >= 0.97


# --- ExampleRewards: the columns a run ends with ------------------------------------------------


@pytest.mark.parametrize(
    "rows",
    [
        [[1.0], [0.0], [1.0], [1.0]],  # one 0/1 rollout each: Wilson
        [[0.1, 0.2, 0.3], [0.5, 0.25, 1.0], [0.0, 0.0, 0.7]],  # fsum rounding matters here
        [[0.5], [0.25], [1.0]],
        [[0.7, 0.7], [0.7, 0.7]],  # constant
        [[1.0, 0.0]],  # a single example
    ],
)
def test_example_rewards_summarize_exactly_as_the_mapping(rows: list[list[float]]) -> None:
    ids = [7, 3, 12, 40][: len(rows)]
    columns = ExampleRewards(ids, rows)
    as_dict = {str(i): row for i, row in zip(ids, rows, strict=True)}
    assert dict(columns) == as_dict and list(columns) == list(as_dict)
    for bounds in (None, (0.0, 1.0)):
        assert (
            summarize(columns, bounds=bounds).to_dict()
            == summarize(as_dict, bounds=bounds).to_dict()
        )
    assert columns.means().tolist() == [math.fsum(r) / len(r) for r in rows]


def test_example_rewards_reject_bad_shapes_and_non_finite_rewards() -> None:
    with pytest.raises(ValueError, match="distinct"):
        ExampleRewards([1, 1], [[1.0], [0.0]])
    with pytest.raises(ValueError, match="one row per id"):
        ExampleRewards([1, 2], [[1.0]])
    with pytest.raises(ValueError, match="at least one rollout"):
        ExampleRewards([1], np.empty((1, 0)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        summarize(ExampleRewards([1, 2], [[math.inf, -math.inf], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="zero examples"):
        summarize(ExampleRewards.empty())


# --- ExampleMeans: the columns baselines and comparisons read ----------------------------------


@pytest.mark.parametrize(
    ("ids", "kind"),
    [
        (["10", "2", "0", "33", "1", "7"], "int"),  # a dataset's row ids: an int64 column
        ([str(i) for i in (10, 2, 0, 33, 1, 100_000, 7)], "int"),
        (["10", "2", "01", "1"], "str"),  # a leading zero is not a plain number
        (["10", "2", "01", "1", "0"], "str"),  # the natural order breaks the tie
        (["q10", "q2", "3", "-1", "٣"], "str"),
        (["q10", "q2", "3", "a", "q02", "-1", "٣"], "str"),  # mixed, a non-ASCII digit
        (["1" * 19, "2"], "str"),  # beyond int64
        ([], "int"),
    ],
)
def test_example_means_reads_like_the_dict_in_natural_order(ids: list[str], kind: str) -> None:
    values = [i / 10 for i in range(len(ids))]
    means = ExampleMeans.from_pairs(list(ids), values)
    as_dict = dict(zip(ids, values, strict=True))
    assert (kind == "int") is isinstance(means.ids, np.ndarray)
    assert list(means) == sorted(ids, key=natural_key) and means == as_dict
    assert [means[i] for i in ids] == values and len(means) == len(ids)
    assert ExampleMeans.of(as_dict) == as_dict and ExampleMeans.of(means) is means


def test_example_means_from_run_columns() -> None:
    means = ExampleMeans.from_columns([5, 1, 3], [0.5, 0.1, 0.3])
    assert list(means.items()) == [("1", 0.1), ("3", 0.3), ("5", 0.5)]
    negative = ExampleMeans.from_columns([-2, 1, -10], [0.2, 0.1, 1.0])
    assert list(negative) == sorted(["-2", "1", "-10"], key=natural_key)
    with pytest.raises(ValueError, match="distinct"):
        ExampleMeans.from_columns([1, 2, 1], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="distinct"):
        ExampleMeans.from_columns([-1, 2, -1], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="same length"):
        ExampleMeans.from_columns([1, 2], [0.0])


def test_example_means_json_members_are_what_json_dumps_writes() -> None:
    rng = np.random.default_rng(3)
    n = 3 * 8192 + 5  # several pieces, the last one short
    int_ids = [str(i) for i in rng.permutation(n * 2)[:n].tolist()]
    str_ids = [f'q-{i}\u00e9"' if i % 3 else f"{i}" for i in range(n)]
    values = [*rng.random(n - 3).tolist(), 0.0, 1.0, 1e-300]
    for ids in (int_ids, str_ids):
        doc = dict(sorted(zip(ids, values, strict=True), key=lambda kv: natural_key(kv[0])))
        expected = json.dumps({"x": doc}, indent=2)
        members = "".join(ExampleMeans.from_pairs(ids, values).json_members(" " * 4))
        assert expected == '{\n  "x": {\n' + members + "\n  }\n}"
    with pytest.raises(ValueError, match="not JSON compliant"):
        ExampleMeans.from_pairs(["1"], [math.nan]).json_members("")


@pytest.mark.parametrize("seed", range(6))
def test_compare_paired_of_columns_equals_compare_paired_of_dicts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    numeric = seed % 2 == 0
    ids = [str(i) if numeric else f"id{i}" for i in range(n)]
    base = dict(zip(ids, (rng.random(n) < 0.6).astype(float).tolist(), strict=True))
    run = dict(zip(ids, (rng.random(n) < 0.5).astype(float).tolist(), strict=True))
    # Partly overlapping id sets, and in shuffled order.
    base = {k: base[k] for k in rng.permutation(ids[: n - 20]).tolist()}
    run = {k: run[k] for k in rng.permutation(ids[30:]).tolist()}
    single = seed % 3 != 0
    from_dicts = compare_paired(base, run, baseline_binary_single=True, run_binary_single=single)
    from_columns = compare_paired(
        ExampleMeans.of(base),
        ExampleMeans.of(run),
        baseline_binary_single=True,
        run_binary_single=single,
    )
    assert from_columns == from_dicts
    assert from_dicts.n_shared == n - 50 and from_dicts.only_in_baseline == 30
    assert from_dicts.only_in_run == 20
    shared = sorted(base.keys() & run.keys(), key=natural_key)
    assert from_dicts.solved_to_missed == [k for k in shared if base[k] > run[k]]
    assert from_dicts.missed_to_solved == [k for k in shared if base[k] < run[k]]


def test_compare_paired_of_int_and_text_id_columns() -> None:
    run = ExampleMeans.from_columns([3, 1, 2, 10], [1.0, 0.0, 1.0, 1.0])  # a run's: ints
    stored = {"a": 1.0, "10": 0.0, "2": 1.0, "1": 1.0}  # a hand-made baseline: text ids
    for base, new in ((stored, run), (run, stored)):
        columns = compare_paired(base, new, baseline_binary_single=True, run_binary_single=True)
        dicts = compare_paired(
            dict(base), dict(new), baseline_binary_single=True, run_binary_single=True
        )
        assert columns == dicts and columns.n_shared == 3
    forward = compare_paired(stored, run, baseline_binary_single=True, run_binary_single=True)
    assert forward.solved_to_missed == ["1"] and forward.missed_to_solved == ["10"]


def test_regressed_never_goes_with_an_interval_that_holds_zero() -> None:
    """Every table of up to 60 pairs: "regressed" (exact one-sided p < alpha) exactly when the
    interval shown lies below 0, at alpha 0.05 and 0.01; 10 down / 3 up of 100 (p = 0.046)
    is regressed with an interval below 0."""
    for alpha in (0.05, 0.01):
        for n in (10, 30, 60):
            for down in range(n + 1):
                for up in range(n + 1 - down):
                    base, run = _binary_pair(down, up, n - down - up, 0)
                    cmp = compare_paired(
                        base, run, baseline_binary_single=True, run_binary_single=True, alpha=alpha
                    )
                    assert cmp.regressed == (cmp.diff_ci_high < 0), (alpha, n, down, up)
    base, run = _binary_pair(10, 3, 80, 7)
    cmp = compare_paired(base, run, baseline_binary_single=True, run_binary_single=True)
    assert cmp.p_value == pytest.approx(0.0461, abs=1e-4) and cmp.regressed
    assert cmp.diff_ci_high < 0


# --- intervals as written ---------------------------------------------------------------------

_ENDS = re.compile(r"\[([-+]?\d+\.\d+), ([-+]?\d+\.\d+)\]")


def test_written_bounds_are_outward_and_on_the_side_of_their_verdict() -> None:
    """Paired t comparisons against max_drop 0.05 whose interval ends near the margin: the
    line the gate and ``compare`` print, the JUnit properties and the report's comparison
    cell never put an end on the other side of the margin than the verdict says (a regression
    whose interval ends at -0.05024 is written -0.0502, not -0.050), and every written
    interval holds the one computed."""
    from pytest_modal_eval.report.html import _diff_interval
    from pytest_modal_eval.report.junit import _bounds
    from pytest_modal_eval.stats.format import describe_comparison, fmt_interval

    rng = np.random.default_rng(35)
    near = wrong = 0
    for _ in range(3000):
        n = int(rng.integers(20, 60))
        base = rng.random(n)
        run = np.clip(base - 0.09 + rng.normal(0, 0.12, n), 0, 1)
        ids = [str(i) for i in range(n)]
        c = compare_paired(
            dict(zip(ids, base.tolist(), strict=True)),
            dict(zip(ids, run.tolist(), strict=True)),
            baseline_binary_single=False,
            run_binary_single=False,
            max_drop=0.05,
        )
        near += abs(c.diff_ci_high + 0.05) < 5e-4
        low, high = map(float, _ENDS.findall(describe_comparison(c)[0])[0])
        (_, junit_low), (_, junit_high) = _bounds("d", c.diff_ci_low, c.diff_ci_high, -0.05)
        # The report's comparison cell, from the figures metadata.json records.
        figures = c.to_dict()
        cell = _diff_interval(figures["diff_ci_low"], figures["diff_ci_high"], figures["max_drop"])
        report_high = float(_ENDS.findall(cell)[0][1])
        for shown_high in (high, junit_high, report_high):
            wrong += (shown_high < -0.05) != c.regressed
        assert low <= c.diff_ci_low and high >= c.diff_ci_high
        assert junit_low <= c.diff_ci_low and junit_high >= c.diff_ci_high
    assert near >= 20 and wrong == 0, (near, wrong)
    # Rounded outward, more decimals only where the side needs them.
    assert fmt_interval(0.30612, 0.59998, threshold=0.6) == "[0.306, 0.59998]"
    assert fmt_interval(0.6, 0.93, threshold=0.6) == "[0.600, 0.930]"
    assert fmt_interval(0.1234, 0.5678) == "[0.123, 0.568]"
    assert fmt_interval(-0.0003, None, signed=True) == "[-0.001, n/a]"
