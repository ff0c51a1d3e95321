"""The MoE correction: the independent tokens a step's shared-sequence verification equals.

Known truth, worked by hand: E = 8 routed experts, top-2, so one token wakes 2 and two
independent tokens 8·(1 - (6/8)²) = 3.5; the overlap that makes 4 tokens of one sequence wake
2.5x one token's experts (5 of 8) is 1 - (ln(3/8)/ln(3/4) - 1)/3 = 0.19686; at overlap 0.5 a
sequence of 4 tokens counts 1 + 3·0.5 = 2.5. The moe_step.py file is written by the bench
script's own writer (imported from bench/gpu/moe_step.py, which needs no torch to import).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from specload.errors import UsageError
from specload.predict.moe import (
    MOE_STEP_FORMAT,
    MoeModel,
    MoeShape,
    charged_tokens,
    read_moe_step,
)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "bench" / "results" / "gpu_moe_h200.json"


def bench():
    """bench/gpu/moe_step.py as a module (it is a script, not a package)."""
    name = "bench_gpu_moe_step"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "gpu" / "moe_step.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def model(overlap=0.5, row_cost=0.0, shape=None):
    return MoeModel(
        shape=shape or MoeShape(experts=8, top_k=2),
        overlap=overlap,
        overlap_low=overlap,
        overlap_high=overlap,
        source="test",
        row_cost=row_cost,
    )


# --- unique experts ------------------------------------------------------------------------


def test_unique_experts_of_independent_tokens():
    shape = MoeShape(experts=8, top_k=2)
    np.testing.assert_allclose(shape.unique_experts([0, 1, 2]), [0.0, 2.0, 3.5])
    assert shape.tokens_for_unique(3.5) == pytest.approx(2.0)
    assert shape.tokens_for_unique(2.0) == pytest.approx(1.0)


def test_overlap_from_the_ratio_at_four_tokens():
    at = MoeModel.overlap_for_ratio
    # 5 of 8 experts: (3/4)^n = 3/8, n = 3.40942; 1 + 3(1 - rho) = n.
    assert at(MoeShape(8, 2), 4, 2.5) == pytest.approx(0.196860, abs=1e-6)
    # E = 256, top-8: 20 experts, (31/32)^n = 236/256, n = 2.56217.
    assert at(MoeShape(256, 8), 4, 2.5) == pytest.approx(0.479276, abs=1e-6)
    # Many experts: no collisions, 1 + 3(1 - rho) = 2.5 -> rho = 0.5.
    assert at(MoeShape(10**9, 8), 4, 2.5) == pytest.approx(0.5, abs=1e-6)
    # 4x is independent tokens (as many as U(4) allows): no sharing.
    assert at(MoeShape(256, 8), 4, 4.0) == 0.0
    # Every expert read by every token: nothing to share.
    assert at(MoeShape(4, 4), 4, 2.5) == 0.0


def test_default_model_and_its_range():
    m = MoeModel.default(MoeShape(256, 8, 1))
    assert m.overlap == pytest.approx(0.479276, abs=1e-6)
    assert m.overlap_low < m.overlap < m.overlap_high
    # 4 tokens of one sequence wake 2.5x one token's experts at the default.
    assert m.sequence_unique_experts(4).item() == pytest.approx(20.0)
    assert m.sequence_unique_experts(1).item() == pytest.approx(8.0)
    assert m.row_cost == 0.0 and m.measured is None


# --- equivalent and charged tokens ---------------------------------------------------------


def test_equivalent_tokens_of_one_step():
    m = model(0.5)
    assert m.equivalent_tokens([4]) == pytest.approx(2.5)
    assert m.equivalent_tokens([4, 1, 1]) == pytest.approx(4.5)
    assert m.equivalent_tokens([0, 3]) == pytest.approx(2.0)
    assert m.equivalent_tokens([1, 1, 1]) == pytest.approx(3.0)  # no drafts: the identity
    assert m.equivalent_tokens([]) == 0.0


def test_equivalent_tokens_over_steps_equal_the_per_sequence_sum():
    m = model(0.5)
    steps = [[4], [4, 1, 1], [1, 1, 1], [3, 2]]
    n = np.array([sum(s) for s in steps], dtype=float)
    d = np.array([sum(x - 1 for x in s) for s in steps], dtype=float)
    np.testing.assert_allclose(m.equivalent_tokens_steps(n, d), [2.5, 4.5, 3.0, 3.5])
    np.testing.assert_allclose(
        m.equivalent_tokens_steps(n, d), [m.equivalent_tokens(s) for s in steps]
    )


def test_charged_tokens_without_a_row_cost_are_the_equivalent_tokens():
    m = model(0.5)
    n, d = np.array([4.0, 6.0, 3.0]), np.array([3.0, 3.0, 0.0])
    np.testing.assert_allclose(m.charged_tokens(n, d), [2.5, 4.5, 3.0])


def test_charged_tokens_with_a_row_cost_solve_the_cost_equation():
    # Row cost 0.5 token-expert-reads = 1 expert read per row. N = 4, D = 3, rho = 0.5:
    # n_eq = 2.5, U(2.5) = 8(1 - 0.75^2.5) = 4.1029; target = 4 + 4.1029 = 8.1029.
    # x + 8(1 - 0.75^x): 8.0137 at x = 3.2, 8.2041 at x = 3.3 -> x in (3.2, 3.3).
    m = model(0.5, row_cost=0.5)
    x = m.charged_tokens(np.array([4.0]), np.array([3.0]))[0]
    assert 3.2 < x < 3.3
    assert x + 8 * (1 - 0.75**x) == pytest.approx(4 + 8 * (1 - 0.75**2.5), abs=1e-9)


def test_charged_tokens_identity_cases():
    n, d = np.array([4.0, 9.0]), np.array([3.0, 8.0])
    np.testing.assert_array_equal(charged_tokens(None, n, d), n)  # dense model
    np.testing.assert_allclose(model(0.0, row_cost=0.3).charged_tokens(n, d), n)  # no sharing
    sat = model(0.5, shape=MoeShape(experts=4, top_k=4))  # every expert, every token
    np.testing.assert_array_equal(sat.charged_tokens(n, d), n)
    np.testing.assert_allclose(charged_tokens(model(0.5), n, d), [2.5, 5.0])


def test_correction_on_a_linear_curve_is_minus_slope_overlap_drafts():
    m = model(0.5)

    def curve(x):
        return 10.0 + 0.5 * np.asarray(x)

    got = m.correction_ms(np.array([4.0, 8.0, 2.0]), np.array([3.0, 6.0, 0.0]), curve)
    np.testing.assert_allclose(got, [-0.75, -1.5, 0.0])


def test_bad_step_arrays_and_parameters():
    with pytest.raises(ValueError):
        model(0.5).charged_tokens(np.array([2.0]), np.array([3.0]))  # more drafts than tokens
    with pytest.raises(ValueError):
        model(0.5).equivalent_tokens_steps(np.array([2.0]), np.array([-1.0]))
    with pytest.raises(UsageError, match="top_k"):
        MoeShape(experts=8, top_k=9)
    with pytest.raises(UsageError, match="overlap"):
        model(1.5)
    with pytest.raises(UsageError, match="row cost"):
        model(0.5, row_cost=-1.0)


# --- the bench script's routing realises the model -----------------------------------------


def test_bench_pool_routing_wakes_exactly_the_asked_experts():
    b = bench()
    rng = random.Random(1)
    for n in range(1, 10):
        for u in b.grid_points(n, 256, 8, 4):
            routes = b.route_pool(n, u, 256, 8, rng)
            assert len(routes) == n
            assert all(len(set(r)) == 8 for r in routes)
            assert b.unique_experts(routes) == u
    assert b.grid_points(1, 256, 8, 4) == [8]
    assert b.grid_points(4, 256, 8, 4) == [8, 16, 24, 32]
    assert b.grid_points(9, 16, 4, 4) == [4, 8, 12, 16]  # capped at E


def test_bench_sequence_routing_matches_the_documented_overlap_model():
    # The script's "one sequence" layout keeps each expert of the previous token with
    # probability rho; the model says such m tokens wake U(1 + (m - 1)(1 - rho)).
    b = bench()
    rng = random.Random(7)
    m = model(0.5, shape=MoeShape(256, 8))
    for tokens in (2, 4, 9):
        mean = np.mean(
            [b.unique_experts(b.route_sequence(tokens, 256, 8, 0.5, rng)) for _ in range(3000)]
        )
        assert mean == pytest.approx(m.sequence_unique_experts(tokens).item(), rel=0.03)


# --- the moe_step.py file ------------------------------------------------------------------


def test_format_string_agrees_with_the_bench_script():
    assert bench().FORMAT == MOE_STEP_FORMAT


def write_file(path, shape=None, grid=None, **head):
    """A moe_step.py JSON through the script's own Recorder and writer."""
    b = bench()
    s = shape or b.Shape(hidden=64, experts=8, top_k=2, shared=1, expert_intermediate=32, layers=2)
    rec = b.Recorder(
        path,
        {"device": "NVIDIA Test", "device_type": "cuda", "shape": {**vars(s)}, **head},
    )
    if grid is None:  # time = 1 + 0.1 rows + 0.5 U, over the script's own grid points
        grid = [
            {
                "impl": "grouped",
                "mode": "full",
                "rows": n,
                "unique_experts": u,
                "time_ms": 1.0 + 0.1 * n + 0.5 * u,
            }
            for n in range(1, 6)
            for u in b.grid_points(n, s.experts, s.top_k, 4)
        ]
    for row in grid:
        rec.add("grid", row)
    rec.write(complete=True)
    return path


def test_from_json_reads_the_row_and_expert_costs(tmp_path):
    path = write_file(tmp_path / "m.json")
    m = MoeModel.from_json(path)
    fit = m.measured
    assert fit is not None
    assert (fit.impl, fit.mode, fit.layers) == ("grouped", "full", 2)
    assert fit.fixed_ms == pytest.approx(1.0)
    assert fit.per_row_ms == pytest.approx(0.1)
    assert fit.per_expert_ms == pytest.approx(0.5)
    assert fit.r2 == pytest.approx(1.0)
    # lambda = 0.1 / (0.5 x 2) = 0.1; the overlap stays the prior's.
    assert m.row_cost == pytest.approx(0.1)
    assert m.shape == MoeShape(8, 2, 1)
    assert m.overlap == pytest.approx(0.196860, abs=1e-6)
    assert str(path) in m.row_cost_source
    assert fit.notes == ()


def test_from_json_prefers_the_grouped_full_graph_points(tmp_path):
    b = bench()
    grid = [
        {
            "impl": impl,
            "mode": "full",
            "rows": n,
            "unique_experts": u,
            "time_ms": 1.0 + slope_row * n + slope_u * u,
        }
        for impl, slope_row, slope_u in (("loop", 0.3, 0.7), ("grouped", 0.1, 0.5))
        for n in range(1, 6)
        for u in b.grid_points(n, 8, 2, 4)
    ]
    fit, _ = read_moe_step(write_file(tmp_path / "m.json", grid=grid))
    assert fit.impl == "grouped" and fit.per_expert_ms == pytest.approx(0.5)
    only_loop = [r for r in grid if r["impl"] == "loop"]
    fit, _ = read_moe_step(write_file(tmp_path / "l.json", grid=only_loop))
    assert fit.impl == "loop" and fit.per_expert_ms == pytest.approx(0.7)


def test_the_committed_h200_run_reads():
    m = MoeModel.from_json(H200)
    fit = m.measured
    assert fit is not None and fit.device == "NVIDIA H200" and fit.notes == ()
    assert (fit.impl, fit.mode, fit.points, fit.layers) == ("grouped", "full", 33, 3)
    assert m.shape == MoeShape(256, 8, 1)
    # The figures bench/results/gpu_moe.md quotes.
    assert fit.per_expert_ms == pytest.approx(0.0841, abs=5e-4)
    assert m.row_cost == pytest.approx(0.0016, abs=2e-4)
    assert fit.r2 > 0.99


def test_bad_files_are_one_line_errors_naming_the_file(tmp_path):
    cases = {}
    cases["cannot read"] = tmp_path / "nope.json"
    (tmp_path / "text.json").write_text("not json {")
    cases["not a JSON"] = tmp_path / "text.json"
    (tmp_path / "fmt.json").write_text(json.dumps({"format": "other/1"}))
    cases["format"] = tmp_path / "fmt.json"
    (tmp_path / "list.json").write_text("[]")
    cases["format "] = tmp_path / "list.json"
    (tmp_path / "short.json").write_text(json.dumps({"format": MOE_STEP_FORMAT}))
    cases["complete"] = tmp_path / "short.json"
    cases["nothing to fit"] = write_file(tmp_path / "empty.json", grid=[])
    flat = [
        {"impl": "loop", "mode": "full", "rows": n, "unique_experts": u, "time_ms": 2.0 + n}
        for n in range(1, 6)
        for u in bench().grid_points(n, 8, 2, 4)
    ]
    cases["no time per unique expert"] = write_file(tmp_path / "flat.json", grid=flat)
    bad_row = [{"impl": "loop", "mode": "full", "rows": 1, "unique_experts": 2, "time_ms": "x"}]
    cases["complete MoE"] = write_file(tmp_path / "row.json", grid=bad_row)
    for needle, path in cases.items():
        with pytest.raises(UsageError) as err:
            MoeModel.from_json(path)
        msg = str(err.value)
        assert str(path) in msg and "\n" not in msg and needle.strip() in msg, msg


def test_a_cpu_or_unfinished_run_reads_with_notes(tmp_path):
    path = write_file(tmp_path / "cpu.json", device="cpu")
    doc = json.loads(path.read_text())
    doc["device_type"], doc["complete"] = "cpu", False
    path.write_text(json.dumps(doc))
    fit, _ = read_moe_step(path)
    assert any("not a GPU" in n for n in fit.notes)
    assert any("stopped before its end" in n for n in fit.notes)
    assert math.isfinite(fit.per_expert_ms)


def test_a_negative_row_slope_is_dropped_with_a_note(tmp_path):
    # time = 1 - 0.01 rows + 0.5 U: a row cannot save time, so the row term goes.
    grid = [
        {
            "impl": "grouped",
            "mode": "full",
            "rows": n,
            "unique_experts": u,
            "time_ms": 1.0 - 0.01 * n + 0.5 * u,
        }
        for n in range(1, 6)
        for u in bench().grid_points(n, 8, 2, 4)
    ]
    m = MoeModel.from_json(write_file(tmp_path / "neg.json", grid=grid))
    assert m.measured is not None and m.measured.per_row_ms == 0.0
    assert m.row_cost == 0.0 and m.measured.per_expert_ms > 0
    assert any("negative" in n for n in m.measured.notes)
