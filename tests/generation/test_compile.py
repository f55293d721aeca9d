"""``generation.compile``: decoding with the cached step under ``torch.compile`` gives the
tokens and (to rounding) the log-probabilities of eager decoding."""

import pytest
import torch

from odet.generation import GenerationConfig
from odet.models import Seq2Seq
from odet.models.seq2seq import compiled_next_log_probs, next_log_probs
from tests.models.test_seq2seq import lively, small_config, sources

pytestmark = pytest.mark.slow  # each decoder method compiles its step graphs (tens of seconds)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def model_for(decoder_method: str) -> Seq2Seq:
    torch.manual_seed(1)
    cfg = small_config(decoder_method=decoder_method, share_decoder_embeddings=False)
    return lively(Seq2Seq(cfg)).double()


@pytest.mark.parametrize("decoder_method", ["euler", "rk2", "rk4"])
def test_compiled_decoding_returns_the_tokens_of_eager_decoding(decoder_method):
    model = model_for(decoder_method)
    src = sources(batch=5, seed=1)
    for beam_size in (1, 5):
        eager = model.generate(src, beam_size=beam_size, max_len=8)
        before = compiled_graphs()
        assert model.generate(src, beam_size=beam_size, max_len=8, compile=True) == eager
        assert compiled_graphs() > before or beam_size > 1  # greedy compiled a graph
    assert len({tuple(h) for h in eager}) > 1


@pytest.mark.parametrize("decoder_method", ["euler", "rk2", "rk4"])
def test_compiled_step_log_probs_equal_eager_ones(decoder_method):
    model = model_for(decoder_method)
    encoder_out = model.encode(sources(batch=4, seed=2))
    eager_state, compiled_state = model.init_state(encoder_out), model.init_state(encoder_out)
    tokens = torch.randint(4, 40, (4, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            column = tokens[:, t : t + 1].clone()
            expected = next_log_probs(model, column, eager_state)
            got = compiled_next_log_probs()(model, column, compiled_state)
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    assert compiled_state.length == eager_state.length == tokens.shape[1]
    assert compiled_graphs() >= 1


def test_compile_is_a_typed_generation_option():
    assert GenerationConfig().compile is False
    assert GenerationConfig(compile=True).compile is True
    with pytest.raises(ValueError, match="compile"):
        GenerationConfig(compile="yes")  # type: ignore[arg-type]
