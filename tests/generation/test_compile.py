"""``generation.compile``: decoding with the cached step under ``torch.compile`` gives the
tokens and (to rounding) the log-probabilities of eager decoding."""

import pytest
import torch

from odet.generation import GenerationConfig
from odet.models import Seq2Seq
from odet.models.seq2seq import compiled_next_log_probs, next_log_probs
from tests.models.test_seq2seq import lively, small_config, sources


@pytest.fixture
def dynamo_counters():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


@pytest.mark.slow  # compiles two step graphs per decoder method (a minute each on a busy CPU)
@pytest.mark.parametrize("decoder_method", ["euler", "rk2", "rk4"])
def test_compiled_decoding_equals_eager_decoding(decoder_method, dynamo_counters):
    torch.manual_seed(1)
    cfg = small_config(decoder_method=decoder_method, share_decoder_embeddings=False)
    model = lively(Seq2Seq(cfg)).double()

    encoder_out = model.encode(sources(batch=4, seed=2))
    eager_state, compiled_state = model.init_state(encoder_out), model.init_state(encoder_out)
    tokens = torch.randint(4, 40, (4, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            column = tokens[:, t : t + 1].clone()
            expected = next_log_probs(model, column, eager_state)
            step = compiled_next_log_probs() if t >= 2 else next_log_probs
            got = step(model, column, compiled_state)
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert compiled_state.length == eager_state.length == tokens.shape[1]

    src = sources(batch=5, seed=1)
    for beam_size in (1, 5):
        eager = model.generate(src, beam_size=beam_size, max_len=8)
        assert model.generate(src, beam_size=beam_size, max_len=8, compile=True) == eager
        assert len({tuple(h) for h in eager}) > 1
    # greedy and beam layouts, and a batch down to one row (size-1 dims are specialised)
    assert 1 <= dynamo_counters["stats"]["unique_graphs"] <= 3
    assert not dynamo_counters["graph_break"]


def test_compile_is_a_typed_generation_option():
    assert GenerationConfig().compile is False
    assert GenerationConfig(compile=True).compile is True
    with pytest.raises(ValueError, match="compile"):
        GenerationConfig(compile="yes")  # type: ignore[arg-type]
