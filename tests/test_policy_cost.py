"""The VLA regime: a policy whose calls cost what a VLA's do (a wait, CPU free), in bench and tune."""

import pytest
from helpers import need

from fastenv.policy_cost import PRESETS, InferenceCost, inference_cost


def test_presets_come_from_cited_figures_and_keep_their_chunk():
    for name, cost in PRESETS.items():
        assert cost.name == name and cost.source and cost.chunk in (32, 50)
        assert cost.per_call_s > cost.per_sample_s > 0  # split as a VLA-sized transformer measured on an H100
    behavior = inference_cost("pi05-behavior")
    assert behavior.seconds(1) == pytest.approx(0.45) and behavior.chunk == 32
    assert 12 <= behavior.per_env_step_ms(1, 32) <= 16  # the study's 12-16 ms per env step


def test_costs_parse_from_text_and_bad_ones_say_what_was_expected():
    assert inference_cost("0.05,0.4") == InferenceCost(0.05, 0.4, "0.05s+0.4s*batch")
    assert inference_cost("0.1").seconds(7) == pytest.approx(0.1)
    assert inference_cost(None) is None
    for bad in ("pi5", "a,b", "1,2,3", ""):
        with pytest.raises(ValueError, match="pi05-behavior"):
            inference_cost(bad)
    with pytest.raises(ValueError, match=">= 0"):
        InferenceCost(-0.1, 0.0)
    with pytest.raises(ValueError, match="at least one env"):
        inference_cost("0.1,0.1").seconds(0)


def test_the_wait_is_what_is_left_after_the_real_work(monkeypatch):
    slept = []
    monkeypatch.setattr("fastenv.policy_cost.time.sleep", slept.append)
    cost = InferenceCost(0.05, 0.01)
    assert cost.wait(4, spent=0.02) == pytest.approx(0.07) and slept == [pytest.approx(0.07)]
    assert cost.wait(1, spent=1.0) == 0.0 and len(slept) == 1  # the real work took longer: no wait


def test_tune_takes_a_preset_by_name():
    from fastenv.tuning import CostPolicy
    from fastenv.tuning.trials import _as_policy

    policy = _as_policy(None, "pi05-behavior", None)
    assert isinstance(policy, CostPolicy)
    assert (policy.fixed, policy.per_obs) == (PRESETS["pi05-behavior"].per_call_s, PRESETS["pi05-behavior"].per_sample_s)
    with pytest.raises(ValueError, match="unknown policy cost"):
        _as_policy(None, "gpt-9", None)


def test_cli_refuses_an_unknown_preset_before_building_anything(capsys):
    from fastenv.cli import main

    for argv in (["bench", "--policy-cost", "pi7"], ["tune", "CartPole-v1", "--num-envs", "2", "--policy-cost", "pi7"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert "unknown policy cost 'pi7'" in capsys.readouterr().err


def test_the_estimate_counts_the_policy_and_overlaps_it_where_the_row_does():
    from fastenv.bench import BenchConfig, estimate_seconds

    cheap = estimate_seconds(BenchConfig(chunk=32))
    vla = estimate_seconds(BenchConfig(chunk=32, policy_cost="pi05-behavior"))
    overlapped = estimate_seconds(BenchConfig(chunk=32, policy_cost="pi05-behavior"), only=["+Pipeline"])
    serial = estimate_seconds(BenchConfig(chunk=32, policy_cost="pi05-behavior"), only=["+SkipObs"])
    assert vla > cheap and overlapped < serial


def test_overlap_is_set_against_the_bound_of_perfect_overlap():
    from fastenv.bench.ablation import add_overlap
    from fastenv.bench.report import overlap_lines

    def row(name, mode, ms, policy, hard_reset=True):
        return {"config": name, "ms_per_env_step": ms, "breakdown_ms_per_env_step": {"policy": policy},
                "variant": {"build": "chunked", "mode": mode, "hard_reset": hard_reset, "fast_substep": False}}

    rows = [row("+SkipObs", "step", 30.0, 10.0), row("+Pipeline", "pipeline", 25.0, 12.0), row("+Async", "dynamic", 20.0, 11.0),
            row("+FastReset", "dynamic", 15.0, 11.0, hard_reset=False)]
    add_overlap(rows)
    pipeline = rows[1]["overlap"]
    assert pipeline["bound_x"] == pytest.approx(30.0 / 20.0)  # env 20 + policy 10, over the larger
    assert pipeline["gain_x"] == pytest.approx(30.0 / 25.0) and pipeline["share_of_bound"] == pytest.approx(0.4)
    assert rows[2]["overlap"]["gain_x"] == pytest.approx(1.5)
    assert "overlap" not in rows[0] and "overlap" not in rows[3]  # other env work: no like-for-like reference
    assert overlap_lines(rows)[0].startswith("+Pipeline: 1.20x +SkipObs, where perfect overlap gives 1.50x")


def test_the_vla_sized_transformer_runs_and_has_a_vlas_size():
    torch = need("torch")
    from fastenv.bench.policies import VLASizedTransformer

    tiny = VLASizedTransformer(chunk=5, views=2, width=32, depth=1, mlp=64, heads=2, expert_width=16, expert_mlp=32, steps=2,
                               prompt_tokens=4, vision_width=16, vision_depth=1, vision_mlp=32, dtype=torch.float32)
    assert tiny.run(3).shape == (3, 5, 7)
    with torch.device("meta"):  # the default shape, without allocating it
        full = VLASizedTransformer()
    assert 2.0e9 < full.parameters_count() < 3.5e9  # pi0's scale: about 3B with its vocabulary


def test_the_transformer_needs_cuda_and_says_so():
    need("torch")
    import torch

    from fastenv.bench.ablation import BenchConfig, VLACost

    with pytest.raises(ValueError, match="runs on CUDA"):
        VLACost(BenchConfig(policy_cost="pi05-behavior", policy_compute="transformer"), torch.device("cpu"))
    assert VLACost(BenchConfig(policy_cost="pi05-behavior"), torch.device("cpu")).compute == "wait"
    assert VLACost(BenchConfig(), torch.device("cpu")).describe() is None
