"""One source of truth for the special token ids: ``odet.data``'s constants, which a trained
tokenizer has and which a model config takes by default."""

import dataclasses

import torch

from odet.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, pad_tokens
from odet.models import Seq2SeqConfig

CORPUS = ["the cat sat on the mat", "a dog runs in the park", "two men walk down a street"] * 10


def test_a_trained_tokenizers_special_ids_are_the_model_configs():
    tokenizer = Tokenizer.train(CORPUS, vocab_size=40)
    config = Seq2SeqConfig(vocab_size=tokenizer.vocab_size)
    ids = {"pad": config.pad_id, "unk": config.unk_id, "bos": config.bos_id, "eos": config.eos_id}
    pieces = {name: tokenizer.id_to_piece(token) for name, token in ids.items()}
    assert pieces == {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}
    assert tokenizer.decode([config.bos_id, *tokenizer.encode("the cat"), config.eos_id, 5]) == (
        "the cat"
    )
    assert config.unk_id in tokenizer.encode("the ☃")


def test_config_defaults_are_the_data_constants():
    defaults = {f.name: f.default for f in dataclasses.fields(Seq2SeqConfig)}
    assert (defaults["pad_id"], defaults["unk_id"], defaults["bos_id"], defaults["eos_id"]) == (
        PAD_ID,
        UNK_ID,
        BOS_ID,
        EOS_ID,
    )


def test_batches_pad_with_the_configs_pad_id():
    config = Seq2SeqConfig(vocab_size=40)
    batch = pad_tokens([[7], [7, 8, 9]], prepend_bos=True, append_eos=True)
    assert batch.tolist() == [
        [config.bos_id, 7, config.eos_id, config.pad_id, config.pad_id],
        [config.bos_id, 7, 8, 9, config.eos_id],
    ]
    assert batch.dtype == torch.long
