"""odet.analysis."""
