"""A per-table maintenance lease: one maintainer at a time, whichever DAG or process it runs in.

An Airflow pool per table does not scale to a fleet (pools are created by hand and
counted globally), and an Airflow-side mutex would not cover the CLI or a second
Airflow deployment. The lease lives with the table instead, as a small JSON file in
its root: ``_deltalog_maintenance.lease``. The leading underscore keeps it hidden from
readers and from vacuum, and it stays out of ``_delta_log`` (which only Delta
writers may touch).

* Acquire: create the file with the storage's atomic put-if-absent (the commit
  primitive: a hard link locally, a conditional PUT on S3); whoever creates it holds
  the lease until ``expires_ms``.
* A lease past its expiry (a killed worker) is taken over by claiming
  ``<lease>.takeover.<token>`` with put-if-absent, so exactly one contender replaces
  the stale lease; the others see the new holder.
* Release deletes the file only while it still names this holder's token.

The lease is advisory and bounded by its TTL: a holder that runs past it may see its
lease taken over. Delta's own conflict checks stay the final safety net (a second
compaction of the same files fails its commit), so an overrun wastes work, never data.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from deltalog.errors import InvalidArgumentError, MaintenanceLeaseHeldError
from deltalog.log.history import format_ms
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage

__all__ = ["Lease", "acquire_lease", "lease_holder"]

log = logging.getLogger(__name__)

LEASE_NAME = "_deltalog_maintenance.lease"


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Lease:
    """A held lease: release it (or let it expire) when the table's maintenance is done."""

    storage: Storage
    owner: str
    token: str
    expires_ms: int

    @property
    def path(self) -> str:
        return self.storage.join(LEASE_NAME)

    def release(self) -> bool:
        """Delete the lease if it is still ours; False when it expired and someone else took it."""
        current = _read(self.storage)
        if current is None or current.get("token") != self.token:
            log.warning("lease on %s is no longer held by %s; leaving it", self.storage.uri, self.owner)
            return False
        self.storage.delete(self.path)
        taken_from = current.get("took_over")
        if taken_from:
            self.storage.delete(f"{self.path}.takeover.{taken_from}")
        return True

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read(storage: Storage) -> dict[str, Any] | None:
    try:
        doc = json.loads(storage.read_bytes(storage.join(LEASE_NAME)))
    except FileNotFoundError:
        return None
    except ValueError:
        return {"owner": "?", "token": "unreadable", "expires_ms": 0}  # a torn file counts as expired
    return doc if isinstance(doc, dict) else {"owner": "?", "token": "unreadable", "expires_ms": 0}


def lease_holder(table: TableRef, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The current lease document (owner, token, expires_ms), or None when the table is free."""
    return _read(table_storage(table, storage_options))


def acquire_lease(
    table: TableRef,
    owner: str,
    ttl_seconds: float,
    *,
    wait_seconds: float = 0.0,
    poll_seconds: float = 1.0,
    storage_options: dict[str, Any] | None = None,
) -> Lease:
    """Take the table's maintenance lease for ``ttl_seconds``, waiting up to ``wait_seconds`` for it.

    Raises MaintenanceLeaseHeldError (retryable) naming the holder when it stays taken.
    """
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float) or ttl_seconds <= 0:
        raise InvalidArgumentError(f"lease ttl must be a positive number of seconds, got {ttl_seconds!r}")
    storage = table_storage(table, storage_options)
    path = storage.join(LEASE_NAME)
    give_up = time.monotonic() + max(0.0, wait_seconds)
    while True:
        token = uuid.uuid4().hex
        expires = _now_ms() + int(ttl_seconds * 1000)
        doc = {"owner": owner, "token": token, "acquired_ms": _now_ms(), "expires_ms": expires}
        try:
            storage.put_if_absent(path, json.dumps(doc).encode())
            log.info("maintenance lease on %s taken by %s until %s", storage.uri, owner, format_ms(expires))
            return Lease(storage, owner, token, expires)
        except FileExistsError:
            pass
        current = _read(storage)
        if current is None:
            continue  # released between our attempt and the read: try again at once
        if int(current.get("expires_ms") or 0) < _now_ms():
            stale = str(current.get("token"))
            try:
                storage.put_if_absent(f"{path}.takeover.{stale}", token.encode())
            except FileExistsError:
                pass  # another contender claimed this stale lease first
            else:
                doc["took_over"] = stale
                storage.write_atomic(path, json.dumps(doc).encode())
                log.warning(
                    "maintenance lease on %s: took over the expired lease of %s", storage.uri, current.get("owner")
                )
                return Lease(storage, owner, token, expires)
        if time.monotonic() >= give_up:
            raise MaintenanceLeaseHeldError(
                f"{storage.uri} is being maintained by {current.get('owner')!r} (lease until "
                f"{format_ms(int(current.get('expires_ms') or 0))}); try again later"
            )
        time.sleep(poll_seconds)
