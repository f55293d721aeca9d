"""odet.evaluation."""
