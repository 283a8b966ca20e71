"""Execution engines for heavy data work: ``spark/`` (the local pyarrow engine is ``deltalog.compaction.local``)."""

__all__: list[str] = []
