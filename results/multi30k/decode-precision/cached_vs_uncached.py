"""fp32 cached against uncached beam search (beam 5) of one Multi30k recipe model on test2016:
the tokens and (to 1e-4) the scores of every best hypothesis. From the repository root:
``python results/multi30k/decode-precision/cached_vs_uncached.py MODEL_DIR`` (~10 min, 1 thread).
"""

import gzip
import sys

import torch

from odet.data import pad_tokens
from odet.generation import GenerationConfig
from odet.inference import Translator

DATA = "../shared/data/multi30k/tok/test_2016_flickr.lc.norm.tok.en.gz"

torch.set_num_threads(1)
with gzip.open(DATA, "rt", encoding="utf-8") as handle:
    lines = handle.read().splitlines()
translator = Translator.from_checkpoint(sys.argv[1], "best", GenerationConfig())
encoded = translator.encode(lines)
strategy = translator.config.make_strategy()
same = total = 0
with torch.no_grad():
    for i in range(0, len(encoded), 50):
        src = pad_tokens(encoded[i : i + 50])
        max_len = int(1.5 * src.shape[1] + 10)
        cached = translator.model.search(src, strategy, max_len, use_cache=True)
        uncached = translator.model.search(src, strategy, max_len, use_cache=False)
        for x, y in zip(cached, uncached, strict=True):
            total += 1
            same += x[0].tokens == y[0].tokens and abs(x[0].score - y[0].score) < 1e-4
print(f"{sys.argv[1]}: cached == uncached (tokens, score ±1e-4): {same} / {total} sentences")
