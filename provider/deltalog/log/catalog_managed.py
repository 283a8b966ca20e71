"""Catalog-managed tables read from storage alone: what deltalog can see of them, and saying so.

PROTOCOL.md "Catalog-managed tables": the managing catalog is the source of truth for
which commits exist. A commit is *ratified* by the catalog, then *published* as
``_delta_log/<v>.json``; until then it lives in the catalog, inline or as a staged
commit under ``_delta_log/_staged_commits/<v>.<uuid>.json`` (where rejected and
half-written attempts lie too, indistinguishable without the catalog). Readers must ask
the catalog; filesystem readers are only warned. deltalog does not talk to catalogs, so
it reads the published commits and says so: a warning in the snapshot and health
results and on stderr, naming the catalog and the staged commits it cannot judge, and a
version past the published ones is refused naming the catalog rather than "does not
exist".
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from deltalog.protocol.features import CATALOG_FEATURES
from deltalog.protocol.table_protocol import Protocol, commit_coordinator
from deltalog.storage.filesystem import Storage

__all__ = ["STAGED_COMMITS_DIR", "CatalogView", "catalog_view"]

log = logging.getLogger(__name__)

STAGED_COMMITS_DIR = "_staged_commits"
_STAGED = re.compile(r"^(\d{20})\.[0-9a-fA-F-]{36}\.json$")


@dataclass(frozen=True)
class CatalogView:
    """What storage alone shows of a catalog-managed table."""

    features: tuple[str, ...]
    catalog: str
    latest_published: int
    #: Versions of staged commit files newer than the latest published commit (ratified or not: only the
    #: catalog knows).
    staged_versions: tuple[int, ...]

    def warning(self) -> str:
        """The one warning a read of such a table carries."""
        staged = ""
        if self.staged_versions:
            lo, hi = self.staged_versions[0], self.staged_versions[-1]
            span = f"version {lo}" if lo == hi else f"versions {lo}..{hi}"
            staged = (
                f"; {len(self.staged_versions)} staged commit file(s) for {span} lie under _delta_log/"
                f"{STAGED_COMMITS_DIR}, which only the catalog can say are ratified"
            )
        return (
            f"the table is catalog-managed ({', '.join(self.features)}): read from storage alone, without "
            f"{self.catalog}, it shows the commits published in _delta_log (up to version {self.latest_published}); "
            f"newer commits the catalog has ratified but not published are not seen{staged}"
        )

    def unpublished(self, version: int) -> str:
        """Why ``version`` (past the published ones) cannot be read from storage alone."""
        staged = " (a staged commit file for it exists)" if version in self.staged_versions else ""
        return (
            f"version {version} is not published in _delta_log (the latest published version is "
            f"{self.latest_published}){staged}: the table is catalog-managed ({', '.join(self.features)}), and its "
            f"newer commits are known to {self.catalog} only; deltalog reads storage alone and does not talk to "
            "catalogs"
        )


def catalog_view(
    storage: Storage, protocol: Protocol, configuration: dict[str, str], latest_published: int
) -> CatalogView | None:
    """The catalog-managed view of a table, or None when its protocol has no catalog feature."""
    features = tuple(sorted(protocol.effective_reader_features() | protocol.effective_writer_features()))
    managed = tuple(f for f in features if f in CATALOG_FEATURES)
    if not managed:
        return None
    staged: set[int] = set()
    for info in storage.list_dir(storage.join("_delta_log", STAGED_COMMITS_DIR)):
        m = _STAGED.match(info.path.rstrip("/").rsplit("/", 1)[-1])
        if m and int(m.group(1)) > latest_published:
            staged.add(int(m.group(1)))
    view = CatalogView(managed, commit_coordinator(configuration), latest_published, tuple(sorted(staged)))
    log.warning("%s: %s", storage.uri, view.warning())
    return view
