"""The speed benchmark's hybridrl side (bench/hybridrl_grpo.py) runs the workload it claims, and
bench/speed.py's arithmetic is right. No timing is asserted: the benchmark is the place for speed.
(The TRL side needs bench/.venv-trl, which `make bench` installs; CI does not.)"""

import json
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import speed  # noqa: E402
import workload  # noqa: E402


@pytest.mark.slow  # runs bench/ scripts in a subprocess (30-130 s on 2 cores)
def test_hybridrl_runner_runs_the_fixed_workload(random_model_dir, tmp_path):
    out = tmp_path / "steps.jsonl"
    subprocess.run([sys.executable, str(REPO / "bench" / "hybridrl_grpo.py"), "--model", random_model_dir,
                    "--steps", "2", "--threads", "1", "--out", str(out)], check=True, capture_output=True, cwd=REPO)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    n = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
    for r in records:
        assert r["gen_tokens"] == n * workload.NEW_TOKENS  # EOS ignored: every response is full length
        assert r["train_tokens"] > r["gen_tokens"]  # prompts + responses
        assert 0 < r["gen_s"] < r["step_s"] and r["train_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_gb"] > 0
        assert "update_actor" in r["timing"] and "old_log_prob" not in r["timing"] and "ref" not in r["timing"]


@pytest.mark.slow  # runs bench/ scripts in a subprocess (30-130 s on 2 cores)
def test_hybridrl_runner_runs_the_learning_workload(tmp_path):
    """The bundled tiny-arith on the arithmetic prompts, EOS on: lengths vary, groups with equal rewards
    are reported and left out of the update (the default), and bf16 turns on its levers."""
    for bf16 in (False, True):
        out = tmp_path / f"steps-{bf16}.jsonl"
        subprocess.run([sys.executable, str(REPO / "bench" / "hybridrl_grpo.py"), "--model", speed.TINY_ARITH,
                        "--steps", "3", "--threads", "1", "--out", str(out), "--workload", "learning",
                        *(["--bf16"] if bf16 else [])], check=True, capture_output=True, cwd=REPO)
        records = [json.loads(line) for line in out.read_text().splitlines()]
        n = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
        assert len(records) == 3
        assert all(r["gen_tokens"] < n * workload.NEW_TOKENS for r in records)  # EOS ends responses early
        assert any(0 < r["score"] < 1 for r in records)  # the SFT'd model is right part of the time
        for r in records:
            assert r["skipped_frac"] == pytest.approx(r["zero_std_share"])  # exactly the equal-reward groups
        assert any(r["zero_std_share"] > 0 for r in records)
        # bf16: the engine/trainer gap is corrected with token TIS, which reports its weights
        assert all((r["is_weight_mean"] is not None) == bf16 for r in records)


@pytest.mark.slow  # runs bench/ scripts in a subprocess (30-130 s on 2 cores)
def test_profiled_ops_fall_into_their_categories(tmp_path):
    import hybridrl_grpo

    assert hybridrl_grpo.category("aten::addmm") == "matmul" and hybridrl_grpo.category("aten::mm") == "matmul"
    assert hybridrl_grpo.category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert hybridrl_grpo.category("aten::_fused_adamw_") == "optimizer"
    assert hybridrl_grpo.category("aten::index_select") == "copies and indexing"
    assert hybridrl_grpo.category("aten::mul") == "other elementwise ops"
    out, summary = tmp_path / "steps.jsonl", tmp_path / "profile.json"
    subprocess.run([sys.executable, str(REPO / "bench" / "hybridrl_grpo.py"), "--model", speed.TINY_ARITH, "--steps", "1",
                    "--threads", "1", "--out", str(out), "--workload", "learning", "--profile", str(summary)],
                   check=True, capture_output=True, cwd=REPO)
    got = json.loads(summary.read_text())
    assert len(out.read_text().splitlines()) == 1  # the profiled step is not among the timed ones
    assert 0 < got["in_ops_s"] <= got["wall_s"] and got["categories"]["matmul"] > 0
    assert got["top_ops"] and set(got["phases"]) >= {"gen", "step"}


def test_arithmetic_reward_and_prompts_match_the_task():
    from hybridrl.rewards.scorers.arithmetic import compute_score

    for text, answer in [("The answer is 12", "12"), ("12 then 13", "12"), ("-3", "-3"), ("none", "4")]:
        assert workload.last_integer_correct(text, answer) == compute_score("arithmetic", text, answer)
    q, a = workload.arith_prompts(1)[0]
    x, y = q[len("What is "):-1].split("+")
    assert int(x) + int(y) == int(a)
    assert workload.zero_std_share([1.0] * 8 + [0.0, 1.0] * 4) == 0.5


def test_the_cpu_kind_names_the_bf16_capability():
    assert speed.cpu_kind(["avx2", "avx512_bf16", "avx512f"]) == "avx512-bf16"
    assert speed.cpu_kind(["amx_bf16", "avx2"]) == "avx512-bf16"
    assert speed.cpu_kind(["avx2", "avx512f"]) == "avx512" and speed.cpu_kind(["avx2"]) == "avx2"


def test_a_run_with_isa_caps_is_filed_apart_from_the_native_kind(monkeypatch):
    flags = ["avx2", "avx512_bf16", "avx512f"]
    for key in speed.ISA_CAPS:
        monkeypatch.delenv(key, raising=False)
    assert speed.bench_kind(flags) == "avx512-bf16"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert speed.bench_kind(flags) == "avx2-emulated"
    assert speed.bench_kind(["avx2"]) == "avx2-capped"  # nothing emulated: the CPU is AVX2 already
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")  # a partial cap is neither kind
    assert speed.bench_kind(flags) == "avx512-bf16-capped"


def test_shaped_reward_varies_within_a_group():
    assert workload.shaped("12 apples", "12") == pytest.approx(1 + 2 / 9)
    assert workload.shaped("abc", "7") == 0.0 and workload.shaped("a1", "7") == 0.5


def test_executed_flops_count_each_prompt_once():
    shape = {"n_matmul": 1000, "n_layers": 2, "width": 8}
    prompt = 10
    rec = {"train_tokens": 32 * (prompt + workload.NEW_TOKENS), "gen_tokens": 32 * workload.NEW_TOKENS}
    plain, shared = speed.step_flops(rec, shape, False), speed.step_flops(rec, shape, True)
    seq = prompt + workload.NEW_TOKENS
    assert plain["train_nominal"] == plain["train_executed"] == 6 * 1000 * 32 * seq + 12 * 2 * 8 * 32 * seq ** 2
    attention = 12 * 2 * 8 * (4 * prompt ** 2 + 32 * (seq ** 2 - prompt ** 2))  # prompts once, responses in full
    assert shared["train_executed"] == 6 * 1000 * (4 * prompt + 32 * workload.NEW_TOKENS) + attention
    assert plain["rollout"] == 2 * 1000 * (32 * workload.NEW_TOKENS + 32 * prompt)
    assert shared["rollout"] == 2 * 1000 * (32 * workload.NEW_TOKENS + 4 * prompt)
    assert shared["rollout_plain"] == plain["rollout_plain"] == plain["rollout"]  # every prompt prefilled per row
    skipped = speed.step_flops({**rec, "skipped_frac": 0.25}, shape, True)  # a quarter of the groups not computed
    assert skipped["train_executed"] == pytest.approx(0.75 * shared["train_executed"])
    assert skipped["train_nominal"] == shared["train_nominal"] and skipped["rollout"] == shared["rollout"]


def test_prompt_sharing_is_read_from_the_overrides():
    rows = {c.name: c.shares_prompts for c in speed.CONFIGS}
    assert rows["trl"] is False and rows["hybridrl-like"] is False and rows["hybridrl-best"] is True


def test_summary_medians_and_speedups():
    shape = {"n_matmul": 1000, "n_layers": 2, "width": 8}
    recs = [{"step_s": s, "cpu_s": 2 * s, "gen_s": s / 2, "rollout_s": s / 2, "train_s": s / 2,
             "gen_tokens": 1024, "train_tokens": 1728, "peak_rss_gb": g} for s, g in ((1.0, 0.5), (3.0, 0.7), (2.0, 0.6))]
    stats = speed.summarize(recs, shape, False, peak_flops=1e9)
    assert stats["step_s"] == 2.0 and stats["cpu_s"] == 4.0 and stats["peak_rss_gb"] == 0.7
    flops = speed.step_flops(recs[0], shape, False)["train_nominal"]
    assert stats["mfu_train_nominal"] == pytest.approx(flops / 1.0 / 1e9)
    assert stats["floor_s"] == pytest.approx((flops + speed.step_flops(recs[0], shape, False)["rollout"]) / 1e9)
    assert stats["over_floor"] == pytest.approx(2.0 / stats["floor_s"])
    assert stats["over_plain_floor"] == pytest.approx(stats["over_floor"])  # nothing shared or skipped
    shared = speed.summarize([{**r, "skipped_frac": 0.5} for r in recs], shape, True, peak_flops=1e9)
    assert shared["over_plain_floor"] == pytest.approx(stats["over_plain_floor"])  # the plain work is the same
    assert shared["over_floor"] > 2 * stats["over_floor"]  # half the groups skipped, prompts once: a lower floor
    base = {"workload": "learning", "model": "tiny"}
    rows = [{**base, "config": "trl", "runner": "trl", "step_s": 2.0, "cpu_s": 4.0},
            {**base, "config": "trl-bf16", "runner": "trl", "step_s": 1.0, "cpu_s": 2.0},
            {**base, "config": "hybridrl-best", "runner": "hybridrl", "step_s": 0.5, "cpu_s": 2.0},
            {**base, "model": "small", "config": "trl", "runner": "trl", "step_s": 8.0, "cpu_s": 8.0}]
    speed.add_speedups(rows)
    assert rows[2]["speedup"] == 4.0 and rows[2]["cpu_speedup"] == 2.0 and rows[0]["speedup"] == 1.0
    assert rows[2]["speedup_vs_best"] == 2.0 and rows[0]["speedup_vs_best"] == 0.5  # TRL's best is its bf16 row
    assert rows[3]["speedup_vs_best"] == 1.0  # models never mix


def test_the_profile_counts_the_packed_projections_as_matmuls_with_their_flops():
    """rollout.pack_weights runs projections as mkldnn::_linear_pointwise, which torch.profiler neither names
    aten:: nor counts FLOPs for: the step profile adds both (else they land in 'outside ops')."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import hybridrl_grpo
    from hybridrl.rollout.decode import can_pack

    if not can_pack("cpu"):
        pytest.skip("oneDNN's prepacked linear is x86 CPU only")
    w, x, other = torch.randn(64, 32), torch.randn(2, 4, 32), torch.randn(2, 4, 64)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, 8)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        torch.ops.mkldnn._linear_pointwise.binary(x.view(8, 32), other.view(8, 64), packed, None, "add")
        torch.mm(x.view(8, 32), w.t())
    got = {op: (calls, flops) for op, _, calls, flops in hybridrl_grpo.op_totals(prof)}
    assert got["mkldnn::_linear_pointwise"] == (2, 2 * (2 * 8 * 32 * 64))
    assert got["aten::mm"] == (1, 2 * 8 * 32 * 64)
    assert hybridrl_grpo.category("mkldnn::_linear_pointwise") == "matmul"


@pytest.mark.slow  # runs bench/ scripts in a subprocess (30-130 s on 2 cores)
def test_an_optional_row_that_fails_is_reported_not_fatal(tmp_path):
    """TRL's torch_compile rows may fail on a machine (they did under ATEN_CPU_CAPABILITY=avx2): such a row is
    left out with its error line, while a failing core row still stops the bench with the log's tail."""
    missing = str(tmp_path / "no-such-model")
    args = ("fixed", missing, 1, 1, str(tmp_path / "out.jsonl"), str(tmp_path / "run.log"))
    with pytest.raises(speed.RowFailed, match="Error"):
        speed.run(speed.Config("x", "x", "hybridrl", optional=True), *args)
    with pytest.raises(SystemExit, match="x on .*no-such-model failed"):
        speed.run(speed.Config("x", "x", "hybridrl"), *args)
    assert [c.name for c in speed.CONFIGS if c.optional] == ["trl-compile", "trl-bf16-compile"]
