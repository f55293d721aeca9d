"""odet's benchmark suite against its peers (HF Marian, ``torch.nn.Transformer``; CTranslate2 in
generation, where installed).

Run ``python -m benchmarks`` (full, several minutes) or ``python -m benchmarks --quick`` (toy
size, under a minute); ``python -m benchmarks.profile_decode`` profiles odet's beam search. See
``benchmarks/RESULTS.md`` for the method and the latest figures.
"""
