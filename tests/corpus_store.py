"""The Delta Spark corpus kept in the repo as test data, so a cold run (CI) builds no table.

Building the 24 corpus tables in Delta Spark takes 15-30 minutes on a loaded 2-core
machine, and every first CI run of a turn starts with empty caches. The tables are small
(about 0.2 MB each), so each one is kept, as Delta Spark wrote it, under
``tests/data/delta_spark_corpus/<name>/``:

- ``entry.json``: the table's entry (what ``tests/delta_spark.py`` records when it builds
  one: per version Delta Spark's row count, content hash and replay), its key
  (``table_key``: the recipe, its history and the entry format) and the Delta Spark and
  Spark versions that wrote it. A table Delta Spark could not build has only this file,
  with the error.
- ``files.json``: every file and directory of the table with its size, SHA-256 and
  modification time (nanoseconds). A checkout gives every file the time of the
  checkout, but vacuum and log cleanup go by modification times (untracked files,
  commit times without in-commit timestamps), so the stored copy gets the times of the
  build back when it is copied out; the hashes catch a copy changed on the way (an
  end-of-line conversion, a Git LFS pointer, a hand edit).
- ``table/``: the table's files, byte for byte.

The tests use a stored table only when its key and versions equal today's (else the
cache, else a build), and always through a private copy (``materialize``);
``tests/test_corpus_store.py`` fails while a stored table is missing, stale or changed,
naming the command that regenerates it (``scripts/corpus_tables.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "REGENERATE",
    "STORE_ROOT",
    "StoredCorpusError",
    "StoredTable",
    "materialize",
    "read_stored",
    "stale_reason",
    "stored_names",
    "verify",
    "write_stored",
]

STORE_ROOT = Path(__file__).resolve().parent / "data" / "delta_spark_corpus"
ENTRY = "entry.json"
MANIFEST = "files.json"
TABLE = "table"
#: The command that rebuilds what is stale or missing (a Delta Spark session; minutes per table).
REGENERATE = ".venv/bin/python scripts/corpus_tables.py"


class StoredCorpusError(Exception):
    """A stored table whose files are not the ones its manifest lists."""


@dataclass(frozen=True)
class StoredTable:
    """One table of the repo's corpus: its entry, its manifest and where its files are."""

    name: str
    root: Path
    entry: dict[str, Any]
    manifest: dict[str, Any]
    #: Hash of ``entry.json`` and ``files.json``: names the private copy made from this version.
    digest: str

    @property
    def table_dir(self) -> Path:
        return self.root / TABLE

    @property
    def built(self) -> bool:
        """False for a recipe Delta Spark could not build (the entry holds the error, there are no files)."""
        return "error" not in self.entry


def stored_names(root: Path | None = None) -> list[str]:
    """The names of the stored tables (folders with an ``entry.json``)."""
    root = root or STORE_ROOT
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / ENTRY).is_file())


def read_stored(name: str, root: Path | None = None) -> StoredTable | None:
    """The stored table ``name``, or None when the repo keeps none."""
    folder = (root or STORE_ROOT) / name
    entry_file, manifest_file = folder / ENTRY, folder / MANIFEST
    if not entry_file.is_file():
        return None
    raw_entry = entry_file.read_bytes()
    raw_manifest = manifest_file.read_bytes() if manifest_file.is_file() else b"{}"
    digest = hashlib.sha256(raw_entry + b"\0" + raw_manifest).hexdigest()[:12]
    return StoredTable(name, folder, json.loads(raw_entry), json.loads(raw_manifest), digest)


def stale_reason(stored: StoredTable, key: str, versions: dict[str, str]) -> str | None:
    """Why ``stored`` is not the table today's recipe would build (None: it is).

    ``versions`` names the engines that must have written it (``{"delta_spark": ..., "spark": ...}``).
    """
    got = stored.entry.get("key")
    if got != key:
        return f"stored key {got}, the recipe's key is now {key} (the recipe, its history or the entry format changed)"
    for what, want in versions.items():
        if stored.entry.get(what) != want:
            return f"written by {what} {stored.entry.get(what)}, the tests now use {want}"
    if stored.built and not stored.manifest.get("files"):
        return "no files.json listing the table's files"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _listing(table_dir: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """(files, directories) under ``table_dir``, by POSIX path relative to it."""
    files, dirs = {}, {}
    for here, subdirs, names in os.walk(table_dir):
        for d in subdirs:
            p = Path(here) / d
            dirs[p.relative_to(table_dir).as_posix()] = p
        for n in names:
            p = Path(here) / n
            files[p.relative_to(table_dir).as_posix()] = p
    return files, dirs


def verify(stored: StoredTable) -> list[str]:
    """Where the stored files differ from the manifest (missing, extra, size or content); empty when they agree.

    Directories are not compared: Git keeps no empty one, and ``materialize`` makes every one listed.
    """
    if not stored.built:
        return []
    listed: dict[str, dict[str, Any]] = stored.manifest.get("files", {})
    files, _ = _listing(stored.table_dir)
    problems = [f"{stored.name}: {rel} is listed but missing" for rel in sorted(set(listed) - set(files))]
    problems += [f"{stored.name}: {rel} is not listed in {MANIFEST}" for rel in sorted(set(files) - set(listed))]
    for rel in sorted(set(listed) & set(files)):
        want, path = listed[rel], files[rel]
        if path.stat().st_size != want["size"] or _sha256(path) != want["sha256"]:
            problems.append(f"{stored.name}: {rel} differs from the file Delta Spark wrote (size or SHA-256)")
    return problems


def materialize(stored: StoredTable, dest: Path) -> None:
    """Copy the stored table to ``dest`` (which must not exist) with the build's modification times.

    Raises :class:`StoredCorpusError` when the stored files are not the listed ones.
    """
    problems = verify(stored)
    if problems:
        raise StoredCorpusError(
            f"the stored corpus table {stored.name} is not the one its manifest lists "
            f"(regenerate it: {REGENERATE} {stored.name}):\n" + "\n".join(problems[:10])
        )
    listed: dict[str, dict[str, Any]] = stored.manifest["files"]
    dirs: dict[str, int] = stored.manifest.get("dirs", {})
    dest.mkdir(parents=True)
    for rel in sorted(dirs):
        (dest / rel).mkdir(parents=True, exist_ok=True)
    for rel, meta in listed.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stored.table_dir / rel, target)
        os.utime(target, ns=(meta["mtime_ns"], meta["mtime_ns"]))
    # Directory times last (creating their files changed them), deepest first.
    for rel in sorted(dirs, key=lambda r: r.count("/"), reverse=True):
        os.utime(dest / rel, ns=(dirs[rel], dirs[rel]))


def write_stored(name: str, entry: dict[str, Any], table_dir: Path | None, root: Path | None = None) -> StoredTable:
    """Store a table (replacing what the repo kept of ``name``): its entry, its files and their manifest.

    ``table_dir`` is None for a recipe Delta Spark could not build (only the entry, with the error).
    """
    root = root or STORE_ROOT
    folder = root / name
    staging = root / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    manifest: dict[str, Any] = {}
    if table_dir is not None:
        files, dirs = _listing(table_dir)
        manifest = {
            "files": {
                rel: {"size": p.stat().st_size, "sha256": _sha256(p), "mtime_ns": p.stat().st_mtime_ns}
                for rel, p in sorted(files.items())
            },
            "dirs": {rel: p.stat().st_mtime_ns for rel, p in sorted(dirs.items())},
        }
        shutil.copytree(table_dir, staging / TABLE)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (staging / ENTRY).write_text(json.dumps(entry, sort_keys=True) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    stored = read_stored(name, root)
    assert stored is not None
    return stored
