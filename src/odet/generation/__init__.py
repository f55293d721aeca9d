"""odet.generation."""
