"""GETs, listings and Azure's atomic create through obstore, for Azure Blob Storage / ADLS Gen2 and GCS.

Why: on Azure, adlfs (the Azure SDK for Python) costs about 1.2-1.6 ms of CPU per request
(signing, its pipeline policies, response parsing); object_store, deltalake's Rust client,
about 0.15 ms. Opening a table is a LIST of ``_delta_log`` plus a GET per commit since the
checkpoint, so that CPU decides how long a snapshot load or a fleet health run takes on a
busy machine, exactly as on S3 (deltalog.storage.s3_reads, whose reader class this module reuses).

obstore is an accelerator, never a second source of truth, under the rules of s3_reads:

- it is used only when what adlfs or gcsfs resolved from the storage options (and the
  environment) translates exactly: the same account, endpoint and identity. The identity
  is taken from the fsspec filesystem itself: an account key, a SAS token or a connection
  string as given; a token credential adlfs built (service principal, DefaultAzureCredential:
  managed identity, workload identity, Azure CLI, ...) or gcsfs's Google credentials
  (service account file, application default credentials, metadata server) are asked for
  tokens through obstore's credential callback, so both clients act as one principal.
  Anything else (a credential object the caller built, requester-pays buckets, versioned
  paths, mTLS, a secondary location) keeps adlfs/gcsfs;
- any failure other than "not found" is retried once through adlfs/gcsfs, whose answer stands;
- a process forked after obstore was used reads through adlfs/gcsfs;
- the storage option ``{"obstore": "false"}`` turns it off for the table.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
from typing import Any
from urllib.parse import urlparse

from deltalog.storage.s3_reads import ReadFailed, S3Reads

__all__ = ["ObstoreReads", "ReadFailed", "enabled", "parse_connection_string", "reads_for", "valid_option"]

log = logging.getLogger(__name__)

#: deltalog's storage option that turns obstore off for Azure and GCS tables (not passed to adlfs/gcsfs).
OPTION = "obstore"
_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
#: Token audience of Azure Storage (what adlfs's SDK asks its credentials for).
AZURE_STORAGE_SCOPE = "https://storage.azure.com/.default"
#: Azure's public blob endpoint suffix (a connection string may name another cloud's).
_AZURE_SUFFIX = "core.windows.net"

#: adlfs keywords that do not change what a request reaches or returns (fsspec's listing cache).
_ADLFS_NEUTRAL = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache"})

_lock = threading.Lock()
_readers: dict[tuple[str, ...], ObstoreReads | None] = {}


def enabled(options: dict[str, Any]) -> bool:
    """Whether the storage options allow obstore (InvalidArgumentError-worthy values are checked by the caller)."""
    value = options.get(OPTION, True)
    return value if isinstance(value, bool) else _WORDS.get(str(value).strip().lower(), True)


def valid_option(value: Any) -> bool:
    return isinstance(value, bool) or str(value).strip().lower() in _WORDS


class ObstoreReads(S3Reads):
    """GETs and listings of one Azure container or GCS bucket through obstore (adlfs/gcsfs as the fallback).

    The same interface as :class:`deltalog.storage.s3_reads.S3Reads` (paths are ``container/key``, as
    adlfs and gcsfs name them), plus :meth:`create` on Azure, the conditional PUT of a commit.
    """

    def __init__(self, kind: str, bucket: str, kwargs: dict[str, Any], cache_key: str) -> None:
        super().__init__(bucket, kwargs, f"{kind}:{cache_key}")
        self.kind = kind

    def _new_store(self) -> Any:
        if self.kind == "azure":
            from obstore.store import AzureStore

            return AzureStore(self.bucket, **self._kwargs)
        from obstore.store import GCSStore

        return GCSStore(self.bucket, **self._kwargs)

    def create(self, path: str, data: bytes) -> None:
        """Create ``path`` only if absent (a PUT with ``If-None-Match: *``): FileExistsError when it exists.

        Any other failure is raised as obstore raised it (the caller reads the object back to
        learn whether the write landed).
        """
        import obstore
        import obstore.exceptions as errors

        key = self.key(path)
        if key is None:
            raise ValueError(f"{path} is not in container {self.bucket}")
        try:
            obstore.put(self._store(), key, data, mode="create")
        except (errors.AlreadyExistsError, errors.PreconditionError):
            # 409 BlobAlreadyExists; 412 from a service that answers the condition that way.
            raise FileExistsError(path) from None


# --- Azure: adlfs's resolved settings -> AzureStore ----------------------------------------------


class _AzureToken:
    """Tokens from the credential adlfs built (its synchronous twin), for obstore's callback."""

    def __init__(self, credential: Any) -> None:
        self._credential = credential

    def __call__(self) -> dict[str, Any]:
        token = self._credential.get_token(AZURE_STORAGE_SCOPE)
        return {"token": token.token, "expires_at": _dt.datetime.fromtimestamp(token.expires_on, _dt.UTC)}


def parse_connection_string(text: str) -> dict[str, str]:
    """``Key=Value;...`` into a dict (values may contain ``=``, as keys and SAS tokens do)."""
    out = {}
    for part in text.split(";"):
        if "=" in part:
            key, _, value = part.partition("=")
            out[key.strip()] = value.strip()
    return out


def _azure_kwargs(fs: Any) -> dict[str, Any] | None:
    """AzureStore keyword arguments reaching the same account as this adlfs filesystem, or None."""
    if getattr(fs, "version_aware", False) or getattr(fs, "location_mode", "primary") != "primary":
        return None
    extra = set(getattr(fs, "kwargs", None) or ()) - _ADLFS_NEUTRAL
    if getattr(fs, "request_session", None) is not None or extra:
        return None  # a caller's HTTP session, or DefaultAzureCredential settings only adlfs applies
    kwargs: dict[str, Any] = {}
    if fs.connection_string:
        parts = parse_connection_string(fs.connection_string)
        if "UseDevelopmentStorage" in parts:
            return None
        name = parts.get("AccountName")
        endpoint = parts.get("BlobEndpoint")
        if endpoint is None and name:
            protocol = parts.get("DefaultEndpointsProtocol", "https")
            endpoint = f"{protocol}://{name}.blob.{parts.get('EndpointSuffix', _AZURE_SUFFIX)}"
        if not name and endpoint:
            name = (urlparse(endpoint).hostname or "").split(".", 1)[0]
        if not name or not endpoint:
            return None
        kwargs["account_name"] = name
        kwargs["endpoint"] = endpoint.rstrip("/")
        if parts.get("AccountKey"):
            kwargs["account_key"] = parts["AccountKey"]
        elif parts.get("SharedAccessSignature"):
            kwargs["sas_key"] = parts["SharedAccessSignature"].lstrip("?")
        else:
            return None
    else:
        if not fs.account_name:
            return None
        kwargs["account_name"] = fs.account_name
        host = getattr(fs, "account_host", None)
        if host:
            kwargs["endpoint"] = f"https://{host}"
        # adlfs's order: a credential object, then the account key, then a SAS token, else anonymous.
        if fs.credential is not None:
            if getattr(fs, "sync_credential", None) is None:
                return None  # the caller's own (async) credential object: only adlfs can use it
            kwargs["credential_provider"] = _AzureToken(fs.sync_credential)
        elif fs.account_key:
            kwargs["account_key"] = fs.account_key
        elif fs.sas_token:
            kwargs["sas_key"] = str(fs.sas_token).lstrip("?")
        else:
            kwargs["skip_signature"] = True
    if str(kwargs.get("endpoint", "")).startswith("http://"):
        kwargs["client_options"] = {"allow_http": True}
    return kwargs


# --- GCS: gcsfs's resolved settings -> GCSStore ---------------------------------------------------


class _GoogleToken:
    """Access tokens from gcsfs's own Google credentials (refreshed under gcsfs's lock)."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials  # gcsfs.credentials.GoogleCredentials

    def __call__(self) -> dict[str, Any]:
        self._credentials.maybe_refresh()
        inner = self._credentials.credentials
        expiry = getattr(inner, "expiry", None)
        if expiry is not None and expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=_dt.UTC)  # google-auth keeps naive UTC times
        return {"token": inner.token, "expires_at": expiry}


def _gcs_kwargs(fs: Any) -> dict[str, Any] | None:
    """GCSStore keyword arguments reaching the same buckets as this gcsfs filesystem, or None."""
    if fs.requester_pays or fs.version_aware or getattr(fs, "_use_mtls_endpoint", False) or fs.session_kwargs:
        return None
    base = str(fs._location).rstrip("/")
    kwargs: dict[str, Any] = {"base_url": base}
    credentials = fs.credentials
    if credentials.token == "anon" or credentials.credentials is None:
        kwargs["skip_signature"] = True
    else:
        kwargs["credential_provider"] = _GoogleToken(credentials)
    if base.startswith("http://"):
        kwargs["client_options"] = {"allow_http": True}
    return kwargs


def _client_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Timeouts and retries as deltalog's S3 client has them: an unreachable endpoint fails in seconds (then
    adlfs/gcsfs answer, with their own retries), not after object_store's three minutes of retrying."""
    client = {"connect_timeout": "5s", "timeout": "300s", **kwargs.pop("client_options", {})}
    retry = {
        "max_retries": 2,
        "retry_timeout": _dt.timedelta(seconds=30),
        "backoff": {"init_backoff": _dt.timedelta(milliseconds=100), "max_backoff": _dt.timedelta(seconds=2)},
    }
    return {**kwargs, "client_options": client, "retry_config": retry}


def reads_for(kind: str, fs: Any, bucket: str, options: dict[str, Any]) -> ObstoreReads | None:
    """The obstore reader for ``bucket`` (an Azure container or a GCS bucket) on this fsspec filesystem, or None.

    One reader (and one client) per filesystem, bucket and options in a process.
    """
    if not enabled(options):
        return None
    cache_key = (kind, bucket, str(id(fs)), repr(sorted((k, repr(v)) for k, v in options.items())))
    with _lock:
        if cache_key in _readers:
            return _readers[cache_key]
    try:
        import obstore  # noqa: F401  (installed?)
    except ImportError:
        reader = None
    else:
        kwargs = _azure_kwargs(fs) if kind == "azure" else _gcs_kwargs(fs)
        if kwargs is None:
            log.debug("obstore off for %s: storage options only %s understands", bucket, type(fs).__name__)
        reader = ObstoreReads(kind, bucket, _client_settings(kwargs), repr(cache_key)) if kwargs is not None else None
    with _lock:
        return _readers.setdefault(cache_key, reader)
