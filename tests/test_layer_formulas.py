"""Per-layer formulas: parameters, DP, TP, EP, the legacy tables, recompute — properties and exactness."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sympy

from codegen.reference.adapters import ADAPTERS
from codegen.reference.adapters import ep as ep_adapter
from codegen.pricing.stages import Fields
from codegen.reference.adapters.params import param_counts
from codegen.runtime.kernels import evaluator
from conftest import CASES, assert_close
from symbolic import dp, ep, legacy, params, recompute, tp
from symbolic.attention import Attention
from symbolic.vocabulary import CpAlgorithm
from symbolic.symbols import SPECS, symbol
from symbolic.vocabulary import LayerType

MODULE_FORMULAS = [f for m in (params, dp, tp, ep, legacy, recompute) for f in m.FORMULAS]

#: Symbols that are 0/1 switches: sampled from {0, 1} only.
SWITCHES = {"comm_t", "comm_ep", "comm_cp", "gather", "qkv_bias", "o_bias", "mlp_bias", "norm_bias",
            "attn_output_gate", "shared_expert_gate"}

TP_LAYER = ADAPTERS["EvalLayerComm.tp_comm_layer"]
EP_LAYER = ADAPTERS["EvalLayerComm.ep_comm_layer"]
RECOMPUTED = ADAPTERS["_recomputed_comm"]

# A DeepSeek-V3-like MoE layer and a dense one, in the reference cases' field names.
MOE = dict(s=4096.0, b=1.0, h=7168.0, hff=18432.0, hff_exp=2048.0, n_exp=256.0, n_shared_exp=1.0,
           n_chosen_exp=8.0, n_gather=4.0, n_attMM=4.0, n_ffMM=3.0, bytes_compute=2.0, cp=1.0, ep=8.0,
           comm_t=1.0, comm_ep=1.0, rec_op={"gather": 1.0}, tokens_per_expert=0.0)
DENSE = dict(s=4096.0, b=1.0, h=4096.0, hff=11008.0, n_exp=1.0, n_gather=4.0, cp=1.0, ep=1.0, comm_t=1.0,
             rec_op={"gather": 1.0})


def _sample(rng: np.random.Generator, name: str) -> sympy.Rational:
    """One valid value of the symbol *name*, as an exact SymPy number."""
    spec = SPECS[name]
    if name in SWITCHES:
        return sympy.Integer(int(rng.integers(0, 2)))
    low = 1 if spec.positive else 0
    if spec.integer:
        return sympy.Integer(int(rng.integers(low, 9)))
    return sympy.Rational(int(rng.integers(4 * low, 33)), 4)


@pytest.mark.parametrize("formula", MODULE_FORMULAS, ids=[f.name for f in MODULE_FORMULAS])
def test_evaluator_equals_exact_substitution(formula):
    rng = np.random.default_rng(sum(map(ord, formula.name)))
    fn = evaluator(formula.name)
    for _ in range(4):
        values = {name: _sample(rng, name) for name in formula.arguments}
        exact = formula.expr.subs({symbol(n): v for n, v in values.items()}).evalf(30)
        got = fn(**{n: float(v) for n, v in values.items()})
        assert_close(got, float(exact))


# ---------------------------------------------------------------- TP


@pytest.mark.parametrize("base", [DENSE, MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("node", [x.value for x in LayerType])
@pytest.mark.parametrize("gather", [0.0, 1.0])
def test_t_one_moves_no_tp_traffic(base, node, gather):
    t = 1
    inputs = {**base, "comm_t": float(t > 1), "ctx_current_node": node, "mb": 2.0, "rec_op": {"gather": gather}}
    assert TP_LAYER(inputs) == 0.0
    assert RECOMPUTED({**inputs, "layer": "FULL_REC_LAYER"})[0] == 0.0


def test_tp_selective_layer_keeps_only_with_gather():
    at = {"ctx_current_node": "SEL_REC_LAYER", "mb": 1.0}
    plain = TP_LAYER({**MOE, "ctx_current_node": "NOT_REC_LAYER", "mb": 1.0})
    assert plain > 0
    assert TP_LAYER({**MOE, **at, "rec_op": {"gather": 1.0}}) == plain
    assert TP_LAYER({**MOE, **at, "rec_op": {"gather": 0.0}}) == 0.0


def test_tp_dense_by_hand():
    # ¼·n_gather·s·b·(h + hff)·mb / cp elements
    got = TP_LAYER({**DENSE, "cp": 2.0, "ctx_current_node": "NOT_REC_LAYER", "mb": 3.0})
    assert_close(got, 0.25 * 4 * 4096 * (4096 + 11008) * 3 / 2)


def test_tp_rejects_a_gather_that_is_no_switch():
    with pytest.raises(ValueError, match="rec_op.gather"):
        TP_LAYER({**DENSE, "ctx_current_node": "SEL_REC_LAYER", "mb": 1.0, "rec_op": {"gather": 0.5}})


def test_unknown_layer_type_is_named():
    with pytest.raises(ValueError, match="ctx_current_node"):
        tp.layer_formula(False, "HALF_REC_LAYER")


# ---------------------------------------------------------------- EP


@pytest.mark.parametrize("tokens", [0.0, [], [5.0] * 256])
def test_ep_one_moves_no_ep_traffic(tokens):
    inputs = {**MOE, "ep": 1.0, "tokens_per_expert": tokens, "ctx_current_node": "NOT_REC_LAYER", "mb": 2.0}
    assert EP_LAYER(inputs) == 0.0
    assert RECOMPUTED({**inputs, "layer": "FULL_REC_LAYER"})[1] == 0.0


@pytest.mark.parametrize("degree,cp_degree", [(2, 1), (8, 1), (8, 2), (64, 4)])
def test_balanced_token_list_gives_the_balanced_volume(degree, cp_degree):
    base = {**MOE, "ep": float(degree), "cp": float(cp_degree), "ctx_current_node": "NOT_REC_LAYER", "mb": 2.0}
    experts_per_rank = 256 // degree
    # Every rank routes n_chosen_exp·s·b/cp tokens, spread evenly over its experts.
    per_expert = 8 * 4096 * 1 / cp_degree / experts_per_rank
    balanced = EP_LAYER(base)
    assert ep_adapter.routing_of(Fields({**base, "tokens_per_expert": [per_expert] * 256})) is ep.Routing.IMBALANCED
    assert_close(EP_LAYER({**base, "tokens_per_expert": [per_expert] * 256}), balanced)


def test_skewed_tokens_cost_at_least_the_balanced_volume():
    rng = np.random.default_rng(7)
    base = {**MOE, "ep": 8.0, "ctx_current_node": "NOT_REC_LAYER", "mb": 1.0}
    total = 8 * 4096 * 8  # n_chosen_exp·s·b per rank, times ep ranks
    for _ in range(5):
        share = rng.dirichlet(np.ones(256))
        skewed = list(share * total)
        # The busiest rank carries at least the mean load.
        assert EP_LAYER({**base, "tokens_per_expert": skewed}) >= EP_LAYER(base) * (1 - 1e-12)


def test_max_rank_tokens_sums_contiguous_experts():
    tokens = [1, 2, 3, 4, 10, 0, 0, 0, 99]  # the entry past n_exp is not read
    assert ep_adapter.max_rank_tokens(tokens, n_exp=8, ep=2) == 10.0
    assert ep_adapter.max_rank_tokens(tokens, n_exp=8, ep=4) == 10.0
    assert ep_adapter.max_rank_tokens(tokens, n_exp=8, ep=8) == 10.0


@pytest.mark.parametrize("tokens,n_exp,degree", [(0.0, 256, 8), ([], 256, 8), ([1.0] * 12, 12, 8)])
def test_routing_falls_back_to_balanced(tokens, n_exp, degree):
    assert ep.routing(tokens, n_exp=n_exp, ep=degree) is ep.Routing.BALANCED


def test_short_token_list_is_named():
    with pytest.raises(ValueError, match="tokens_per_expert"):
        EP_LAYER({**MOE, "tokens_per_expert": [1.0] * 8, "ctx_current_node": "NOT_REC_LAYER", "mb": 1.0})


# ---------------------------------------------------------------- parameters and DP

_LAYER_ONLY = {"comm_d_non_exp", "comm_d_exp", "cp", "t", "t_exp", "ep"}  # DP's own fields, set by each test
PARAM_CASES = list({json.dumps({k: v for k, v in sorted(c.inputs.items()) if k not in _LAYER_ONLY}): c.inputs
                    for c in CASES if c.function in ("EvalBody.num_params_layer", "EvalLayerComm.dp_comm_layer")
                    }.values())


def _variants(inputs: dict) -> list[dict]:
    """The case's layer, and the same with every switch on and MLA without a query latent."""
    on = {**inputs, **{k: True for k in ("qkv_bias", "o_bias", "mlp_bias", "norm_bias", "attn_output_gate",
                                         "shared_expert_gate")}, "n_qknorm": 2.0, "etp": 2.0}
    out = [inputs, on]
    if inputs.get("dc_kv"):
        out.append({**inputs, "dc_q": 0.0, "qk_nope_head_dim": 128.0})
    return out


@pytest.mark.parametrize("inputs", PARAM_CASES, ids=[str(i) for i in range(len(PARAM_CASES))])
def test_parameter_counts_positive(inputs):
    for config in _variants(inputs):
        non_expert, routed, shared = param_counts(Fields(config))
        assert non_expert > 0
        moe = config["n_exp"] != 1
        assert (routed > 0) == moe and shared >= 0


@pytest.mark.parametrize("inputs", PARAM_CASES, ids=[str(i) for i in range(len(PARAM_CASES))])
def test_switches_only_add_parameters(inputs):
    plain, switched = (param_counts(Fields(c)) for c in _variants(inputs)[:2])
    assert switched[0] > plain[0]


@pytest.mark.parametrize("inputs", PARAM_CASES, ids=[str(i) for i in range(len(PARAM_CASES))])
@pytest.mark.parametrize("levels", [(2, 2), (3, 3), (2, 0), (0, 3)])
def test_dp_with_counts_substituted_equals_the_chained_evaluation(inputs, levels):
    config = {**inputs, "comm_d_non_exp": float(levels[0]), "comm_d_exp": float(levels[1]), "cp": 2.0, "t": 2.0,
              "t_exp": 2.0, "ep": 4.0}
    f = Fields(config)
    attention, moe = params.attention_variant(dc_kv=f.num("dc_kv"), dc_q=f.num("dc_q")), f.num("n_exp") != 1
    formula = dp.layer_formula(*levels, moe=moe)
    composed = dp.with_param_counts(formula, params.layer_counts(attention, moe))
    assert not set(composed.free_symbols) & set(dp.PARAM_SYMBOLS)
    switches = {"qkv_bias", "o_bias", "mlp_bias", "norm_bias", "attn_output_gate", "shared_expert_gate"}
    values = {s: (1 if config.get(s.name) else 0) if s.name in switches else f.num(s.name)
              for s in composed.free_symbols}
    assert_close(float(composed.subs(values).evalf(30)), ADAPTERS["EvalLayerComm.dp_comm_layer"](config))


def test_dp_level_two_divides_by_cp_in_one_term_only():
    # §10 item 20: P/(cp·t) + P/t
    f = dp.layer_formula(2, 0, moe=False)
    P_ne, _, _ = dp.PARAM_SYMBOLS
    assert sympy.simplify(f.expr - (P_ne / (symbol("cp") * symbol("t")) + P_ne / symbol("t"))) == 0


def test_dp_levels_other_than_two_and_three_move_nothing():
    for level in (0, 1, 4):
        assert dp.layer_formula(level, level, moe=True).expr == 0


def test_dp_level_must_be_a_number():
    with pytest.raises(ValueError, match="comm_d_non_exp"):
        dp.zero_level("zero2")


# ---------------------------------------------------------------- legacy tables


def test_legacy_tp_bias_steps_at_eight():
    fill = ADAPTERS["fill_tp_table"]
    base = dict(b=1.0, bytes_compute=2.0, d=8.0, ep=1.0, h=4096.0, s=4096.0)
    at7, at8 = fill({**base, "t": 7.0})["tp"]["n_gather"], fill({**base, "t": 8.0})["tp"]["n_gather"]
    assert_close(at8 / at7, 11 / 16)


def test_legacy_dp_ratio_keeps_only_the_op_term():
    # 1 - True cancels: dense, level 2 → 1/16 · 1 · os / d
    got = ADAPTERS["dp_ratio"](dict(comm_d_non_exp=2.0, d=8.0, n_exp=1.0, os_max_shard=4.0, device_intra_node_num=8.0))
    assert_close(got, 1 / 16 * 4 / 8)
    assert ADAPTERS["dp_ratio"](dict(comm_d_non_exp=0.0, d=8.0, n_exp=1.0, os_max_shard=4.0,
                                     device_intra_node_num=8.0)) == 0.0


# ---------------------------------------------------------------- recompute


@pytest.mark.parametrize("base", [DENSE, MOE], ids=["dense", "moe"])
def test_full_recompute_is_the_plain_layer_at_one_micro_batch(base):
    full = RECOMPUTED({**base, "layer": "FULL_REC_LAYER"})
    assert full[0] == TP_LAYER({**base, "ctx_current_node": "NOT_REC_LAYER", "mb": 1.0})
    assert full[1] == EP_LAYER({**base, "ctx_current_node": "NOT_REC_LAYER", "mb": 1.0})


CP_BASE = dict(a=64.0, n_kv=8.0, dh=128.0, t=2.0, cp=4.0, cp_algo="colossalai_cp", device_per_node=8.0,
               bw_intra=300.0, bw_inter=25.0, bytes_compute=2.0)


@pytest.mark.parametrize("base", [DENSE, MOE], ids=["dense", "moe"])
def test_selective_recompute_with_gather_moves_nothing_again(base):
    config = {**base, **CP_BASE, "layer": "SEL_REC_LAYER", "rec_op": {"gather": 1.0}}
    assert RECOMPUTED(config) == [0.0, 0.0, 0.0]
    dropped = RECOMPUTED({**config, "rec_op": {"gather": 0.0}})
    full = RECOMPUTED({**config, "layer": "FULL_REC_LAYER"})
    assert dropped[0] == full[0] and dropped[2] == full[2] > 0
    assert dropped[1] == 0.0  # §10 item 18


def test_recompute_cp_is_half_the_record_volume():
    config = {**DENSE, **CP_BASE, "layer": "FULL_REC_LAYER"}
    record = ADAPTERS["cp_comm_layer_detailed"](config)
    assert_close(RECOMPUTED(config)[2], record["comm_volume"] / 2)
    assert RECOMPUTED({**config, "cp": 1.0})[2] == 0.0


def test_recompute_formulas_follow_the_variant():
    f = recompute.layer_formulas("SEL_REC_LAYER", moe=True, routing="imbalanced", cp_algorithm=CpAlgorithm.ULYSSES,
                                 attention=Attention.MLA)
    assert f.ep.expr == 0 and "gather" in f.tp.arguments and "mb" not in f.tp.arguments
    g = recompute.layer_formulas("FULL_REC_LAYER", moe=True, routing="imbalanced")
    assert "max_rank_tokens" in g.ep.arguments and "gather" not in g.tp.arguments
