import math

import pytest
import torch

from odet.nn.time import (
    TIME_CONDITIONINGS,
    ConcatTime,
    TimeConditionedEncoderField,
    make_time_conditioning,
    time_column,
    time_features,
)

D, HEADS, FFN = 8, 2, 16


def _field(conditioning: str, *, layer_norm: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    field = TimeConditionedEncoderField(
        D, HEADS, FFN, time_conditioning=conditioning, layer_norm=layer_norm
    )
    return field.double().eval()


def _with_same_sublayers(conditioning: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The ``"none"`` field and a ``conditioning`` field sharing attention/FFN/norm weights."""
    none = _field("none")
    other = _field(conditioning, seed=1)
    missing, unexpected = other.load_state_dict(none.state_dict(), strict=False)
    assert not unexpected and all("_time." in key for key in missing)
    return none, other


def _z(batch: int = 3, length: int = 5) -> torch.Tensor:
    return torch.randn(batch, length, D, generator=torch.Generator().manual_seed(2)).double()


def test_time_features_match_hand_computed_sines_and_cosines():
    t = torch.tensor([0.0, math.pi / 2], dtype=torch.float64)
    feats = time_features(t, dim=4, max_frequency=3.0)  # frequencies 1 and 3
    expected = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, -1.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(feats, expected, atol=1e-12, rtol=0)


def test_film_equals_time_independent_field_at_initialisation():
    none, film = _with_same_sublayers("film")
    z = _z()
    for t in (0.0, 0.3, 1.0):
        torch.testing.assert_close(film(t, z), none(t, z), atol=0, rtol=0)


def test_embedding_with_zero_projection_reduces_to_time_independent_field():
    none, embedding = _with_same_sublayers("embedding")
    for module in (embedding.attn_time, embedding.ffn_time):
        torch.nn.init.zeros_(module.proj.weight)
        torch.nn.init.zeros_(module.proj.bias)
    torch.testing.assert_close(embedding(0.7, _z()), none(0.7, _z()), atol=0, rtol=0)


def test_concat_is_input_plus_time_times_its_column_at_initialisation():
    concat = ConcatTime(D, max_frequency=10.0).double()
    x, t = _z(), torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64)
    u = concat.proj.weight[:, D]  # the time column
    torch.testing.assert_close(concat(x, t), x + t[:, None, None] * u, atol=1e-12, rtol=0)


@pytest.mark.parametrize("conditioning", ["concat", "embedding", "film"])
def test_conditioned_fields_depend_on_time_and_differ_from_none(conditioning):
    none, field = _with_same_sublayers(conditioning)
    if conditioning == "film":  # identity at init: give it a time dependence
        for module in (field.attn_time, field.ffn_time):
            torch.nn.init.normal_(module.proj.weight, std=0.5)
    z = _z()
    assert not torch.allclose(field(0.5, z), none(0.5, z), atol=1e-6)
    assert not torch.allclose(field(0.0, z), field(1.0, z), atol=1e-6)


def test_none_field_ignores_time():
    field = _field("none")
    torch.testing.assert_close(field(0.0, _z()), field(0.9, _z()), atol=0, rtol=0)


@pytest.mark.parametrize("conditioning", list(TIME_CONDITIONINGS))
def test_float_time_equals_per_sample_tensor_time(conditioning):
    field = _field(conditioning)
    z = _z()
    as_float = field(0.25, z)
    as_tensor = field(torch.full((3,), 0.25, dtype=torch.float64), z)
    torch.testing.assert_close(as_float, as_tensor, atol=0, rtol=0)


def test_per_sample_times_condition_each_sample_separately():
    field = _field("embedding")
    z, t = _z(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    batched = field(t, z)
    for i in range(3):
        torch.testing.assert_close(batched[i : i + 1], field(float(t[i]), z[i : i + 1]))


def test_layer_norm_false_builds_the_n_ode_field_without_layer_norm():
    field = _field("film", layer_norm=False)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in field.modules())
    assert any(isinstance(m, torch.nn.LayerNorm) for m in _field("film").modules())


def test_padding_does_not_reach_real_positions():
    field = _field("concat")
    z = _z(batch=1, length=4)
    mask = torch.tensor([[False, False, False, True]])
    garbage = z.clone()
    garbage[0, 3] = 100.0
    out = field(0.3, garbage, padding_mask=mask)
    torch.testing.assert_close(out[:, :3], field(0.3, z[:, :3]))


def test_unknown_conditioning_and_bad_time_shape_are_rejected():
    with pytest.raises(ValueError, match=r"unknown time_conditioning 'flim'.*'film'"):
        make_time_conditioning("flim", D)
    with pytest.raises(ValueError, match="max_frequency must be"):
        make_time_conditioning("film", D, max_frequency=0.5)
    with pytest.raises(ValueError, match=r"t must be .* got shape \(2,\)"):
        time_column(torch.zeros(2), torch.zeros(3, 4, D))
