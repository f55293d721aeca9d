"""Analysis of trained models: per-block update sizes and learned coefficients."""
