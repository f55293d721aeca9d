"""End-to-end decoding with scripted decoders: exact hypotheses and hand-computed scores."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from odet.generation import BeamSearch, Greedy, Hypothesis, Sampling, generate
from odet.generation.strategies import SearchStrategy
from tests.generation.scripted import (
    BOS,
    EOS,
    PAD,
    A,
    B,
    C,
    D,
    Script,
    ScriptedDecoder,
    UncachedScriptedDecoder,
)

log = math.log

# Greedy takes A (0.6) then C: 0.24; beam 2 also keeps B and finds B C: 0.36.
SUBOPTIMAL: Script = {
    (): {A: 0.6, B: 0.4},
    (A,): {C: 0.4, D: 0.35, EOS: 0.25},
    (B,): {C: 0.9, EOS: 0.1},
}
# A constant distribution: repeats A forever unless something stops it.
REPEAT: Script = lambda generated: {A: 0.5, B: 0.3, EOS: 0.2}  # noqa: E731
# Stops at once (0.45) or continues to A B (0.4455): the length penalty picks the winner.
SHORT_OR_LONG: Script = {
    (): {A: 0.55, EOS: 0.45},
    (A,): {B: 0.9, C: 0.1},
    (A, B): {EOS: 0.9, D: 0.1},
}


def run(
    strategy: SearchStrategy,
    scripts: list[Script],
    *,
    max_len: int = 10,
    min_len: int = 0,
    cached: bool = True,
) -> tuple[list[list[Hypothesis]], UncachedScriptedDecoder]:
    decoder = ScriptedDecoder(scripts) if cached else UncachedScriptedDecoder(scripts)
    hyps = generate(
        decoder,
        len(scripts),
        strategy,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
        max_len=max_len,
        min_len=min_len,
    )
    return hyps, decoder


def assert_hyp(hyp: Hypothesis, tokens: list[int], log_prob: float, lp: float = 1.0) -> None:
    assert hyp.tokens == tokens
    assert hyp.log_prob == pytest.approx(log_prob, rel=1e-12, abs=1e-12)
    assert hyp.score == pytest.approx(log_prob / (len(tokens) + 1) ** lp, rel=1e-12, abs=1e-12)


def test_greedy_takes_the_argmax_path_with_exact_scores_and_no_reorder():
    hyps, decoder = run(Greedy(), [SUBOPTIMAL])
    assert len(hyps) == 1 and len(hyps[0]) == 1
    assert_hyp(hyps[0][0], [A, C], log(0.6 * 0.4))
    assert hyps[0][0].token_log_probs == pytest.approx([log(0.6), log(0.4), 0.0])
    assert decoder.rows_per_step == [1, 1, 1]
    assert decoder.reorders == []


def test_beam_two_finds_the_better_sequence_greedy_misses():
    hyps, decoder = run(BeamSearch(beam_size=2, num_return=2), [SUBOPTIMAL])
    assert_hyp(hyps[0][0], [B, C], log(0.4 * 0.9))
    assert_hyp(hyps[0][1], [A, C], log(0.6 * 0.4))
    # One BOS row expands to two beams; then B C comes from row 1 and A C from row 0.
    assert decoder.rows_per_step == [1, 2, 2]
    assert decoder.reorders == [[0, 0], [1, 0]]


def test_beam_n_best_lists_all_finished_hypotheses_best_first():
    hyps, _ = run(BeamSearch(beam_size=3, num_return=3), [SUBOPTIMAL])
    assert [h.tokens for h in hyps[0]] == [[B, C], [A, C], [A, D]]
    for hyp, p in zip(hyps[0], [0.4 * 0.9, 0.6 * 0.4, 0.6 * 0.35], strict=True):
        assert_hyp(hyp, hyp.tokens, log(p))


def test_beam_finalises_only_eos_candidates_ranked_within_the_beam():
    script: Script = {
        (): {A: 0.5, B: 0.3, EOS: 0.2},
        (A,): {C: 0.6, EOS: 0.4},
        (B,): {C: 0.9, EOS: 0.1},
    }
    # EOS ranks third at steps 1 and 2 (0.2 after A 0.5, B 0.3; A EOS 0.2 after A C 0.3,
    # B C 0.27), so it never finishes a hypothesis: [] and [A] are not in the n-best list.
    hyps, decoder = run(BeamSearch(beam_size=2, num_return=2), [script])
    assert_hyp(hyps[0][0], [A, C], log(0.5 * 0.6))
    assert_hyp(hyps[0][1], [B, C], log(0.3 * 0.9))
    assert decoder.rows_per_step == [1, 2, 2]


def test_beam_of_one_equals_greedy():
    scripts = [SUBOPTIMAL, SHORT_OR_LONG, REPEAT]
    assert (
        run(BeamSearch(beam_size=1), scripts, max_len=5)[0] == run(Greedy(), scripts, max_len=5)[0]
    )


@pytest.mark.parametrize(
    ("length_penalty", "tokens", "log_prob"),
    [(0.0, [], log(0.45)), (1.0, [A, B], log(0.55 * 0.9 * 0.9))],
)
def test_length_penalty_decides_between_short_and_long_hypotheses(length_penalty, tokens, log_prob):
    hyps, _ = run(BeamSearch(beam_size=2, length_penalty=length_penalty), [SHORT_OR_LONG])
    assert_hyp(hyps[0][0], tokens, log_prob, length_penalty)


def test_early_stopping_stops_at_beam_size_finished_while_exact_search_goes_on():
    script: Script = {
        (): {A: 0.55, EOS: 0.45},
        (A,): {B: 0.9, EOS: 0.1},
        (A, B): {EOS: 0.9, C: 0.1},
    }
    early, early_decoder = run(BeamSearch(2, early_stopping=True), [script], max_len=4)
    # [] and [A] finish in the first two steps: two finished hypotheses end the search.
    assert_hyp(early[0][0], [], log(0.45))
    assert early_decoder.rows_per_step == [1, 2]
    exact, exact_decoder = run(BeamSearch(2, early_stopping=False), [script], max_len=4)
    # A B EOS scores log(0.4455)/3 = -0.27; the live A B C (log 0.0495 = -3.0) can reach at
    # best -3.0/5 = -0.60 within max_len 4, so the search stops after step 3.
    assert_hyp(exact[0][0], [A, B], log(0.55 * 0.9 * 0.9))
    assert exact_decoder.rows_per_step == [1, 2, 2]


def test_min_len_bans_an_early_eos():
    script: Script = {(): {EOS: 0.6, A: 0.4}}
    assert_hyp(run(Greedy(), [script])[0][0][0], [], log(0.6))
    assert_hyp(run(Greedy(), [script], min_len=1)[0][0][0], [A], log(0.4))
    # Beam search: the second beam is a zero-probability filler row, which ends the search.
    hyps, _ = run(BeamSearch(2, num_return=2), [script], min_len=1)
    assert len(hyps[0]) == 1
    assert_hyp(hyps[0][0], [A], log(0.4))


def test_max_len_forces_eos_scored_with_its_model_probability():
    hyps, decoder = run(Greedy(), [REPEAT], max_len=3)
    assert_hyp(hyps[0][0], [A, A, A], 3 * log(0.5) + log(0.2))
    assert hyps[0][0].token_log_probs == pytest.approx([log(0.5)] * 3 + [log(0.2)])
    assert decoder.rows_per_step == [1, 1, 1, 1]
    assert_hyp(run(Greedy(), [REPEAT], max_len=0)[0][0][0], [], log(0.2))
    assert_hyp(run(BeamSearch(2), [REPEAT], max_len=2)[0][0][0], [A, A], 2 * log(0.5) + log(0.2))


def test_no_repeat_ngram_bans_repeated_bigrams_and_unigrams():
    hyps, _ = run(BeamSearch(1, no_repeat_ngram_size=2), [REPEAT])
    # A A, then (A, A) is banned -> B, then A, then both (A, A) and (A, B) are banned -> EOS.
    assert_hyp(hyps[0][0], [A, A, B, A], 3 * log(0.5) + log(0.3) + log(0.2))
    hyps, _ = run(BeamSearch(1, no_repeat_ngram_size=1), [REPEAT])
    assert_hyp(hyps[0][0], [A, B], log(0.5) + log(0.3) + log(0.2))
    hyps, _ = run(BeamSearch(1), [REPEAT], max_len=4)
    assert_hyp(hyps[0][0], [A, A, A, A], 4 * log(0.5) + log(0.2))


def test_sentences_finishing_at_different_steps_leave_the_batch():
    scripts: list[Script] = [
        {(): {A: 1.0}},
        {(): {B: 0.5, C: 0.3, EOS: 0.2}, (B,): {C: 0.8, EOS: 0.2}, (B, C): {D: 0.7, EOS: 0.3}},
        {(): {EOS: 0.9, A: 0.1}},
    ]
    hyps, decoder = run(Greedy(), scripts)
    assert_hyp(hyps[0][0], [A], 0.0)
    assert_hyp(hyps[1][0], [B, C, D], log(0.5 * 0.8 * 0.7))
    assert_hyp(hyps[2][0], [], log(0.9))
    assert decoder.rows_per_step == [3, 2, 1, 1]
    assert decoder.reorders == [[0, 1], [1]]


def test_batched_beam_search_equals_one_sentence_at_a_time():
    scripts = [SUBOPTIMAL, {(): {EOS: 0.7, A: 0.3}}, SHORT_OR_LONG]
    strategy = BeamSearch(beam_size=2, num_return=2, no_repeat_ngram_size=2)
    batched, decoder = run(strategy, scripts)
    assert batched == [run(strategy, [script])[0][0] for script in scripts]
    # One row per sentence at first, then two beams each; the second sentence ends after step 2.
    assert decoder.rows_per_step == [3, 6, 4]
    assert decoder.reorders[0] == [0, 0, 1, 1, 2, 2]
    assert_hyp(batched[1][0], [], log(0.7))
    assert_hyp(batched[1][1], [A], log(0.3))


@pytest.mark.parametrize(
    "strategy",
    [
        Greedy(),
        BeamSearch(beam_size=3, num_return=3, no_repeat_ngram_size=2),
        BeamSearch(beam_size=2, early_stopping=False, length_penalty=0.6),
    ],
    ids=["greedy", "beam3-ngram", "beam2-exact"],
)
def test_cached_and_uncached_decoders_give_identical_results(strategy):
    scripts = [SUBOPTIMAL, REPEAT, SHORT_OR_LONG]
    assert (
        run(strategy, scripts, max_len=6)[0] == run(strategy, scripts, max_len=6, cached=False)[0]
    )


def test_cached_and_uncached_decoders_sample_identically_with_equal_seeds():
    scripts = [REPEAT] * 4

    def sample(cached: bool) -> list[list[Hypothesis]]:
        strategy = Sampling(num_return=2, generator=torch.Generator().manual_seed(7))
        return run(strategy, scripts, max_len=8, cached=cached)[0]

    assert sample(True) == sample(False)


def test_scripted_decoder_fails_on_a_wrong_reorder():
    decoder = ScriptedDecoder([SUBOPTIMAL, SUBOPTIMAL])
    decoder.step(torch.tensor([[BOS], [BOS]]))
    decoder.reorder(torch.tensor([1, 0]))
    decoder.step(torch.tensor([[BOS, A], [BOS, B]]))
    decoder.reorder(torch.tensor([1, 0]))
    with pytest.raises(AssertionError):
        decoder.step(torch.tensor([[BOS, A, C], [BOS, B, C]]))


def test_sampling_is_reproducible_with_a_seeded_generator():
    def sample(seed: int) -> list[list[Hypothesis]]:
        strategy = Sampling(generator=torch.Generator().manual_seed(seed))
        return run(strategy, [REPEAT] * 8, max_len=8)[0]

    assert sample(3) == sample(3)


@pytest.mark.parametrize(
    "sampler", [Sampling(top_k=1), Sampling(temperature=1e-3)], ids=["top_k=1", "temperature=1e-3"]
)
def test_sampling_degenerates_to_greedy(sampler):
    scripts = [SUBOPTIMAL, SHORT_OR_LONG, REPEAT]
    assert run(sampler, scripts, max_len=5)[0] == run(Greedy(), scripts, max_len=5)[0]


def test_sampling_draws_tokens_with_the_model_probabilities():
    strategy = Sampling(generator=torch.Generator().manual_seed(0))
    hyps, _ = run(strategy, [{(): {A: 0.7, EOS: 0.3}}] * 1000)
    counts = Counter(tuple(nbest[0].tokens) for nbest in hyps)
    assert set(counts) == {(), (A,)}
    assert counts[(A,)] / 1000 == pytest.approx(0.7, abs=0.05)


def test_top_p_sampling_keeps_the_nucleus_and_scores_with_model_probabilities():
    strategy = Sampling(top_p=0.6, generator=torch.Generator().manual_seed(0))
    hyps, _ = run(strategy, [{(): {A: 0.5, B: 0.3, C: 0.2}}] * 1000)
    counts = Counter(nbest[0].tokens[0] for nbest in hyps)
    assert set(counts) == {A, B}
    assert counts[A] / 1000 == pytest.approx(0.5 / 0.8, abs=0.05)
    assert {nbest[0].log_prob for nbest in hyps} == {log(0.5), log(0.3)}


def test_sampling_several_returns_expands_each_sentence_and_ranks_samples():
    strategy = Sampling(num_return=3, generator=torch.Generator().manual_seed(1))
    hyps, decoder = run(strategy, [REPEAT, REPEAT], max_len=6)
    assert decoder.reorders[0] == [0, 0, 0, 1, 1, 1]
    assert decoder.rows_per_step[0] == 6
    for nbest in hyps:
        assert len(nbest) == 3
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        for h in nbest:
            expected = [{A: log(0.5), B: log(0.3)}[t] for t in h.tokens] + [log(0.2)]
            assert h.token_log_probs == pytest.approx(expected)
            assert h.log_prob == pytest.approx(sum(expected))


def test_bos_equal_to_eos_is_allowed_and_pad_is_never_generated():
    decoder = ScriptedDecoder([{(): {PAD: 0.5, A: 0.3, EOS: 0.2}}], bos_id=EOS)
    hyps = generate(decoder, 1, Greedy(), bos_id=EOS, eos_id=EOS, pad_id=PAD, max_len=5)
    assert_hyp(hyps[0][0], [A], log(0.3))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_len": 3, "max_len": 2}, "min_len"),
        ({"max_len": -1}, "max_len"),
        ({"pad_id": EOS}, "pad_id"),
        ({"bos_id": -1}, "bos_id"),
        ({"eos_id": 8}, "vocabulary"),
    ],
)
def test_generate_rejects_bad_arguments(kwargs, match):
    options = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD, "max_len": 5} | kwargs
    with pytest.raises(ValueError, match=match):
        generate(ScriptedDecoder([SUBOPTIMAL]), 1, Greedy(), **options)


def test_beam_larger_than_the_vocabulary_is_rejected():
    with pytest.raises(ValueError, match="vocabulary of at least 9"):
        run(BeamSearch(beam_size=8), [SUBOPTIMAL])


@pytest.mark.parametrize(
    "strategy",
    [Greedy(), BeamSearch(2), Sampling(generator=torch.Generator().manual_seed(0))],
    ids=["greedy", "beam", "sample"],
)
def test_a_sentence_with_no_allowed_continuation_gets_an_empty_list(strategy):
    # EOS is the only token with probability > 0 and min_len bans it.
    hyps, decoder = run(strategy, [{(): {EOS: 1.0}}, SUBOPTIMAL], min_len=1)
    assert hyps[0] == []
    assert len(hyps[1]) == 1
    # The dead sentence leaves the batch after the first step.
    assert set(decoder.reorders[0]) == {1}


def test_a_strategy_that_never_stops_after_eos_is_reported():
    class NeverDone(Greedy):
        def is_done(self, finished, best_live_log_prob, live_length, max_len):
            return False

    with pytest.raises(RuntimeError, match="fewer than K=1 non-EOS candidates"):
        run(NeverDone(), [{(): {EOS: 1.0}}])


def test_half_precision_log_probs_accumulate_in_float32():
    class HalfDecoder(ScriptedDecoder):
        def step(self, prefix: torch.Tensor) -> torch.Tensor:
            return super().step(prefix).to(torch.bfloat16)

    hyps = generate(
        HalfDecoder([REPEAT]), 1, Greedy(), bos_id=BOS, eos_id=EOS, pad_id=PAD, max_len=3
    )
    assert hyps[0][0].tokens == [A, A, A]
    bf16 = lambda p: torch.tensor(log(p)).to(torch.bfloat16).item()  # noqa: E731
    assert hyps[0][0].log_prob == pytest.approx(3 * bf16(0.5) + bf16(0.2), rel=1e-6)


def test_empty_batch_returns_no_hypotheses():
    assert run(Greedy(), [])[0] == []


def test_the_loop_says_how_many_consecutive_rows_decode_one_sentence():
    # The scripted decoders also check every promise against the rows' source sentences.
    _, beam = run(BeamSearch(beam_size=2, num_return=2), [SUBOPTIMAL, SHORT_OR_LONG], max_len=4)
    assert beam.reorders[0] == [0, 0, 1, 1] and set(beam.rows_per_source) == {2}
    # Sentence 0 ends one step before sentence 1: both samples of each always share it.
    scripts: list[Script] = [{(): {A: 1.0}}, {(): {A: 1.0}, (A,): {A: 1.0}}]
    strategy = Sampling(num_return=2, generator=torch.Generator().manual_seed(0))
    _, sampler = run(strategy, scripts)
    assert sampler.reorders == [[0, 0, 1, 1], [2, 3]]
    assert sampler.rows_per_source == [2, 2]
    # One sentence: its surviving samples are always one block.
    strategy = Sampling(num_return=4, generator=torch.Generator().manual_seed(3))
    _, single = run(strategy, [REPEAT], max_len=8)
    assert single.rows_per_source == [len(index) for index in single.reorders]
