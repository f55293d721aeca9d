"""Strategies on hand-made tensors: ranking, n-gram bans, truncation, stopping and options."""

from __future__ import annotations

import math

import pytest
import torch

from odet.generation import (
    STRATEGIES,
    BeamSearch,
    Greedy,
    Sampling,
    ban_repeated_ngrams,
    length_normalise,
    make_strategy,
)

inf = math.inf


def test_length_normalise_divides_by_length_to_the_penalty():
    assert length_normalise(-6.0, 3, 1.0) == -2.0
    assert length_normalise(-6.0, 4, 0.5) == -3.0
    assert length_normalise(-6.0, 4, 0.0) == -6.0
    with pytest.raises(ValueError, match="counts EOS"):
        length_normalise(-1.0, 0, 1.0)


@pytest.mark.parametrize(
    ("prefix", "n", "banned"),
    [
        ([2, 4, 5, 4], 2, {5}),  # bigram (4, 5) seen; last token 4
        ([2, 4, 5, 4, 5], 3, {4}),  # trigram (4, 5, 4) seen; last two 4 5
        ([2, 4, 5, 4], 3, set()),  # no trigram starts with (5, 4)
        ([2, 4, 5], 1, {2, 4, 5}),  # unigrams: every token already used
        ([2, 4], 3, set()),  # shorter than n
        ([2, 4, 4, 4], 2, {4}),
    ],
)
def test_ban_repeated_ngrams_bans_exactly_the_completing_tokens(prefix, n, banned):
    out = ban_repeated_ngrams(torch.zeros(1, 8), torch.tensor([prefix]), n)
    assert {i for i in range(8) if out[0, i] == -inf} == banned


def test_ban_repeated_ngrams_works_row_by_row():
    prefix = torch.tensor([[2, 4, 5, 4], [2, 6, 6, 7]])
    out = ban_repeated_ngrams(torch.zeros(2, 8), prefix, 2)
    assert (out == -inf).nonzero().tolist() == [[0, 5]]


def test_greedy_selects_the_argmax_of_each_group():
    log_probs = torch.tensor([[[-2.0, -0.5, -1.0]], [[-0.1, -3.0, -2.5]]]).log_softmax(-1)
    sel = Greedy().select(log_probs, torch.zeros(2, 1), torch.zeros(2, 1, 1, dtype=torch.long))
    assert sel.tokens.tolist() == [[1], [0]]
    assert sel.origins.tolist() == [[0], [0]]
    assert sel.log_probs[:, 0].tolist() == [log_probs[0, 0, 1].item(), log_probs[1, 0, 0].item()]


@pytest.mark.parametrize("v", [3, 1000, 1013])
def test_greedy_argmax_on_large_vocabularies(v):
    gen = torch.Generator().manual_seed(1)
    log_probs = torch.randn(5, 1, v, generator=gen).log_softmax(-1)
    log_probs[2, 0, v - 1] = 0.0
    sel = Greedy().select(log_probs, torch.zeros(5, 1), torch.zeros(5, 1, 1, dtype=torch.long))
    best, tokens = log_probs[:, 0].max(dim=-1, keepdim=True)
    assert torch.equal(sel.tokens, tokens) and torch.equal(sel.log_probs, best)


def test_beam_ranks_all_continuations_of_all_beams_by_running_log_prob():
    lp = math.log
    log_probs = torch.tensor(
        [[[lp(0.1), lp(0.2), lp(0.7)], [lp(0.5), lp(0.4), lp(0.1)]]], dtype=torch.float64
    )
    scores = torch.tensor([[lp(0.6), lp(0.4)]], dtype=torch.float64)
    sel = BeamSearch(beam_size=2).select(log_probs, scores, torch.zeros(1, 2, 1, dtype=torch.long))
    # 0.6*0.7=0.42, 0.4*0.5=0.20, 0.4*0.4=0.16, 0.6*0.2=0.12
    assert sel.tokens.tolist() == [[2, 0, 1, 1]]
    assert sel.origins.tolist() == [[0, 1, 1, 0]]
    assert torch.allclose(
        sel.log_probs.exp(), torch.tensor([[0.7, 0.5, 0.4, 0.2]], dtype=torch.float64)
    )


@pytest.mark.parametrize("v", [50, 400, 410])
@pytest.mark.parametrize("k_in", [1, 4])
def test_beam_ranks_like_a_top_k_over_every_continuation(k_in, v):
    # 400 and 410 tokens take the chunked two-pass ranking (410: with tokens past the last
    # whole chunk); 50 the direct one. The reference ranks every (row, token) sum at once.
    g, beam = 6, 4
    gen = torch.Generator().manual_seed(0)
    log_probs = torch.randn(g, k_in, v, dtype=torch.float64, generator=gen).log_softmax(-1)
    log_probs[:, :, :3] = -math.inf
    log_probs[0, 0, 10:] = -math.inf  # a row with fewer finite tokens than candidates
    log_probs[1, :, v - 1] = 0.0  # the best token in the last position
    scores = torch.randn(g, k_in, dtype=torch.float64, generator=gen).abs().neg()
    sel = BeamSearch(beam_size=beam).select(log_probs, scores, torch.zeros(g, k_in, 1).long())

    total = (scores.unsqueeze(-1) + log_probs).view(g, k_in * v)
    ref = total.topk(2 * beam, dim=-1)
    assert torch.equal(scores.gather(1, sel.origins) + sel.log_probs, ref.values)
    finite = torch.isfinite(ref.values)
    assert torch.equal(sel.tokens[finite], (ref.indices % v)[finite])
    assert torch.equal(sel.origins[finite], (ref.indices // v)[finite])
    assert torch.equal(sel.log_probs, log_probs.view(g, -1).gather(1, sel.origins * v + sel.tokens))


def test_beam_is_done_with_early_stopping_counts_finished_hypotheses():
    beam = BeamSearch(beam_size=2, early_stopping=True)
    assert not beam.is_done([-1.0], best_live_log_prob=-0.1, live_length=1, max_len=5)
    assert beam.is_done([-1.0, -2.0], best_live_log_prob=-0.1, live_length=1, max_len=5)


@pytest.mark.parametrize(
    ("length_penalty", "best_live", "done"),
    [
        # lp 1: best reachable -3/(max_len + 1) = -0.5 vs the finished -0.6 / -0.4.
        (1.0, -3.0, {-0.6: False, -0.4: True}),
        # lp 0: the log-prob itself is the bound.
        (0.0, -3.0, {-3.1: False, -2.9: True}),
        # lp -1: longer only hurts, the bound is -3 * (live_length + 1) = -9.
        (-1.0, -3.0, {-9.5: False, -8.5: True}),
    ],
)
def test_exact_beam_stops_only_when_no_live_beam_can_win(length_penalty, best_live, done):
    beam = BeamSearch(beam_size=2, length_penalty=length_penalty, early_stopping=False)
    for finished_score, expected in done.items():
        assert beam.is_done([finished_score], best_live, live_length=2, max_len=5) is expected
    assert not beam.is_done([], best_live, live_length=2, max_len=5)


def test_sampling_truncates_to_top_k_and_to_the_nucleus():
    logits = torch.tensor([[0.5, 0.3, 0.2, 0.0]]).log()
    kept = lambda s: (torch.isfinite(s.truncate(logits))[0]).tolist()  # noqa: E731
    assert kept(Sampling(top_k=2)) == [True, True, False, False]
    assert kept(Sampling(top_p=0.45)) == [True, False, False, False]
    assert kept(Sampling(top_p=0.6)) == [True, True, False, False]
    assert kept(Sampling(top_p=0.85)) == [True, True, True, False]
    assert kept(Sampling(top_p=0.01)) == [True, False, False, False]
    assert kept(Sampling(top_k=3, top_p=0.6)) == [True, True, False, False]


def test_sampling_scores_with_untempered_model_log_probs():
    log_probs = torch.tensor([[[0.25, 0.75]]]).log()
    strategy = Sampling(temperature=0.01, generator=torch.Generator().manual_seed(0))
    sel = strategy.select(log_probs, torch.zeros(1, 1), torch.zeros(1, 1, 1, dtype=torch.long))
    assert sel.tokens.tolist() == [[1]]
    assert sel.log_probs.item() == pytest.approx(math.log(0.75))


@pytest.mark.parametrize("temperature", [1e-30, 1e-300, 5e-324])
def test_a_tiny_temperature_samples_the_best_token_instead_of_nans(temperature):
    """``log_probs / T`` overflows to ``-inf`` for every token (or NaN where it is 0) when T is
    tiny; shifting each row to a maximum of 0 first keeps the best token."""
    log_probs = torch.tensor([[[0.25, 0.75]], [[0.6, 0.4]]]).log()
    strategy = Sampling(temperature=temperature, generator=torch.Generator().manual_seed(0))
    tempered = strategy.temper(log_probs[:, 0])
    assert tempered.softmax(-1).tolist() == [[0.0, 1.0], [1.0, 0.0]]
    for seed in range(5):
        strategy = Sampling(temperature=temperature, generator=torch.Generator().manual_seed(seed))
        sel = strategy.select(log_probs, torch.zeros(2, 1), torch.zeros(2, 1, 1, dtype=torch.long))
        assert sel.tokens.tolist() == [[1], [0]]


def test_make_strategy_builds_each_registered_strategy():
    assert set(STRATEGIES) == {"greedy", "beam", "sample"}
    assert make_strategy("greedy") == Greedy()
    assert make_strategy("beam", beam_size=4, length_penalty=0.6) == BeamSearch(4, 0.6)
    sampler = make_strategy("sample", seed=5, top_k=10)
    assert isinstance(sampler, Sampling) and sampler.top_k == 10
    same_seed = make_strategy("sample", seed=5, top_k=10)
    assert torch.equal(sampler.generator.get_state(), same_seed.generator.get_state())


def test_make_strategy_makes_a_beam_of_one_greedy_unless_it_bans_ngrams_or_searches_on():
    assert make_strategy("beam", beam_size=1, length_penalty=0.6) == Greedy(0.6)
    assert make_strategy("beam", beam_size=1, no_repeat_ngram_size=2) == BeamSearch(1, 1.0, 2)
    exact = make_strategy("beam", beam_size=1, early_stopping=False)
    assert exact == BeamSearch(1, early_stopping=False)


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("nucleus", {}, "unknown strategy 'nucleus'"),
        ("beam", {"beam_sise": 4}, r"unknown option\(s\) \['beam_sise'\]"),
        ("greedy", {"num_return": 2}, "unknown option"),
        ("beam", {"beam_size": 0}, "beam_size must be an integer >= 1"),
        ("beam", {"beam_size": True}, "beam_size"),
        ("beam", {"beam_size": 2, "num_return": 3}, "num_return must be <= beam_size"),
        ("beam", {"beam_size": 2, "no_repeat_ngram_size": -1}, "no_repeat_ngram_size"),
        ("beam", {"beam_size": 2, "length_penalty": math.nan}, "length_penalty"),
        ("beam", {"beam_size": 2, "early_stopping": "never"}, "early_stopping"),
        ("sample", {"temperature": 0.0}, "temperature must be > 0"),
        ("sample", {"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ("sample", {"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ("sample", {"top_k": -1}, "top_k"),
        ("sample", {"seed": -3}, "seed"),
        ("sample", {"seed": 1, "generator": torch.Generator()}, "either seed or generator"),
    ],
)
def test_make_strategy_rejects_bad_names_and_options(name, options, match):
    with pytest.raises(ValueError, match=match):
        make_strategy(name, **options)


def test_a_sampling_seed_outside_what_a_generator_takes_is_named():
    """2**70 failed in torch with 'Overflow when unpacking long long'."""
    for seed in (2**70, -1, 1.5, True):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64 - 1\]"):
            make_strategy("sample", seed=seed)
    assert make_strategy("sample", seed=2**64 - 1).generator is not None
