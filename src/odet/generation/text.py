"""Old location of :class:`~odet.generation.GenerationConfig`, kept until every importer uses
``odet.generation``; the translator it held is :class:`odet.inference.Translator`."""

from odet.generation.config import GenerationConfig

__all__ = ["GenerationConfig"]
