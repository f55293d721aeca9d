"""odet.training."""
