"""A ``deltalog`` connection as a table root and fsspec storage options (no I/O but the named connections).

The one place that knows how a connection's fields become storage options: host/schema or
extra ``root`` -> the table root; login/password -> the store's credential names; every other
extra key -> a storage option; and the credentials of other Airflow connections it names
(``aws_conn_id`` today) underneath its own (:func:`with_named_connections`, the one spot a
new cloud's connection reuse goes). ``DeltaTableHook`` fetches the connection and calls this.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from deltalog.errors import InvalidArgumentError
from deltalog.storage import is_remote

__all__ = [
    "RESERVED_EXTRA_KEYS",
    "ConnectionSettings",
    "aws_storage_options",
    "is_absolute_location",
    "resolve_table_uri",
    "settings_from_connection",
    "storage_family",
    "with_aws_credentials",
    "with_named_connections",
]

#: Extra keys that configure the hook itself rather than the filesystem.
RESERVED_EXTRA_KEYS = frozenset({"root", "storage_options", "aws_conn_id", "history_uri"})

_AZURE_SCHEMES = frozenset({"abfs", "abfss", "az", "adl"})
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
_GCS_SCHEMES = frozenset({"gs", "gcs"})


def storage_family(location: str) -> str:
    """``file``, ``s3``, ``azure``, ``gcs`` or the URI scheme: which store a location lives on."""
    if not is_remote(location):  # the rule Storage itself uses
        return "file"
    scheme = urlparse(location).scheme.lower()
    if scheme in _S3_SCHEMES:
        return "s3"
    if scheme in _AZURE_SCHEMES:
        return "azure"
    if scheme in _GCS_SCHEMES:
        return "gcs"
    return scheme


@dataclass(frozen=True)
class ConnectionSettings:
    """What a ``deltalog`` connection resolves to: a table root and fsspec storage options."""

    root: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: An Amazon provider connection whose credentials (keys, role, profile, web identity)
    #: fill in the S3 options the deltalog connection does not set itself.
    aws_conn_id: str | None = None
    #: The maintenance history the operators using this connection record into (extra ``history_uri``).
    history_uri: str | None = None

    def resolve(self, table: str) -> str:
        """The URI of ``table``: itself when it is a URI or absolute path, else joined to the root."""
        return resolve_table_uri(table, self.root)

    def options_for(self, location: str) -> dict[str, Any]:
        """The storage options that apply to ``location``: none for local paths.

        A connection's key, secret and endpoint belong to the store its root is on (any
        remote store when the root is local or unset); handing them to a table on another
        store would send credentials where they do not belong.
        """
        family = storage_family(location)
        if family == "file" or not self.storage_options:
            return {}
        root_family = storage_family(self.root) if self.root else "file"
        if root_family not in ("file", family):
            return {}
        return dict(self.storage_options)


def is_absolute_location(table: str) -> bool:
    """A URI (``s3://...``, ``file:...``) or an absolute local path, as opposed to a table name."""
    parsed = urlparse(table)
    return (len(parsed.scheme) > 1 and (table.startswith(parsed.scheme + ":"))) or os.path.isabs(table)


def resolve_table_uri(table: str, root: str | None) -> str:
    """Join a table name to ``root``; URIs and absolute paths pass through unchanged."""
    if not isinstance(table, str) or not table.strip():
        raise InvalidArgumentError("table must be a non-empty name, path or URI")
    table = table.strip()
    if is_absolute_location(table):
        return table
    if not root:
        raise InvalidArgumentError(
            f"table {table!r} is a name, but the connection defines no table root: "
            "give a full URI/absolute path or set the connection's host (or extra 'root')"
        )
    return posixpath.join(root.rstrip("/"), table.strip("/"))


def _credential_keys(scheme: str) -> tuple[str, str]:
    """The storage-option names login/password map to for a filesystem protocol."""
    if scheme in _AZURE_SCHEMES:
        return "account_name", "account_key"
    return "key", "secret"


def settings_from_connection(conn: Any, extra: dict[str, Any] | None = None) -> ConnectionSettings:
    """Build the settings from a ``Connection`` (sync or async-fetched; no I/O here).

    Mapping: host (+ schema as a sub-path) or extra ``root`` -> table root; login/password ->
    ``key``/``secret`` (``account_name``/``account_key`` for Azure); every other non-empty extra
    key, plus an optional nested ``storage_options`` dict, -> storage options. For S3,
    ``region_name`` goes into ``client_kwargs`` where s3fs expects it. Async callers pass
    ``extra`` from ``await conn.aextra_dejson()`` (the sync property must not run in an event loop).
    """
    extra = dict(extra if extra is not None else (getattr(conn, "extra_dejson", None) or {}))
    root = extra.get("root") or None
    if not root and conn.host:
        root = conn.host.rstrip("/")
        if conn.schema:
            root = posixpath.join(root, conn.schema.strip("/"))
    scheme = urlparse(root).scheme if root else ""
    options: dict[str, Any] = {k: v for k, v in extra.items() if k not in RESERVED_EXTRA_KEYS and v not in (None, "")}
    nested = extra.get("storage_options")
    if isinstance(nested, dict):
        options.update(nested)
    key_name, secret_name = _credential_keys(scheme)
    if conn.login:
        options.setdefault(key_name, conn.login)
    if conn.password:
        options.setdefault(secret_name, conn.password)
    if "region_name" in options and (scheme in _S3_SCHEMES or not scheme):
        client_kwargs = dict(options.get("client_kwargs") or {})
        client_kwargs.setdefault("region_name", options.pop("region_name"))
        options["client_kwargs"] = client_kwargs
    aws_conn_id = extra.get("aws_conn_id") or None
    history = extra.get("history_uri") or None
    return ConnectionSettings(
        root=root,
        storage_options=options,
        aws_conn_id=str(aws_conn_id) if aws_conn_id else None,
        history_uri=str(history) if history else None,
    )


def aws_storage_options(aws_conn_id: str) -> dict[str, Any]:
    """s3fs options from an Amazon provider connection: its resolved credentials, endpoint and region.

    ``AwsBaseHook`` does the resolving (static keys, ``role_arn`` assumption, profiles, web
    identity, the instance's role), so a deltalog connection can reuse what a deployment
    already configured for AWS. The credentials are frozen for the task's duration.
    """
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        raise InvalidArgumentError(
            f"the deltalog connection names aws_conn_id={aws_conn_id!r}, but the Amazon provider is not "
            "installed: pip install 'airflow-provider-deltalog[amazon]' (apache-airflow-providers-amazon)"
        ) from None
    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    creds = hook.get_credentials()
    options: dict[str, Any] = {}
    if creds.access_key:
        options["key"] = creds.access_key
    if creds.secret_key:
        options["secret"] = creds.secret_key
    if creds.token:
        options["token"] = creds.token
    endpoint = hook.conn_config.endpoint_url
    if endpoint:
        options["endpoint_url"] = endpoint
    region = hook.region_name
    if region:
        options["client_kwargs"] = {"region_name": region}
    return options


def with_aws_credentials(settings: ConnectionSettings, aws_options: dict[str, Any]) -> ConnectionSettings:
    """The settings with the Amazon connection's options underneath the deltalog connection's own."""
    merged = {**aws_options, **settings.storage_options}
    if "client_kwargs" in aws_options and "client_kwargs" in settings.storage_options:
        merged["client_kwargs"] = {**aws_options["client_kwargs"], **settings.storage_options["client_kwargs"]}
    return dataclasses.replace(settings, storage_options=merged)


def with_named_connections(settings: ConnectionSettings) -> ConnectionSettings:
    """The settings with the credentials of every connection they name underneath their own.

    Blocking (it may fetch connections and resolve cloud identities): triggers run it in a
    thread. Today: ``aws_conn_id`` (an Amazon provider connection).
    """
    if settings.aws_conn_id:
        settings = with_aws_credentials(settings, aws_storage_options(settings.aws_conn_id))
    return settings
