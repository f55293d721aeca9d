"""Relative position representations against Shaw et al.'s formula written out term by term."""

from __future__ import annotations

import pytest
import torch

from odet.nn.attention import attention_mask
from odet.nn.relative import RelativePositions, relative_attention


def shaw_reference(q, k, v, a_k, a_v, max_distance, keep):
    """e_ij = q_i·(k_j + a^K_clip(j−i))/√d; z_i = Σ_j α_ij (v_j + a^V_clip(j−i)), loops only."""
    b, h, tq, d = q.shape
    s = k.shape[2]
    out = torch.zeros_like(q)
    for n in range(b):
        for head in range(h):
            for i in range(tq):
                pos = s - tq + i
                logits = []
                for j in range(s):
                    r = min(max(j - pos, -max_distance), max_distance) + max_distance
                    e = (q[n, head, i] @ (k[n, head, j] + a_k[r])) / d**0.5
                    logits.append(
                        e if keep[n, i, j] else torch.tensor(float("-inf"), dtype=q.dtype)
                    )
                alpha = torch.softmax(torch.stack(logits), dim=0)
                for j in range(s):
                    r = min(max(j - pos, -max_distance), max_distance) + max_distance
                    value = v[n, head, j] + (a_v[r] if a_v is not None else 0.0)
                    out[n, head, i] += alpha[j] * value
    return out


@pytest.mark.parametrize("values", [False, True], ids=["keys-only", "keys+values"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_relative_attention_matches_shaws_formula_with_clipping_and_padding(values, causal):
    torch.manual_seed(0)
    b, h, s, d, k_max = 2, 3, 7, 4, 2  # distances up to 6 are clipped to 2
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.float64) for _ in range(3))
    rel = RelativePositions(d, k_max, values=values).double()
    padding = torch.zeros(b, s, dtype=torch.bool)
    padding[1, 5:] = True
    mask = attention_mask(padding, s, s, causal)
    keep = mask.expand(b, 1, s, s)[:, 0]
    got = relative_attention(q, k, v, rel, mask)
    want = shaw_reference(q, k, v, rel.keys, rel.values, k_max, keep)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_decoding_step_sees_the_distances_of_teacher_forcing():
    torch.manual_seed(1)
    b, h, s, d = 2, 2, 6, 4
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.float64) for _ in range(3))
    rel = RelativePositions(d, 3, values=True).double()
    full = relative_attention(q, k, v, rel, attention_mask(None, s, s, causal=True))
    for t in range(1, s + 1):  # query t-1 against the t keys seen so far
        step = relative_attention(q[:, :, t - 1 : t], k[:, :, :t], v[:, :, :t], rel, None)
        torch.testing.assert_close(step[:, :, 0], full[:, :, t - 1], rtol=0, atol=1e-12)


def test_index_is_clipped_distance_plus_offset():
    rel = RelativePositions(4, 2)
    assert rel.index(3, 3).tolist() == [[2, 3, 4], [1, 2, 3], [0, 1, 2]]
    assert rel.index(1, 5).tolist() == [[0, 0, 0, 1, 2]]  # the newest query of five positions


def test_gradients_reach_the_relative_embeddings():
    rel = RelativePositions(4, 2, values=True)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    relative_attention(q, k, v, rel, None).square().sum().backward()
    assert rel.keys.grad.abs().sum() > 0 and rel.values.grad.abs().sum() > 0


def test_max_distance_below_one_is_rejected():
    with pytest.raises(ValueError, match="max_distance must be >= 1, got 0"):
        RelativePositions(4, 0)
