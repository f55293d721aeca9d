import itertools
import json

import pytest
import torch

from odet.config import ConfigError
from odet.models import CheckpointError, EncoderOutput, Seq2Seq, Seq2SeqConfig
from tests.devices import fp32_tolerance

METHODS = ["euler", "rk2", "rk4"]
COMBINATIONS = (
    [(e, d, "fixed") for e, d in itertools.product(METHODS, METHODS)]
    + [(e, d, "gated") for e, d in [("rk2", "euler"), ("euler", "rk2"), ("rk2", "rk2")]]
    + [("rk2", "rk2", "gated_norm")]
)


def small_config(**overrides) -> Seq2SeqConfig:
    options = dict(
        vocab_size=40,
        d_model=32,
        num_heads=4,
        ffn_dim=48,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        max_positions=64,
    )
    options.update(overrides)
    return Seq2SeqConfig(**options)


def lively(model: Seq2Seq) -> Seq2Seq:
    """Scale the weights so a random model's outputs depend on context (not one token forever)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    return model.eval()


def sources(
    batch: int = 3, length: int = 7, seed: int = 0, device: torch.device | str = "cpu"
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (batch, length), generator=g)
    src[1, length - 2 :] = 0  # a padded row
    return src.to(device)


def cached_and_full_logits(
    model: Seq2Seq, src: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, object]:
    """Decoder logits ``(B, 6, V)`` of one random target, step by step through the cache and
    teacher-forced in one pass, and the cache's final state."""
    tgt = torch.randint(4, 40, (src.shape[0], 6))
    tgt[:, 0] = model.config.bos_id
    tgt = tgt.to(src.device)
    with torch.no_grad():
        full = model(src, tgt)
        state = model.init_state(model.encode(src))
        steps = [model.decode(tgt[:, t : t + 1], state=state) for t in range(tgt.shape[1])]
    return torch.cat(steps, dim=1), full, state


@pytest.mark.parametrize(("enc", "dec", "coef"), COMBINATIONS)
def test_incremental_decoding_logits_equal_teacher_forced_logits(enc, dec, coef, device):
    torch.manual_seed(0)
    model = Seq2Seq(small_config(encoder_method=enc, decoder_method=dec, coefficients=coef))
    model = model.eval().to(device)
    steps, full, state = cached_and_full_logits(model, sources(device=device))
    torch.testing.assert_close(steps, full, **fp32_tolerance(device))
    assert state.length == 6
    assert len(state.self_attn) == sum(model.decoder.stage_counts)


@pytest.mark.parametrize(("enc", "dec", "coef"), COMBINATIONS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_generate_with_cache_returns_the_tokens_of_generate_without_cache(
    enc, dec, coef, beam_size, device
):
    torch.manual_seed(1)
    cfg = small_config(
        encoder_method=enc, decoder_method=dec, coefficients=coef, share_decoder_embeddings=False
    )
    model = lively(Seq2Seq(cfg)).double().to(device)
    src = sources(batch=5, seed=1, device=device)
    cached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=True)
    uncached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=False)
    assert cached == uncached
    assert len({tuple(h) for h in cached}) > 1  # a non-degenerate check
    assert any(len(set(h)) > 1 for h in cached)


def test_padding_does_not_leak_into_other_positions_or_rows(device):
    torch.manual_seed(2)
    model = lively(Seq2Seq(small_config(encoder_method="rk2", decoder_method="rk2"))).double()
    model = model.to(device)
    src = sources(seed=2, device=device)
    batch = model.generate(src, beam_size=2, max_len=8)
    alone = [
        model.generate(src[i : i + 1, : (5 if i == 1 else 7)], beam_size=2, max_len=8)[0]
        for i in range(3)
    ]
    assert batch == alone


@pytest.mark.parametrize(
    ("enc", "dec", "coef"),
    [
        ("rk2", "rk2", "gated"),
        ("rk4", "rk4", "learned"),
        ("rk3", "rk2", "ema"),
        ("euler", "rk4", "fixed"),
    ],
)
def test_gradients_reach_every_parameter(enc, dec, coef, device):
    torch.manual_seed(3)
    model = Seq2Seq(
        small_config(
            encoder_method=enc, decoder_method=dec, coefficients=coef, share_gate=coef == "gated"
        )
    ).to(device)
    src, tgt = sources(device=device), torch.randint(4, 40, (3, 5)).to(device)
    model(src, tgt).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_rk_models_have_exactly_the_parameters_of_the_euler_model_plus_gates():
    euler = Seq2Seq(small_config()).num_parameters()
    assert (
        Seq2Seq(small_config(encoder_method="rk4", decoder_method="rk4")).num_parameters() == euler
    )
    gate = 2 * 32 + 1
    gated = Seq2Seq(small_config(encoder_method="rk2", decoder_method="rk2", coefficients="gated"))
    assert gated.num_parameters() == euler + 4 * gate  # one gate per block, 2 + 2 blocks
    shared = Seq2Seq(
        small_config(
            encoder_method="rk2", decoder_method="rk2", coefficients="gated", share_gate=True
        )
    )
    assert shared.num_parameters() == euler + 2 * gate  # one gate per stack


@pytest.mark.parametrize("share_all", [False, True])
def test_save_and_from_pretrained_round_trip_gives_identical_outputs(tmp_path, share_all):
    torch.manual_seed(4)
    cfg = small_config(
        encoder_method="rk2",
        decoder_method="rk4",
        coefficients="learned",
        share_all_embeddings=share_all,
    )
    model = Seq2Seq(cfg).eval()
    model.save_pretrained(tmp_path / "m")
    loaded = Seq2Seq.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == cfg
    src, tgt = sources(), torch.randint(4, 40, (3, 5))
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt), atol=0, rtol=0)
    assert loaded.output_projection.weight is loaded.tgt_embed.weight
    assert (loaded.src_embed is loaded.tgt_embed) == share_all
    header = json.loads((tmp_path / "m" / "config.json").read_text())
    assert header["format_version"] == 1 and header["config"]["decoder_method"] == "rk4"


def test_a_model_saved_on_its_device_loads_on_the_cpu_and_back_with_the_same_weights(
    tmp_path, device
):
    torch.manual_seed(4)
    cfg = small_config(encoder_method="rk2", decoder_method="rk2", coefficients="gated")
    model = Seq2Seq(cfg).eval().to(device)
    model.save_pretrained(tmp_path / "m")
    on_cpu = Seq2Seq.from_pretrained(tmp_path / "m").eval()
    assert {p.device.type for p in on_cpu.parameters()} == {"cpu"}
    assert on_cpu.output_projection.weight is on_cpu.tgt_embed.weight
    for (name, saved), loaded in zip(model.state_dict().items(), on_cpu.state_dict().values()):
        torch.testing.assert_close(loaded, saved.cpu(), atol=0, rtol=0, msg=name)
    back = Seq2Seq.from_pretrained(tmp_path / "m", map_location=device).eval()
    src, tgt = sources(device=device), torch.randint(4, 40, (3, 5)).to(device)
    with torch.no_grad():
        torch.testing.assert_close(back(src, tgt), model(src, tgt), atol=0, rtol=0)
        torch.testing.assert_close(
            on_cpu(src.cpu(), tgt.cpu()), model(src, tgt).cpu(), **fp32_tolerance(device)
        )


def test_from_pretrained_reports_missing_corrupt_and_mismatched_directories(tmp_path):
    with pytest.raises(CheckpointError, match="not a model directory"):
        Seq2Seq.from_pretrained(tmp_path / "nope")
    with pytest.raises(CheckpointError, match=r"config.json is missing"):
        Seq2Seq.from_pretrained(tmp_path)
    Seq2Seq(small_config()).save_pretrained(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        Seq2Seq.from_pretrained(tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    header = json.loads(config.read_text())
    header["format_version"] = 99
    config.write_text(json.dumps(header))
    with pytest.raises(CheckpointError, match="format_version 99"):
        Seq2Seq.from_pretrained(tmp_path / "m")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 30}, r"d_model \(30\) must be divisible by num_heads \(4\)"),
        (
            {"encoder_method": "rk5"},
            r"encoder_method = 'rk5' is not a known method \(did you mean 'rk4'\?\)",
        ),
        ({"coefficients": "gated", "encoder_method": "rk4"}, "'gated' needs a two-stage method"),
        (
            {"coefficients": "gate"},
            r"coefficients = 'gate' \(str\) is invalid; expected 'fixed' \| 'learned'",
        ),
        ({"dropout": 1.5}, r"dropout must lie in \[0, 1\)"),
        ({"encoder_layers": 0}, "encoder_layers must be >= 1"),
        ({"d_model": "512"}, r"d_model = '512' \(str\) is invalid; expected int"),
        ({"share_all_embeddings": True, "tgt_vocab_size": 50}, "needs one joint vocabulary"),
        ({"bos_id": 0}, "special ids must be distinct"),
    ],
)
def test_bad_config_values_are_rejected_with_a_message_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        small_config(**overrides)


@pytest.mark.parametrize("data", [None, [("vocab_size", 10)], "vocab_size: 10"])
def test_a_config_that_is_not_a_mapping_is_a_config_error(data):
    """It was an AttributeError ('list' object has no attribute 'get')."""
    with pytest.raises(ConfigError, match=f"model: expected a mapping, got {type(data).__name__}"):
        Seq2SeqConfig.from_dict(data)  # type: ignore[arg-type]


def test_from_pretrained_names_a_map_location_that_is_no_device(tmp_path):
    """It was reported as a corrupt weights file."""
    Seq2Seq(small_config()).save_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match="map_location 'gpu' is not a device this torch can use"):
        Seq2Seq.from_pretrained(tmp_path / "m", map_location="gpu")


def test_unknown_config_key_suggests_the_nearest_valid_key():
    with pytest.raises(
        ConfigError,
        match=r"unknown config key 'model.encoder_layer' \(did you mean 'encoder_layers'\?\)",
    ):
        Seq2SeqConfig.from_dict({"vocab_size": 10, "encoder_layer": 3})
    assert Seq2SeqConfig.from_dict(small_config().to_dict()) == small_config()


def test_bad_inputs_give_clear_errors():
    model = Seq2Seq(small_config()).eval()
    tgt = torch.full((1, 1), 2)
    with pytest.raises(
        ValueError, match="src_tokens has length 65, longer than the model's max_positions=64"
    ):
        model(torch.randint(4, 40, (1, 65)), tgt)
    with pytest.raises(ValueError, match="src_tokens is an empty batch"):
        model(torch.zeros(0, 5, dtype=torch.long), tgt)
    with pytest.raises(
        TypeError,
        match=r"must be an integer tensor of token ids \(torch.long\), got torch.float32",
    ):
        model(torch.rand(1, 5), tgt)
    with pytest.raises(ValueError, match=r"token id 40 outside the vocabulary \[0, 40\)"):
        model(torch.full((1, 3), 40), tgt)
    with pytest.raises(ValueError, match=r"rows \[0\] contain only padding"):
        model(torch.zeros(1, 3, dtype=torch.long), tgt)
    with pytest.raises(ValueError, match=r"must have shape \(batch, length\)"):
        model(torch.ones(5, dtype=torch.long), tgt)


def test_a_target_batch_that_does_not_match_its_sources_is_an_error_not_a_broadcast():
    """One source and two targets used to give two rows of logits, both reading the one
    source's memory; three sources and two targets failed deep in attention."""
    model = Seq2Seq(small_config()).eval()
    src, tgt = sources(batch=3), torch.full((2, 4), 2)
    for bad_src in (src[:1], src):
        with pytest.raises(ValueError, match=r"tgt_tokens has batch size 2 but encoder_out "):
            model(bad_src, tgt)
    state = model.init_state(model.encode(src[:2]))
    model.decode(tgt[:, :1], state=state)
    with pytest.raises(ValueError, match="batch size 1 but the DecoderState holds 2 rows"):
        model.decode(tgt[:1, :1], state=state)


def test_a_hand_made_encoder_output_of_the_wrong_kind_is_named():
    model = Seq2Seq(small_config()).eval()
    encoded = model.encode(sources(batch=2))
    memory, mask = encoded.memory, encoded.padding_mask
    tgt = torch.full((2, 3), 2)
    bad = {
        "padding_mask must be a bool \\(batch, src_len\\) = \\(2, 7\\) tensor, True at "
        "padding, got torch.int64": EncoderOutput(memory, mask.long()),
        "got torch.float32 \\(2, 7\\)": EncoderOutput(memory, (~mask).float()),
        "got torch.bool \\(7, 2\\)": EncoderOutput(memory, mask.t()),
        "memory must be a floating \\(batch, src_len, d_model=32\\)": EncoderOutput(
            memory[..., :16], mask
        ),
        "memory is torch.float64 but the model is torch.float32": EncoderOutput(
            memory.double(), mask
        ),
    }
    for message, encoder_out in bad.items():
        with pytest.raises(ValueError, match=message):
            model.decode(tgt, encoder_out)
    with pytest.raises(TypeError, match="must be the EncoderOutput of encode"):
        model.decode(tgt, memory)  # type: ignore[arg-type]


def test_generate_refuses_a_truthy_non_bool_flag_and_a_min_len_above_max_len():
    model = Seq2Seq(small_config()).eval()
    with pytest.raises(TypeError, match="use_cache must be True or False, got 'no'"):
        model.generate(sources(), use_cache="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"min_len \(10\) must be <= max_len \(3\)"):
        model.generate(sources(), max_len=3, min_len=10)  # was shortened to 3 silently


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_checks_token_ids_once_per_call_not_at_every_step(use_cache, monkeypatch):
    """The ids check is a reduction read on the host (a device sync): the source is checked
    once; the decoder's own tokens at each step are in range by construction."""
    model = Seq2Seq(small_config()).eval()
    checked: list[str] = []
    check = Seq2Seq._check_tokens

    def counting(self, name, tokens, vocab_size):
        checked.append(name)
        check(self, name, tokens, vocab_size)

    monkeypatch.setattr(Seq2Seq, "_check_tokens", counting)
    hyps = model.generate(sources(), beam_size=2, max_len=6, min_len=6, use_cache=use_cache)
    assert [len(h) for h in hyps] == [6, 6, 6]
    assert checked == ["src_tokens"]


@pytest.mark.parametrize("decoder_method", ["euler", "rk2"])
def test_cached_beam_search_equals_uncached_when_sentences_finish_at_different_times(
    decoder_method, device
):
    """Finished sentences leave the batch, so the beams' shared memory rows are pruned."""
    torch.manual_seed(1)
    cfg = small_config(decoder_method=decoder_method, share_decoder_embeddings=False)
    model = lively(Seq2Seq(cfg)).double()
    with torch.no_grad():  # EOS scores follow a group of tokens: sentences end at varied steps
        weight = model.output_projection.weight
        weight[model.config.eos_id] = weight[10:20].mean(0) * 4
    model = model.to(device)
    src = sources(batch=6, seed=1, device=device)
    cached = model.generate(src, beam_size=3, max_len=12, use_cache=True)
    assert cached == model.generate(src, beam_size=3, max_len=12, use_cache=False)
    assert len({len(h) for h in cached}) > 2
