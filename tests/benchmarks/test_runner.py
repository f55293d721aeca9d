"""benchmarks: timing/FLOP/memory primitives (reference values) and a smoke run of the runner."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmarks import measure, report, runner
from odet import runtime

ROOT = Path(__file__).resolve().parents[2]


def test_round_robin_rotates_the_starting_task_every_round() -> None:
    order: list[str] = []
    tasks = {name: (lambda n=name: order.append(n)) for name in "abc"}
    timings = measure.round_robin(tasks, rounds=3, warmup=1)
    assert order == [*"abc", *"bca", *"cab", *"abc"]
    assert all(len(t.times) == 3 for t in timings.values())


def test_same_round_ratio_is_the_median_of_per_round_ratios() -> None:
    # Per-round ratios 2, 1.5, 4: median 2 (the ratio of the medians would be 1.5).
    a = measure.Timing((2.0, 3.0, 8.0))
    b = measure.Timing((1.0, 2.0, 2.0))
    assert measure.same_round_ratio(a, b) == 2.0
    with pytest.raises(ValueError, match="different runs"):
        measure.same_round_ratio(a, measure.Timing((1.0,)))


def test_flops_of_a_linear_forward_and_backward_are_three_gemms() -> None:
    m, k, n = 6, 5, 7
    layer = torch.nn.Linear(k, n, bias=False)
    x = torch.randn(m, k, requires_grad=True)
    assert measure.count_flops(lambda: layer(x).sum().backward()) == 3 * 2 * m * k * n


def test_flops_of_cpu_attention_count_both_products_forward_and_twice_backward() -> None:
    b, h, t, s, d = 2, 3, 5, 7, 4
    q = torch.randn(b, h, t, d, requires_grad=True)
    kv = torch.randn(b, h, s, d, requires_grad=True)
    forward = 2 * b * h * t * s * (d + d)
    assert measure.count_flops(lambda: F.scaled_dot_product_attention(q, kv, kv)) == forward
    total = measure.count_flops(lambda: F.scaled_dot_product_attention(q, kv, kv).sum().backward())
    assert total == 3 * forward


def test_peak_memory_sees_a_64_mib_allocation_in_the_child() -> None:
    peak = measure.peak_memory(lambda: torch.ones(16 * 2**20).add_(1), timeout_s=60)
    if peak is None:
        pytest.skip("no fork or /proc/self/clear_refs on this platform")
    assert 64 * 2**20 <= peak < 200 * 2**20


def test_markdown_update_keeps_the_hand_written_text_around_the_block() -> None:
    results = {
        "environment": {"cpu": "cpu", "logical_cpus": 1, "torch_threads": 1,
                        "versions": {"torch": "x"}, "date": "today", "command": "c"},
        "sizes": {},
    }  # fmt: skip
    first = report.update_markdown("# Title\n\nanalysis\n", results)
    assert first.startswith("# Title\n\nanalysis\n\n" + report.BEGIN)
    edited = first.replace("analysis", "new analysis") + "\nfooter\n"
    second = report.update_markdown(edited, results)
    assert second.count(report.BEGIN) == 1
    assert "new analysis" in second and second.endswith("footer\n")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--markdown", "{tmp}/notes.txt"], "--markdown .*notes.txt must name a Markdown"),
        (["--markdown", "{tmp}"], "must name a Markdown"),
        (["--out", "{tmp}/config.yaml"], "--out .*config.yaml must name a .json file"),
        (["--out", "{tmp}/other.json"], "--out .*other.json exists and holds no benchmark results"),
        (["--threads", "100000"], r"--threads must lie in \[1, 1024\]"),
    ],
)
def test_outputs_that_would_spoil_another_file_are_refused_before_any_timing(
    tmp_path: Path, capsys, flags: list[str], message: str
) -> None:
    """``--markdown /etc/passwd`` appended a results block to it; ``--out`` overwrote any
    file; ``--threads 100000`` died of a MemoryError in torch's thread pool."""
    (tmp_path / "other.json").write_text('{"name": "mine"}')
    argv = ["--quick", *(f.format(tmp=tmp_path) for f in flags)]
    with pytest.raises(SystemExit) as exit_info:
        runner.parse_args(argv)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert (tmp_path / "other.json").read_text() == '{"name": "mine"}'


def test_a_results_json_and_a_markdown_file_are_accepted_as_outputs(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text('{"environment": {}, "sizes": {}}')
    (tmp_path / "notes.md").write_text("# my notes\n")
    argv = ["--quick", "--out", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "notes.md")]
    assert runner.parse_args(argv).out == tmp_path / "r.json"


def test_runner_smoke_writes_json_with_ratios_flops_and_forced_lengths(tmp_path: Path) -> None:
    out, md = tmp_path / "r.json", tmp_path / "R.md"
    argv = ["--quick", "--rounds", "1", "--no-memory", "--beams", "1",
            "--train", "odet-euler", "odet-rk2", "torch-transformer",
            "--generate", "odet-euler", "--out", str(out), "--markdown", str(md)]  # fmt: skip
    assert runner.main(argv) == 0
    toy = json.loads(out.read_text())["sizes"]["toy"]
    train = toy["training"]["train"]
    assert toy["training"]["reference"] == "torch-transformer"
    assert train["torch-transformer"]["speed_vs_torch-transformer"] == 1.0
    assert train["odet-rk2"]["train_flops_per_step"] > train["odet-euler"]["train_flops_per_step"]
    assert toy["training"]["rk"]["encoder rk2/euler"]["flop_ratio"] == pytest.approx(2.0)
    assert toy["training"]["rk"]["encoder rk4/euler"]["flop_ratio"] == pytest.approx(4.0)
    assert toy["training"]["rk"]["encoder euler-2x/euler"]["flop_ratio"] == pytest.approx(2.0)
    assert toy["training"]["rk"]["encoder pc/euler"]["flop_ratio"] > 2.0  # predictor + corrector
    assert {f"encoder {m}/euler" for m in ("ab2", "ab3", "dlcl", "implicit_euler")} <= set(
        toy["training"]["rk"]
    )
    assert toy["generation"]["greedy"]["odet-euler"]["sentences_per_s"] > 0
    assert toy["generation"]["greedy"]["odet-euler"]["flops"] > 0
    assert "| `odet-euler` |" in md.read_text()


def test_flops_are_withheld_where_the_counter_cannot_see_the_gemms() -> None:
    # oneDNN's packed linears and the int8 linears are invisible to FlopCounterMode: a count
    # would be the attention matmuls alone (1.92x Euler for an RK2 decoder instead of 1.48x).
    assert runner._flops_visible("odet-dec-rk2")
    for name in ("odet-dec-rk2-onednn", "odet-euler-int8", "odet-euler-compiled", "hf-marian"):
        assert not runner._flops_visible(name)
    assert not runner._flops_visible("odet-euler-recipe")  # oneDNN where it decodes in fp32


@pytest.mark.parametrize(("flags", "twin"), [("avx512_bf16", "odet-euler-bf16"), ("avx2", None)])
def test_the_recipe_system_decodes_as_the_recipes_decode_on_the_host(
    flags: str, twin: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """odet-euler-recipe is generation.precision auto: the bf16 system where the CPU has bf16
    units, the fp32 model otherwise."""
    import odet.nn.precision
    from benchmarks import systems

    monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda: frozenset({flags}))
    src = systems.gen_sources(systems.SIZES["toy"])
    recipe = systems.GEN_SYSTEMS["odet-euler-recipe"](systems.SIZES["toy"])(src, 2)
    fp32 = systems.GEN_SYSTEMS["odet-euler"](systems.SIZES["toy"])(src, 2)
    if twin is None:
        assert recipe == fp32
    else:
        assert recipe == systems.GEN_SYSTEMS[twin](systems.SIZES["toy"])(src, 2)


@pytest.mark.parametrize(
    ("flags", "reference"),
    [("avx512_bf16", "bf16 GEMM"), ("avx2", "bf16 GEMM (emulated)")],
)
def test_a_bf16_systems_mfu_names_an_emulated_bf16_probe(
    flags: str, reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import odet.nn.precision

    monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda: frozenset({flags}))
    assert runner._mfu_reference("odet-euler-bf16") == reference
    assert runner._mfu_reference("odet-euler") == "fp32 GEMM"


@pytest.mark.parametrize("case", ["none", "causal", "bool", "float", "cross", "cross-causal"])
def test_the_bf16_scores_ablation_computes_sdpa_in_float64(case: str) -> None:
    """odet-euler-bf16-scores replaces SDPA by two matmuls around a softmax: in float64 (no
    rounding) it is SDPA's function, boolean and additive masks and the causal flag included."""
    from benchmarks.systems import _bf16_scores_attention

    g = torch.Generator().manual_seed(0)
    tq, s = (3, 7) if case.startswith("cross") else (7, 7)
    q = torch.randn(2, 4, tq, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 4, s, 8, generator=g, dtype=torch.float64) for _ in range(2))
    keep = torch.rand(2, 1, tq, s, generator=g) > 0.3
    keep[..., 0] = True
    kwargs = {
        "none": {},
        "causal": {"is_causal": True},
        "bool": {"attn_mask": keep},
        "float": {"attn_mask": torch.randn(2, 4, tq, s, generator=g, dtype=torch.float64)},
        "cross": {"attn_mask": keep, "scale": 0.3},
        "cross-causal": {"is_causal": True},
    }[case]
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    torch.testing.assert_close(_bf16_scores_attention(q, k, v, **kwargs), expected)


def test_the_deeper_euler_decoders_evaluate_as_many_layers_as_the_rk_decoders() -> None:
    from benchmarks import systems
    from odet.models import Seq2Seq

    def cached_layer_evaluations(decoder_method: str, depth: int) -> int:
        config = systems.generate_config(systems.SIZES["toy"], "euler", decoder_method, depth)
        model = Seq2Seq(config).eval()
        state = model.init_state(model.encode(torch.tensor([[5, 6, 7]])))
        return len(state.self_attn)

    assert cached_layer_evaluations("euler", 2) == cached_layer_evaluations("rk2", 1)
    assert cached_layer_evaluations("euler", 4) == cached_layer_evaluations("rk4", 1)
    assert cached_layer_evaluations("rk2", 1) == 2 * cached_layer_evaluations("euler", 1) > 0


@pytest.mark.slow
def test_quick_run_with_all_systems_and_memory(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert runner.main(["--quick", "--out", str(out)]) == 0
    train = json.loads(out.read_text())["sizes"]["toy"]["training"]["train"]
    assert all(r["peak_memory_mib"] is None or r["peak_memory_mib"] > 0 for r in train.values())


def test_merge_without_training_keeps_the_earlier_training_and_lists_both_commands(
    tmp_path: Path,
) -> None:
    out, md = tmp_path / "r.json", tmp_path / "R.md"
    common = ["--quick", "--rounds", "1", "--no-memory", "--out", str(out), "--markdown", str(md)]
    assert runner.main([*common, "--train", "odet-euler", "--no-generation"]) == 0
    first = json.loads(out.read_text())["sizes"]["toy"]
    later = [*common, "--merge", "--no-training", "--beams", "1", "--generate", "odet-euler-bf16"]
    assert runner.main(later) == 0
    toy = json.loads(out.read_text())["sizes"]["toy"]
    assert toy["training"] == first["training"]
    assert toy["generation"]["greedy"]["odet-euler-bf16"]["sentences_per_s"] > 0
    assert len(toy["commands"]) == 2 and "--no-training" in toy["commands"][1]
    assert all(f"`{c}`" in md.read_text() for c in toy["commands"])


def test_decode_attention_benchmark_writes_its_table(tmp_path: Path) -> None:
    from benchmarks import decode_attention

    out = tmp_path / "d.md"
    assert decode_attention.main(["--rows", "8", "--rounds", "1", "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    assert [r.split(" | ")[:2] for r in rows[::2]] == [
        ["| float32", "float32"], ["| bfloat16", "bfloat16"], ["| bfloat16", "float32"]
    ]  # fmt: skip
    assert len(rows) == 6


def _gpt2_weights_into_odet(hf: torch.nn.Module, odet: torch.nn.Module) -> None:
    """Copy HF GPT-2's weights into odet's Euler ``CausalLM`` (Conv1D weights transposed)."""
    sd = hf.state_dict()
    mapping = {
        "token_embed.weight": "transformer.wte.weight",
        "positions.weight": "transformer.wpe.weight",
        "norm.weight": "transformer.ln_f.weight",
        "norm.bias": "transformer.ln_f.bias",
    }
    names = {
        "attn_norm": "ln_1",
        "ffn_norm": "ln_2",
        "self_attn.qkv_proj": "attn.c_attn",
        "self_attn.out_proj": "attn.c_proj",
        "ffn.fc1": "mlp.c_fc",
        "ffn.fc2": "mlp.c_proj",
    }
    for i in range(len(hf.transformer.h)):
        for ours, theirs in names.items():
            for kind in ("weight", "bias"):
                key = f"transformer.h.{i}.{theirs}.{kind}"
                mapping[f"stack.blocks.{i}.field.{ours}.{kind}"] = key
    with torch.no_grad():
        for ours, p in odet.named_parameters():
            value = sd[mapping[ours]]
            conv1d = ".h." in mapping[ours] and value.dim() == 2
            p.copy_(value.t() if conv1d else value)


def test_odet_euler_lm_and_hf_gpt2_of_one_size_compute_the_same_function() -> None:
    pytest.importorskip("transformers")
    from benchmarks.lm import LM_SIZES, hf_gpt2, odet_lm

    size = LM_SIZES["lm-toy"]
    hf, odet = hf_gpt2(size).eval(), odet_lm(size).eval()
    assert sum(p.numel() for p in hf.parameters()) == odet.num_parameters()
    _gpt2_weights_into_odet(hf, odet)
    x = torch.randint(0, size.vocab_size, (2, size.train_len))
    with torch.no_grad():
        assert torch.allclose(odet(x), hf(input_ids=x).logits, atol=1e-5)
        prompt = x[:1, :4]
        greedy = hf.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=False,
            max_new_tokens=8,
            min_new_tokens=8,
            pad_token_id=0,
        )
    assert torch.equal(odet.generate(prompt, 8, top_k=1, seed=0), greedy)


def test_lm_benchmark_smoke_writes_both_systems_and_the_ratios(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "lm.json"
    argv = ["--lm", "lm-toy", "--quick", "--rounds", "1", "--precisions", "fp32", "--no-compile"]
    argv += ["--out", str(out)]
    assert runner.main(argv) == 0
    (result,) = json.loads(out.read_text())["sizes"]["lm-toy"]["results"]
    assert result["precision"] == "fp32" and result["parameters"] > 0
    for kind in ("train", "sample1", "sample16"):
        assert result[kind]["odet_tokens_per_s"] > 0 and result[kind]["odet_vs_hf"] > 0


@pytest.mark.slow
def test_lm_benchmark_times_the_compiled_step_and_its_compilation(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "lm.json"
    argv = ["--lm", "lm-toy", "--quick", "--rounds", "1", "--precisions", "fp32", "--compiled",
            "--out", str(out)]  # fmt: skip
    assert runner.main(argv) == 0
    (result,) = json.loads(out.read_text())["sizes"]["lm-toy"]["results"]
    train = result["train"]
    assert train["odet_compiled_tokens_per_s"] > 0 and train["compile_s"] > 0
    assert train["odet_compiled_vs_odet"] > 0 and train["odet_compiled_vs_hf"] > 0


def test_keep_freed_memory_runs_every_system_under_odets_allocator_setting(
    tmp_path: Path,
) -> None:
    out, md = tmp_path / "r.json", tmp_path / "R.md"
    argv = ["--quick", "--rounds", "1", "--no-memory", "--no-generation", "--train", "odet-euler",
            "--keep-freed-memory", "--out", str(out), "--markdown", str(md)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in runtime.USER_SETTINGS}
    env.pop("ODET_MALLOC", None)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["environment"]["allocator"] == (
        "odet.runtime.keep_freed_memory"
    )
    assert "allocator: odet.runtime.keep_freed_memory" in md.read_text()
    refused = subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv],
        env={**env, "ODET_MALLOC": "system"},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1:] == [
        "--keep-freed-memory: not available on this system"
    ]


@pytest.mark.parametrize(
    "script",
    [
        "decode_attention",
        "decode_changes",
        "profile_decode",
        "profile_lm_sample",
        "profile_lm_train",
    ],
)
def test_a_benchmark_script_refuses_an_out_that_is_not_a_markdown_file(
    script: str, tmp_path: Path, capsys
) -> None:
    """Each wrote its report over whatever ``--out`` named, after minutes of timing."""
    import importlib

    module = importlib.import_module(f"benchmarks.{script}")
    (tmp_path / "config.yaml").write_text("mine: 1\n")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--out", str(tmp_path / "config.yaml")])
    assert exit_info.value.code == 2
    assert "must name a Markdown (.md) file" in capsys.readouterr().err
    assert (tmp_path / "config.yaml").read_text() == "mine: 1\n"
