"""odet.data."""
