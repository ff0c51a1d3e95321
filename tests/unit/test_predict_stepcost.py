"""The step-cost fit and the plan of levels.

Known truth: points built from a known T(n, ctx) = a + b·n + c·ctx are fitted back
exactly; the interp curve passes through every measured level; the plan's ladder is
worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from specload.predict.stepcost import CostPoint, fit_step_cost, plan_levels


def truth(n, ctx):
    return 10.0 + 0.5 * n + 0.002 * ctx


def points(ns, ctxs):
    return [CostPoint(f"c{n}", n, n, c, truth(n, c), 20) for n, c in zip(ns, ctxs, strict=True)]


def test_exact_points_are_fitted_exactly():
    fit = fit_step_cost(points([1, 2, 4, 8, 16], [800, 1500, 1000, 2000, 1200]))
    assert fit.uses_context
    np.testing.assert_allclose(fit.coef, [10.0, 0.5, 0.002], rtol=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert np.abs(fit.residuals).max() < 1e-9
    assert fit.residual_sd == pytest.approx(0.0, abs=1e-9)
    d = fit.to_dict()
    assert d["coefficients"]["per_1k_context_ms"] == pytest.approx(2.0)
    assert [p["label"] for p in d["points"]] == ["c1", "c2", "c4", "c8", "c16"]


def test_context_dropped_when_contexts_do_not_spread():
    fit = fit_step_cost(points([1, 2, 4, 8], [1000, 1001, 1002, 1000]))
    assert not fit.uses_context
    assert fit.coef[2] == 0.0
    assert any("spread" in n for n in fit.notes)
    assert fit.coef[1] == pytest.approx(0.5, rel=1e-3)


def test_two_levels_fit_a_line_without_an_error_estimate():
    fit = fit_step_cost(points([1, 4], [1000, 1000]))
    assert fit.cov is None
    np.testing.assert_allclose(fit.coef[:2], [10.0 + 2.0, 0.5])
    draws = fit.sample_coefs(np.random.default_rng(0), 5)
    assert np.all(draws == fit.coef)
    assert any("degrees of freedom" in n for n in fit.notes)


def measured(pairs):
    return [CostPoint(f"c{n}", n, n, 1000.0, y, 20) for n, y in pairs]


def test_no_term_of_the_cost_is_negative():
    # The least-squares line through these has a negative fixed part (-6.57 ms): a step
    # cannot cost less than nothing, so the fixed part goes and the per-token slope is refitted
    # through the origin: b = Σny / Σn² = 345 / 85 = 4.059 ms per token.
    fit = fit_step_cost(measured([(1, 1.0), (2, 4.0), (4, 10.0), (8, 37.0)]), curve="linear")
    assert fit.coef[0] == 0.0 and fit.coef[2] == 0.0
    assert fit.coef[1] == pytest.approx(345 / 85)
    assert any(n.startswith("fixed part dropped: it came out negative") for n in fit.notes)
    assert fit.cov is not None and fit.cov[0, 0] == 0.0 and fit.cov[1, 1] > 0
    assert float(fit.step_ms(0.5, 1000.0)) > 0


def test_a_level_cheaper_than_fewer_tokens_is_named():
    fit = fit_step_cost(measured([(1, 5.0), (2, 6.0), (4, 0.4), (8, 9.0)]))
    falling = [n for n in fit.notes if "arrived in bursts" in n]
    assert len(falling) == 1 and falling[0].startswith("level c4's median TPOT (0.4 ms)")
    assert "below c2's (6 ms)" in falling[0]
    # a gentle dip (within 25%) is noise, not named
    fit = fit_step_cost(measured([(1, 5.0), (2, 4.0), (4, 6.0), (8, 9.0)]))
    assert not any("arrived in bursts" in n for n in fit.notes)


def test_one_level_is_refused():
    with pytest.raises(ValueError, match="at least two levels"):
        fit_step_cost(points([4], [1000]))


def test_interp_curve_passes_through_the_levels():
    # A concave curve (an MoE's expert reads saturate): a line misses, interp does not.
    ns = [1, 4, 16, 64]
    pts = [CostPoint(f"c{n}", n, n, 1000.0, 14.0 + 6.0 * np.log2(n), 10) for n in ns]
    interp = fit_step_cost(pts, curve="interp")
    line = fit_step_cost(pts, curve="linear")
    for n in ns:
        want = 14.0 + 6.0 * np.log2(n)
        assert float(interp.step_ms(n, 1000.0)) == pytest.approx(want)
    assert abs(float(line.step_ms(4, 1000.0)) - 26.0) > 1.0
    # Between two levels interp is a chord of the measured curve.
    assert float(interp.step_ms(8, 1000.0)) == pytest.approx(26.0 + (38.0 - 26.0) * 4 / 12)


def test_fit_error_widens_with_noise():
    rng = np.random.default_rng(3)
    ns = np.array([1, 2, 4, 8, 16, 32])
    pts = [
        CostPoint(f"c{n}", int(n), float(n), 1000.0, truth(n, 1000) + rng.normal(0, 0.3), 10)
        for n in ns
    ]
    fit = fit_step_cost(pts, curve="linear")
    assert fit.cov is not None and fit.residual_sd is not None and fit.residual_sd > 0
    draws = fit.sample_coefs(np.random.default_rng(0), 2000)
    assert draws.std(axis=0)[1] == pytest.approx(np.sqrt(fit.cov[1, 1]), rel=0.1)


def test_plan_ladder_above_the_measured_range():
    plan = plan_levels([1, 2, 4, 8, 16], [1, 4, 16], [3])
    assert plan.extra_levels == (32, 64)
    st = {(n.concurrency, n.k): n.status for n in plan.needs}
    assert st[(1, 3)] == "measured"  # 4 tokens
    assert st[(4, 3)] == "measured"  # 16
    assert st[(16, 3)] == "extrapolated"  # 64
    assert "--concurrency 1,2,4,8,16,32,64" in plan.command()


def test_plan_one_level_starts_a_ladder():
    plan = plan_levels([4], [4], [3])
    assert plan.extra_levels == (1, 2, 8, 16)
    assert plan.summary().startswith("--plan would add levels 1,2,8,16")


def test_plan_caps_at_max_num_seqs():
    plan = plan_levels([1, 16, 64], [64], [8], max_num_seqs=256)
    assert plan.extra_levels == (128, 256)
    assert plan.notes and "576" in plan.notes[0]


def test_plan_nothing_to_add():
    plan = plan_levels([1, 2, 4, 8], [1, 2], [1])
    assert plan.extra_levels == ()
    assert plan.needs[-1].status == "measured"
    assert "already cover" in plan.summary()
