"""odet's benchmark suite against its peers (HF Marian, ``torch.nn.Transformer``).

Run ``python -m benchmarks`` (full, several minutes) or ``python -m benchmarks --quick`` (toy
size, under a minute). See ``benchmarks/RESULTS.md`` for the method and the latest figures.
"""
