"""Does a decode depend on the KV cache or on the batch? fp32 against the int8 variants.

For the first ``--n`` test sentences of a trained model, in batches of ``--batch``: beam search
with the cache against without it, and each batch against its sentences decoded one by one;
counts of identical best hypotheses per variant (``int8``: per-row activation scales;
``int8-qdyn``: ``quantize_dynamic``, one scale per tensor)::

    python -m benchmarks.int8_consistency RUN_DIR/avg5 --src test.en.gz --n 96
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.int8_multi30k import VARIANTS
from odet.data import pad_tokens
from odet.evaluation.files import read_all_lines
from odet.inference import load_model_and_tokenizers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--src", required=True)
    parser.add_argument("--n", type=int, default=96)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8", "int8-qdyn"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, tokenizers = load_model_and_tokenizers(args.model)
    model.eval()
    eos = model.config.eos_id
    encoded = [[*tokenizers.source.encode(s), eos] for s in read_all_lines(args.src)[: args.n]]
    print(f"{args.n} sentences, batches of {args.batch}, beam {args.beam}")
    for name in args.variants:
        decoding = VARIANTS[name](model)
        cache_same = batch_same = 0
        with torch.no_grad():
            for start in range(0, len(encoded), args.batch):
                rows = encoded[start : start + args.batch]
                src = pad_tokens(rows)
                cached = decoding.generate(src, beam_size=args.beam, use_cache=True)
                uncached = decoding.generate(src, beam_size=args.beam, use_cache=False)
                alone = [decoding.generate(pad_tokens([r]), beam_size=args.beam)[0] for r in rows]
                cache_same += sum(a == b for a, b in zip(cached, uncached, strict=True))
                batch_same += sum(a == b for a, b in zip(cached, alone, strict=True))
        print(
            f"{name}: cached == uncached {cache_same} / {len(encoded)}; "
            f"batched == alone {batch_same} / {len(encoded)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
