"""Vacuum keeps what Iceberg readers need: the files a UniForm table's Iceberg snapshots still reference.

The Iceberg side of a table (:mod:`deltalog.uniform.iceberg_references`: which snapshots readers
may still use, the files their manifests list) is made table-relative here with vacuum's one
path rule (:class:`~deltalog.vacuuming.paths.PathResolver`: every spelling of the root, ``s3``
vs ``s3a``, ``file:/`` vs ``file:///``, symlinked parents) and held as a labelled
:class:`~deltalog.vacuuming.path_set.PathSet`: exact below 100,000 paths, 64-bit fingerprints
above (16 bytes a referenced file, the manifests streamed a batch at a time, never a table of
Python objects). A path outside the table root is not this table's to delete: it is counted and
never protected or deleted here (vacuum deletes only inside the root anyway).

Both engines and every mode apply it the same way, after their own verdicts: a planned file
the set holds is taken out of the plan and listed as kept for Iceberg, with the snapshot that
needs it (:meth:`IcebergGuard.split`). Executing a plan checks the metadata again
(:meth:`IcebergGuard.revalidate`): a metadata file written since planning (Delta Spark's
converter after its next commit, ours) adds what its new snapshots reference.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log.actions import Metadata
from deltalog.storage.filesystem import FileInfo, Storage
from deltalog.uniform.iceberg_references import (
    IcebergReferences,
    list_metadata_files,
    read_iceberg_references,
)
from deltalog.vacuuming.path_set import PathSet, PathSetBuilder
from deltalog.vacuuming.paths import PathResolver
from deltalog.vacuuming.verdict import PLAN_SCHEMA
from deltalog.write_checks.hidden_paths import HiddenRule, partition_dir_names

__all__ = ["IcebergGuard", "empty_kept", "iceberg_rule"]

log = logging.getLogger(__name__)

#: Labels: 2 x snapshot index, +1 for the snapshot's own metadata (manifest lists, manifests, statistics).
_METADATA = 1


def empty_kept() -> pa.Table:
    """No file kept for Iceberg (``PLAN_SCHEMA``: the reason says which snapshot needs the file)."""
    return PLAN_SCHEMA.empty_table()


def iceberg_rule(metadata: Metadata, iceberg: IcebergGuard | None) -> HiddenRule:
    """The table's hidden-path rule, with ``metadata/`` hidden whenever Iceberg metadata is there (not only on
    UniForm tables): vacuum never lists or deletes the metadata Iceberg readers open."""
    rule = HiddenRule.for_metadata(metadata)
    if iceberg is None or rule.iceberg:
        return rule
    return HiddenRule(partition_dir_names(metadata), iceberg=True)


def _seen(files: list[FileInfo]) -> dict[str, tuple[int, int]]:
    return {f.name: (f.size, f.modification_time) for f in files}


@dataclass(frozen=True)
class IcebergGuard:
    """The files the Iceberg snapshots readers may still use reference, table-relative, and why."""

    references: IcebergReferences
    protected: PathSet
    #: Referenced paths outside the table root: not this table's files, never deleted here.
    outside: int = 0
    #: The metadata files read (name -> size, modification time): what re-validation compares.
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Guards of metadata written after this one was made (re-validation).
    later: list[IcebergGuard] = field(default_factory=list)

    @classmethod
    def load(
        cls, storage: Storage, cutoff_ms: int, *, skip_manifests: frozenset[str] | set[str] = frozenset()
    ) -> IcebergGuard | None:
        """The guard of the Iceberg metadata beside ``storage``'s table (None: there is none).

        Raises :class:`~deltalog.uniform.iceberg_references.IcebergMetadataError` or
        :class:`~deltalog.uniform.iceberg_references.ForeignIcebergMetadataError` (refusals: nothing may
        be deleted while what Iceberg readers need is unknown).
        """
        files = list_metadata_files(storage)
        if not files:
            return None
        resolver = PathResolver(storage)
        references = read_iceberg_references(storage, cutoff_ms, resolver.relative_literal, files=files)
        if references is None:
            return None
        builder = PathSetBuilder()
        outside = 0
        for batch in references.batches(skip_manifests):
            relative, out = _relative_paths(resolver, batch.paths)
            outside += out
            builder.add(relative, 2 * batch.snapshot + (_METADATA if batch.kind == "metadata" else 0))
        guard = cls(references, builder.build(), outside, _seen(files))
        log.info(
            "Iceberg readers of %s: %d snapshots kept (%d manifest lists, %d manifests, %d entries read), "
            "%d referenced paths%s",
            storage.uri,
            len(references.snapshots),
            references.manifest_lists_read,
            len(references.manifests_read),
            references.entries_read,
            len(guard.protected),
            f", {outside} outside the table root (not this table's files)" if outside else "",
        )
        return guard

    # --- what it keeps ------------------------------------------------------------------------

    def _reason(self, label: int) -> str:
        snap = self.references.snapshots[label // 2]
        what = "metadata of" if label % 2 == _METADATA else "referenced by"
        return f"kept for Iceberg readers: {what} {snap.describe()}"

    def split(self, files: pa.Table) -> tuple[pa.Table, pa.Table]:
        """``files`` (``PLAN_SCHEMA``) as (still to delete, kept for Iceberg with the reason why)."""
        if not files.num_rows:
            return files, empty_kept()
        paths = files.column("path")
        labels = self.protected.labels_of(paths)
        for i, later in enumerate(self.later, start=1):
            more = later.protected.labels_of(paths)
            labels = np.where((labels < 0) & (more >= 0), more + _LATER * i, labels)
        hit = labels >= 0
        if not hit.any():
            return files, empty_kept()
        mask = pa.array(hit)
        kept = files.filter(mask)
        reasons = [self._reason_of(int(label)) for label in labels[hit]]
        kept = kept.set_column(kept.schema.get_field_index("reason"), "reason", pa.array(reasons, pa.string()))
        return files.filter(pc.invert(mask)), kept

    def keeps(self, relative: pa.Array) -> tuple[np.ndarray, list[str]]:
        """Which of these table-relative paths Iceberg readers may still need (a bool per path), and why
        (one reason per snapshot that needs some of them: what ``maintenance_due`` says)."""
        labels = self.protected.labels_of(relative) if len(relative) else np.full(0, -1, dtype=np.int64)
        for i, later in enumerate(self.later, start=1):
            more = later.protected.labels_of(relative)
            labels = np.where((labels < 0) & (more >= 0), more + _LATER * i, labels)
        hit = labels >= 0
        return hit, sorted({self._reason_of(int(label)) for label in labels[hit]})

    def _reason_of(self, label: int) -> str:
        if label < _LATER:
            return self._reason(label)
        return self.later[label // _LATER - 1]._reason(label % _LATER)

    # --- re-validation before deleting ----------------------------------------------------------

    def manifests_read(self) -> set[str]:
        out = set(self.references.manifests_read)
        for later in self.later:
            out |= later.manifests_read()
        return out

    @staticmethod
    def revalidate(storage: Storage, guard: IcebergGuard | None, cutoff_ms: int) -> IcebergGuard | None:
        """The guard to delete under: ``guard`` (planning's), plus what metadata written since references.

        The metadata folder is listed again; when a metadata file appeared or changed, every
        metadata file is read again (refusing as planning does) and only manifests not read
        before are read. Returns None when there is no Iceberg metadata, then or now.
        """
        now = _seen(list_metadata_files(storage))
        if guard is None:
            return IcebergGuard.load(storage, cutoff_ms) if now else None
        seen = dict(guard.seen)
        for later in guard.later:
            seen.update(later.seen)
        if all(seen.get(name) == info for name, info in now.items()):
            return guard
        fresh = IcebergGuard.load(storage, cutoff_ms, skip_manifests=guard.manifests_read())
        if fresh is not None:
            guard.later.append(fresh)
            for w in fresh.references.warnings:
                log.warning("vacuum %s: %s", storage.uri, w)
            log.info("vacuum %s: Iceberg metadata written since planning was read again", storage.uri)
        return guard

    # --- reporting -------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        refs = self.references
        return {
            "iceberg_metadata_files": len(refs.metadata_files),
            "iceberg_snapshots_kept": len(refs.snapshots),
            "iceberg_manifests_read": len(refs.manifests_read),
            "iceberg_entries_read": refs.entries_read,
            "iceberg_paths_referenced": len(self.protected),
            "iceberg_paths_outside_table": self.outside,
        }

    def to_dict(self) -> dict[str, Any]:
        """What the plan shows of the Iceberg side: the metadata files and the snapshots kept, and why."""
        refs = self.references
        return {
            "metadata_files": [m.to_dict() for m in refs.metadata_files],
            "snapshots": [s.to_dict() for s in refs.snapshots],
            "paths_outside_table": self.outside,
            "warnings": list(refs.warnings),
        }


#: Labels of a later guard (re-validation) are offset by multiples of this.
_LATER = 1 << 40


def _relative_paths(resolver: PathResolver, uris: pa.Array) -> tuple[pa.Array, int]:
    """Table-relative forms of Iceberg's absolute paths (literal, and percent-decoded when escaped), and how
    many lie outside the table root. Paths under a literal spelling of the root are cut vectorised."""
    rest = pc.fill_null(pc.invert(pc.equal(uris, "")), False)
    out: list[pa.Array] = []
    for prefix in resolver.literal_prefixes():
        hit = pc.and_(rest, pc.starts_with(uris, prefix))
        if not pc.any(hit).as_py():
            continue
        tails = pc.utf8_slice_codeunits(uris.filter(hit), len(prefix))
        plain = pc.invert(PathResolver.needs_resolving(tails))
        if pc.all(plain).as_py():
            out.append(tails)
            rest = pc.and_(rest, pc.invert(hit))
            continue
        out.append(tails.filter(plain))
        # The others (dot segments, doubled slashes, ':' or '%') are placed one by one below.
        rest = pc.and_(rest, pc.invert(pc.and_(hit, _scatter(hit, plain))))
    outside = 0
    odd: list[str] = []
    for uri in uris.filter(rest).to_pylist():
        forms = {resolver.relative_literal(uri)}
        if "%" in uri:
            forms.add(resolver.relative_literal(unquote(uri)))
        forms.discard(None)
        if not forms:
            outside += 1
        odd.extend(f for f in forms if f)
    if odd:
        out.append(pa.array(odd, pa.string()))
    return (pa.concat_arrays(out) if out else pa.array([], pa.string())), outside


def _scatter(mask: pa.Array, values: pa.Array) -> pa.Array:
    """``values`` (one per true of ``mask``) spread back over ``mask``'s positions (false elsewhere)."""
    full = np.zeros(len(mask), dtype=bool)
    full[np.flatnonzero(mask.to_numpy(zero_copy_only=False))] = values.to_numpy(zero_copy_only=False)
    return pa.array(full)
