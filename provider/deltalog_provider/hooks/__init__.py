"""Hooks: ``DeltaTableHook`` resolves tables and storage options from a ``deltalog`` connection."""

from deltalog_provider.hooks.delta_table import DeltaTableHook

__all__ = ["DeltaTableHook"]
