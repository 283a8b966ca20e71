"""Small-object GETs and prefix listings on S3 through obstore (the Rust object_store client deltalake uses).

Why: opening a table on S3 is a LIST of ``_delta_log`` and one GET per commit after the
checkpoint. Through s3fs/aiobotocore each request costs about 1.4 ms of Python CPU (request
signing, the user-agent string, endpoint rules, header and timestamp parsing), three times
object_store's cost, and on a busy machine that CPU decides how long a snapshot load or a
fleet health run takes. Only those reads go through obstore; writes (the conditional PUT of
a commit), deletes and Parquet reads stay with s3fs.

obstore is an accelerator, never a second source of truth:

- it is used only when the storage options say nothing this module does not translate
  exactly (static keys, anonymous access, endpoint, region, timeouts and retry counts,
  botocore's credential chain or a named profile otherwise); anything else keeps s3fs;
- every failure other than "not found" is retried once through s3fs, whose answer (or
  error message) stands, so errors read the same whichever client was tried first;
- obstore's runtime does not survive ``fork()``: a process forked after this one used it
  reads through s3fs;
- ``{"s3_reads": "s3fs"}`` in the storage options turns it off.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["CHOICES", "OPTION", "ReadFailed", "S3Reads", "s3_reads_for"]

log = logging.getLogger(__name__)

#: The storage option that picks the read client (deltalog's own, not passed to s3fs).
OPTION = "s3_reads"
CHOICES = ("obstore", "s3fs")
#: s3fs options that do not change what a GET or a LIST returns (caching, block sizes).
_NEUTRAL_OPTIONS = frozenset(
    {"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache", "default_block_size"}
    | {"default_fill_cache", "default_cache_type", "cache_regions", "asynchronous", "loop", "max_concurrency"}
)
_TRANSLATED_OPTIONS = frozenset({"key", "secret", "token", "anon", "endpoint_url", "profile", "client_kwargs"})
_CLIENT_KWARGS = frozenset({"region_name", "endpoint_url"})
_CONFIG_KWARGS = frozenset({"connect_timeout", "read_timeout", "retries"})
#: GETs in flight at once across the process (one pool, shared by every table).
_POOL_SIZE = 32

_lock = threading.Lock()
_stores: dict[tuple[str, str], Any] = {}
_pool: ThreadPoolExecutor | None = None
_readers: dict[tuple[str, str], S3Reads | None] = {}
#: The process that first used obstore; a fork of it must not (the runtime's threads are gone).
_used_by_pid: int | None = None


def _forget_after_fork() -> None:
    global _pool
    _stores.clear()
    _readers.clear()
    _pool = None


os.register_at_fork(after_in_child=_forget_after_fork)


def _seconds(value: Any) -> str:
    return f"{float(value)}s"


def _translate(options: dict[str, Any]) -> dict[str, Any] | None:
    """S3Store keyword arguments equivalent to these s3fs options, or None when they are not exactly translatable."""
    if set(options) - _TRANSLATED_OPTIONS - _NEUTRAL_OPTIONS - {"config_kwargs"}:
        return None
    client_kwargs = options.get("client_kwargs") or {}
    config_kwargs = options.get("config_kwargs") or {}
    if not isinstance(client_kwargs, dict) or set(client_kwargs) - _CLIENT_KWARGS:
        return None
    if not isinstance(config_kwargs, dict) or set(config_kwargs) - _CONFIG_KWARGS:
        return None
    endpoint = options.get("endpoint_url") or client_kwargs.get("endpoint_url")
    region = client_kwargs.get("region_name") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not endpoint and not region:
        return None  # s3fs finds a bucket's region by itself; object_store would need it given
    client: dict[str, Any] = {"connect_timeout": _seconds(config_kwargs.get("connect_timeout", 60))}
    if "read_timeout" in config_kwargs:
        client["timeout"] = _seconds(config_kwargs["read_timeout"])
    else:
        client["timeout"] = "300s"
    if endpoint and str(endpoint).startswith("http://"):
        client["allow_http"] = True
    retries = config_kwargs.get("retries") or {}
    attempts = retries.get("max_attempts", 5) if isinstance(retries, dict) else 5
    kwargs: dict[str, Any] = {
        "client_options": client,
        "retry_config": {
            "max_retries": max(int(attempts) - 1, 0),
            "retry_timeout": _dt.timedelta(seconds=30),
            "backoff": {"init_backoff": _dt.timedelta(milliseconds=100), "max_backoff": _dt.timedelta(seconds=2)},
        },
    }
    if endpoint:
        kwargs["endpoint"] = str(endpoint)
    if region:
        kwargs["region"] = str(region)
    if options.get("anon") is True:
        kwargs["skip_signature"] = True
    elif options.get("anon") not in (None, False):
        return None
    elif options.get("key") and options.get("secret"):
        kwargs["access_key_id"] = str(options["key"])
        kwargs["secret_access_key"] = str(options["secret"])
        if options.get("token"):
            kwargs["session_token"] = str(options["token"])
    elif options.get("key") or options.get("secret") or options.get("token"):
        return None
    else:
        provider = _botocore_credentials(options.get("profile"))
        if provider is None:
            return None  # no credentials anywhere: s3fs raises its own clear error
        kwargs["credential_provider"] = provider
    return kwargs


class _BotocoreCredentials:
    """botocore's credential chain (environment, config and credential files, SSO, instance roles) for obstore,
    so both clients sign with the same identity; botocore refreshes expiring credentials itself."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials

    def __call__(self) -> dict[str, Any]:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": _dt.datetime.now(_dt.UTC) + _dt.timedelta(minutes=5),
        }


def _botocore_credentials(profile: Any) -> _BotocoreCredentials | None:
    import botocore.exceptions
    import botocore.session

    try:
        credentials = botocore.session.Session(profile=profile).get_credentials()
    except (botocore.exceptions.BotoCoreError, OSError, ValueError) as exc:  # a missing profile, a broken file
        log.debug("obstore reads off: no botocore credentials (%s)", exc)
        return None
    return _BotocoreCredentials(credentials) if credentials is not None else None


class ReadFailed(Exception):
    """obstore could not answer (network, credentials, an object name object_store refuses): ask s3fs."""


def _failures() -> tuple[type[BaseException], ...]:
    import obstore.exceptions

    return (obstore.exceptions.BaseError, OSError, ValueError, RuntimeError)


@dataclass(frozen=True)
class ListedObject:
    path: str  # "bucket/key", as s3fs names it
    size: int
    modification_time: int  # ms


class S3Reads:
    """GETs and listings of one bucket through a process-wide obstore client, with s3fs as the fallback."""

    def __init__(self, bucket: str, kwargs: dict[str, Any], cache_key: str) -> None:
        self.bucket = bucket
        self._kwargs = kwargs
        self._cache_key = cache_key

    def _store(self) -> Any:
        global _used_by_pid
        key = (self.bucket, self._cache_key)
        with _lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = self._new_store()
            _used_by_pid = os.getpid()
        return store

    def _new_store(self) -> Any:
        """The obstore client of this bucket (deltalog.storage.azure_gcs_reads builds Azure and GCS ones)."""
        from obstore.store import S3Store

        return S3Store(self.bucket, **self._kwargs)

    def usable(self) -> bool:
        """False in a process forked after obstore was used (its runtime threads did not survive the fork)."""
        return _used_by_pid is None or _used_by_pid == os.getpid()

    def key(self, path: str) -> str | None:
        """The object key of an s3fs path in this bucket (None for another bucket)."""
        prefix = self.bucket + "/"
        return path[len(prefix) :] if path.startswith(prefix) else None

    def get(self, path: str) -> bytes:
        """The object's bytes; FileNotFoundError when absent, ReadFailed when obstore cannot tell."""
        import obstore

        key = self.key(path)
        if key is None:
            raise ReadFailed(f"{path} is not in bucket {self.bucket}")
        try:
            return bytes(obstore.get(self._store(), key).bytes())
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        except _failures() as exc:
            raise ReadFailed(str(exc)) from exc

    def get_many(self, paths: list[str], fallback: Callable[[str], bytes]) -> list[bytes]:
        """Every object's bytes in order, the GETs in flight together on the shared pool."""
        global _pool
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="deltalog-s3-get")
            pool = _pool

        def one(path: str) -> bytes:
            try:
                return self.get(path)
            except ReadFailed as exc:
                log.debug("obstore GET of %s failed (%s); reading through s3fs", path, exc)
                return fallback(path)

        return list(pool.map(one, paths))

    def list(self, path: str) -> tuple[list[ListedObject], list[str]]:
        """(objects directly under ``path``, sub-folders as ``bucket/prefix``); both empty when nothing is there.

        ReadFailed when obstore cannot tell.
        """
        import obstore

        key = self.key(path.rstrip("/") + "/")
        if key is None:
            raise ReadFailed(f"{path} is not in bucket {self.bucket}")
        try:
            result = obstore.list_with_delimiter(self._store(), key.rstrip("/") or None)
        except _failures() as exc:
            raise ReadFailed(str(exc)) from exc
        files = [
            ListedObject(
                f"{self.bucket}/{o['path']}",
                int(o["size"]),
                int(o["last_modified"].timestamp() * 1000),
            )
            for o in result["objects"]
        ]
        dirs = [f"{self.bucket}/{p.rstrip('/')}" for p in result["common_prefixes"]]
        return files, dirs

    def list_after(self, path: str, name: str) -> tuple[ListedObject, ...]:
        """Objects directly under ``path`` whose names sort after ``name``, from one LIST that starts there.

        S3's ``StartAfter`` (object_store's offset; GCS's ``startOffset``): what a watcher of a
        log needs, whose new files all sort after the last one it saw, without listing the old
        ones again. The listing is recursive, so objects in sub-folders that sort later (a log's
        ``_sidecars/``) are read and left out. ReadFailed when obstore cannot tell.
        """
        import obstore

        key = self.key(path.rstrip("/") + "/")
        if key is None:
            raise ReadFailed(f"{path} is not in bucket {self.bucket}")
        prefix = key.rstrip("/")
        try:
            chunks = list(obstore.list(self._store(), prefix or None, offset=f"{prefix}/{name}", chunk_size=1000))
        except _failures() as exc:
            raise ReadFailed(str(exc)) from exc
        start = len(prefix) + 1
        return tuple(
            ListedObject(f"{self.bucket}/{o['path']}", int(o["size"]), int(o["last_modified"].timestamp() * 1000))
            for chunk in chunks
            for o in chunk
            if "/" not in o["path"][start:]
        )


def s3_reads_for(bucket: str, options: dict[str, Any]) -> S3Reads | None:
    """The obstore reader for ``bucket`` under these s3fs options, or None (s3fs does the reads).

    ``options`` are the caller's storage options, deltalog's own ``s3_reads`` included. One
    reader (and one client) per bucket and options in a process: the translation, and the
    credential chain it may look up, run once.
    """
    choice = str(options.get(OPTION, "obstore")).strip().lower()
    if choice == "s3fs":
        return None
    cache_key = repr(sorted((k, repr(v)) for k, v in options.items()))
    with _lock:
        if (bucket, cache_key) in _readers:
            return _readers[(bucket, cache_key)]
    try:
        import obstore  # noqa: F401  (installed?)
    except ImportError:
        reader = None
    else:
        kwargs = _translate({k: v for k, v in options.items() if k not in (OPTION, "fsync")})
        if kwargs is None:
            log.debug("obstore reads off for %s: storage options s3fs alone understands", bucket)
        reader = S3Reads(bucket, kwargs, cache_key) if kwargs is not None else None
    with _lock:
        return _readers.setdefault((bucket, cache_key), reader)
