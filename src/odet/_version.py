"""The package version: one place, read by the package, its run and model files, and the build
(``pyproject.toml``)."""

__version__ = "0.1.0"
