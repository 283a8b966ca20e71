"""Azure Blob Storage / ADLS Gen2 and Google Cloud Storage: opening a table there and committing atomically.

Both stores have an atomic create, which is all a Delta commit needs (a version file
written only if absent):

- Azure (``abfs://``, ``abfss://``, ``az://``; Blob and hierarchical-namespace accounts,
  OneLake): a Put Blob with ``If-None-Match: *``; the service answers 409
  ``BlobAlreadyExists`` (or 412) when the blob exists. Sent through obstore (object_store,
  deltalake's client; a tenth of the Azure SDK's CPU per request) when the storage options
  translate exactly (deltalog.storage.azure_gcs_reads), else through adlfs's
  ``pipe_file(mode="create")``, which sends the same header.
- GCS (``gs://``, ``gcs://``): gcsfs's ``pipe_file(mode="create")``, an upload with
  ``ifGenerationMatch=0`` through the JSON API; 412 when the object exists. Not obstore:
  object_store writes through GCS's XML API, which the GCS emulator the tests run
  (fake-gcs-server) does not serve, and deltalog ships no primitive it cannot test.

Either client may re-send a request whose response was lost (a timeout after the store
accepted it); the re-sent create then fails because *our own* object exists. So an
"already exists" answer, and any failure whose outcome is unknown, is settled by reading
the object back: our exact bytes mean our create landed (every commit carries a unique
``txnId``, every lease a unique token, so no other writer writes the same bytes); other
bytes mean another writer won (FileExistsError); nothing there after a failure means
nothing landed, and the create is sent again a few times before the failure is raised.

gcsfs is opened as its JSON-API filesystem (``gcsfs.core.GCSFileSystem``): since 2026 its
default class first asks the Storage Control gRPC API for each bucket's layout, does not
cache a failed answer and so re-asks (up to a minute) before every operation where that API
is not reachable or permitted. Zonal (Rapid) buckets, which need that class, are not supported.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from deltalog.errors import InvalidArgumentError, StorageError
from deltalog.storage import azure_gcs_reads
from deltalog.storage.s3_reads import S3Reads

__all__ = [
    "AZURE_SCHEMES",
    "GCS_SCHEMES",
    "OPTIONS",
    "SCHEMES",
    "check_options",
    "kind",
    "open_filesystem",
    "put_if_absent",
]

log = logging.getLogger(__name__)

AZURE_SCHEMES = ("abfs", "abfss", "az")
GCS_SCHEMES = ("gs", "gcs")
SCHEMES = AZURE_SCHEMES + GCS_SCHEMES
#: Storage options deltalog reads for these stores (never passed to adlfs or gcsfs).
OPTIONS = frozenset({azure_gcs_reads.OPTION})
#: How often a create whose outcome was unknown, and found absent on reading back, is sent again.
CREATE_ATTEMPTS = 4
#: OneLake (Microsoft Fabric): ADLS Gen2-compatible; adlfs does not derive its account from the URI.
_ONELAKE_HOST = re.compile(r"^onelake\.(dfs|blob)\.fabric\.microsoft\.com$", re.IGNORECASE)
ONELAKE_BLOB_HOST = "onelake.blob.fabric.microsoft.com"
#: Keywords adlfs hands to azure-identity's DefaultAzureCredential (its documented ones).
_DEFAULT_CREDENTIAL_OPTIONS = frozenset(
    {
        "authority",
        "managed_identity_client_id",
        "workload_identity_client_id",
        "workload_identity_tenant_id",
        "interactive_browser_tenant_id",
        "interactive_browser_client_id",
        "shared_cache_username",
        "shared_cache_tenant_id",
        "visual_studio_code_tenant_id",
        "additionally_allowed_tenants",
        "process_timeout",
        "require_envvar",
    }
)
#: Top-level packages whose exceptions mean "the store or the network failed" on these paths.
_CLIENT_PACKAGES = frozenset({"azure", "adlfs", "gcsfs", "google", "aiohttp", "obstore", "requests"})


def kind(scheme: str) -> str | None:
    """``"azure"``, ``"gcs"`` or None for a URI scheme."""
    if scheme in AZURE_SCHEMES:
        return "azure"
    if scheme in GCS_SCHEMES:
        return "gcs"
    return None


def _package_hint(scheme: str) -> str:
    return "adlfs" if kind(scheme) == "azure" else "gcsfs"


@functools.cache
def _option_names(store: str) -> frozenset[str]:
    """Every keyword the fsspec filesystem for ``store`` and its fsspec bases accept."""
    import fsspec.asyn
    import fsspec.dircache

    if store == "azure":
        from adlfs import AzureBlobFileSystem as cls
    else:
        from gcsfs.core import GCSFileSystem as cls
    takers = (cls.__init__, fsspec.asyn.AsyncFileSystem.__init__, fsspec.dircache.DirCache.__init__)
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = {p.name for f in takers for p in inspect.signature(f).parameters.values() if p.kind in named}
    extra = _DEFAULT_CREDENTIAL_OPTIONS if store == "azure" else frozenset()
    return frozenset(names - {"self"}) | {"skip_instance_cache"} | extra


def check_options(scheme: str, options: dict[str, Any]) -> None:
    """Refuse storage options neither deltalog nor adlfs/gcsfs understands (InvalidArgumentError naming them).

    adlfs and gcsfs accept any keyword and ignore the ones they do not know, so a typo
    (``acount_key``) would silently fall back to another identity or to anonymous access.
    """
    store = kind(scheme)
    if store is None:
        return
    value = options.get(azure_gcs_reads.OPTION, True)
    if not azure_gcs_reads.valid_option(value):
        raise InvalidArgumentError(f"storage option {azure_gcs_reads.OPTION} must be true or false, got {value!r}")
    try:
        known = _option_names(store)
    except ImportError:
        return  # open_filesystem names the missing package
    unknown = sorted(
        k
        for k in options
        if k not in known and k not in OPTIONS and k != "fsync" and not (store == "azure" and k.startswith("exclude_"))
    )
    if unknown:
        examples = (
            "account_name, account_key, sas_token, connection_string, tenant_id, client_id, client_secret, anon"
            if store == "azure"
            else "token, project, endpoint_url, requester_pays"
        )
        raise InvalidArgumentError(
            f"unknown {'Azure' if store == 'azure' else 'GCS'} storage option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}: {_package_hint(scheme)} takes {examples}, ...; deltalog's own: "
            f"{', '.join(sorted(OPTIONS))}"
        )


def open_filesystem(uri: str, scheme: str, options: dict[str, Any]) -> tuple[Any, str]:
    """(fsspec filesystem, root path inside it) for an Azure or GCS URI; ``options`` are fsspec's (deltalog's removed).

    OneLake URIs (``abfss://<workspace>@onelake.dfs.fabric.microsoft.com/<item>/...``) get
    OneLake's account and Blob endpoint unless the options name them.
    """
    import fsspec

    options = dict(options)
    try:
        if kind(scheme) == "azure":
            host = urlparse(uri).hostname or ""
            if _ONELAKE_HOST.match(host) and "connection_string" not in options:
                options.setdefault("account_name", "onelake")
                options.setdefault("account_host", ONELAKE_BLOB_HOST)
            fs, root = fsspec.core.url_to_fs(uri, **options)
        else:
            from gcsfs.core import GCSFileSystem

            fs = GCSFileSystem(**{**GCSFileSystem._get_kwargs_from_urls(uri), **options})
            root = GCSFileSystem._strip_protocol(uri)
    except ImportError as exc:
        raise InvalidArgumentError(
            f"cannot open {uri!r}: {_package_hint(scheme)} is not installed ({exc}); install "
            f"airflow-provider-deltalog[{kind(scheme)}]"
        ) from None
    except ValueError as exc:  # adlfs: no account or credentials it can use
        raise InvalidArgumentError(f"cannot open {uri!r}: {exc}") from None
    return fs, root


def _is_client_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or type(exc).__module__.split(".", 1)[0] in _CLIENT_PACKAGES


def _is_exists(exc: BaseException) -> bool:
    """An "already exists" answer: FileExistsError, or the Azure SDK's 412 (ResourceModifiedError)."""
    return isinstance(exc, FileExistsError) or getattr(exc, "status_code", None) == 412


def put_if_absent(fs: Any, reads: S3Reads | None, path: str, data: bytes) -> None:
    """Create ``path`` with ``data`` only if absent; FileExistsError when another writer's object is there.

    ``reads`` is the table's obstore client when its options translate (None: adlfs/gcsfs
    only). Raises StorageError when the store keeps failing and the object is still absent,
    or when the outcome cannot be learnt (the caller then reads the version back itself).
    """
    create: Callable[[str, bytes], None]
    if isinstance(reads, azure_gcs_reads.ObstoreReads) and reads.kind == "azure":
        create = reads.create
    else:

        def create(p: str, d: bytes) -> None:
            fs.pipe_file(p, d, mode="create")

    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            create(path, data)
            return
        except FileNotFoundError:
            raise StorageError(f"cannot write {path}: its container or bucket does not exist") from None
        except Exception as exc:
            if not (_is_exists(exc) or _is_client_error(exc)):
                raise
            failure = exc
        found = _read_back(fs, reads, path, failure)
        if found == data:
            if not _is_exists(failure):
                log.warning("writing %s reported %s, but the object holds exactly our bytes: it landed", path, failure)
            else:
                log.info("%s already held exactly our bytes: our create landed and its response was lost", path)
            return
        if found is not None:
            raise FileExistsError(path)
        # Absent: nothing landed (or an "exists" answer about a create still in flight); send it again.
        if attempt == CREATE_ATTEMPTS:
            raise StorageError(f"cannot write {path}: {failure}") from None
        log.info("creating %s failed (%s) and nothing landed; sending it again", path, failure)
        time.sleep(0.05 * attempt)


def _read_back(fs: Any, reads: S3Reads | None, path: str, failure: BaseException) -> bytes | None:
    """The object's bytes now, None when absent; StorageError when even that cannot be learnt."""
    try:
        if reads is not None and reads.usable():
            try:
                return reads.get(path)
            except azure_gcs_reads.ReadFailed:
                pass
        return bytes(fs.cat_file(path))
    except FileNotFoundError:
        return None
    except Exception as exc:
        if not _is_client_error(exc):
            raise
        raise StorageError(
            f"cannot write {path}: {failure}; reading it back failed too ({exc}), so whether it landed is unknown"
        ) from None
