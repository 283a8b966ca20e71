"""``DeltaTableHook``: turn an Airflow connection into a ``deltalog.DeltaTable``.

The connection (type ``deltalog``) holds two things an operator should not
repeat in every task: the storage options of the object store (credentials,
endpoint) and, optionally, a table root so tasks can name a table (``events``)
instead of spelling out its URI. Credentials are read from the connection and
handed to fsspec; they are never logged, and never leave the worker (triggers
receive the connection id, not the options).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError
from deltalog.storage import is_remote
from deltalog_provider.version_compat import AirflowNotFoundException, BaseHook, aget_connection

#: Extra keys that configure the hook itself rather than the filesystem.
RESERVED_EXTRA_KEYS = frozenset({"root", "storage_options", "aws_conn_id"})

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
    return ConnectionSettings(root=root, storage_options=options, aws_conn_id=str(aws_conn_id) if aws_conn_id else None)


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
    return ConnectionSettings(root=settings.root, storage_options=merged, aws_conn_id=settings.aws_conn_id)


class DeltaTableHook(BaseHook):
    """Resolve table names and storage options from a ``deltalog`` connection.

    A missing *default* connection is not an error: tables given as full URIs or absolute
    paths on storage that needs no credentials (local disks, instance-profile S3) work
    without defining one. A missing connection that was named explicitly is an error.

    :param deltalog_conn_id: the Airflow connection id (type ``deltalog``).
    """

    conn_name_attr = "deltalog_conn_id"
    default_conn_name = "deltalog_default"
    conn_type = "deltalog"
    hook_name = "Delta Lake (deltalog)"

    def __init__(self, deltalog_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deltalog_conn_id = deltalog_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Same UI behaviour as declared in get_provider_info (for Airflow releases that ask the hook)."""
        from deltalog_provider.get_provider_info import get_provider_info

        return get_provider_info()["connection-types"][0]["ui-field-behaviour"]

    @cached_property
    def settings(self) -> ConnectionSettings:
        """The connection's root and storage options (fetched once per hook)."""
        try:
            conn = self.get_connection(self.deltalog_conn_id)
        except AirflowNotFoundException:
            if self.deltalog_conn_id != self.default_conn_name:
                raise
            self.log.info(
                "connection %r is not defined; using no table root and no storage options", self.deltalog_conn_id
            )
            return ConnectionSettings()
        settings = settings_from_connection(conn)
        if settings.aws_conn_id:
            settings = with_aws_credentials(settings, aws_storage_options(settings.aws_conn_id))
        # Only option *names* are logged; values may be credentials.
        self.log.info(
            "connection %r: table root %s, storage options: %s%s",
            self.deltalog_conn_id,
            settings.root or "(none)",
            sorted(settings.storage_options) or "none",
            f" (credentials from AWS connection {settings.aws_conn_id!r})" if settings.aws_conn_id else "",
        )
        return settings

    @classmethod
    async def aget_settings(cls, deltalog_conn_id: str = default_conn_name) -> ConnectionSettings:
        """The settings fetched without blocking an event loop (for triggers)."""
        try:
            conn = await aget_connection(cls, deltalog_conn_id)
        except AirflowNotFoundException:
            if deltalog_conn_id != cls.default_conn_name:
                raise
            return ConnectionSettings()
        aextra = getattr(conn, "aextra_dejson", None)
        extra = await aextra() if aextra is not None else conn.extra_dejson
        settings = settings_from_connection(conn, extra)
        if settings.aws_conn_id:
            from asgiref.sync import sync_to_async

            aws = await sync_to_async(aws_storage_options)(settings.aws_conn_id)
            settings = with_aws_credentials(settings, aws)
        return settings

    def get_conn(self) -> ConnectionSettings:
        """The resolved connection settings (root and storage options)."""
        return self.settings

    @property
    def root(self) -> str | None:
        return self.settings.root

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self.settings.storage_options)

    def resolve_uri(self, table: str) -> str:
        """URI of ``table`` (a name under the connection root, a URI, or an absolute path)."""
        return self.settings.resolve(table)

    def storage_options_for(self, location: str) -> dict[str, Any]:
        """The connection's storage options if they apply to ``location`` (see ``options_for``)."""
        return self.settings.options_for(location)

    def get_table(self, table: str) -> DeltaTable:
        """A ``DeltaTable`` for ``table``, with the connection's storage options where they apply."""
        uri = self.resolve_uri(table)
        options = self.settings.options_for(uri)
        if self.settings.storage_options and not options:
            self.log.info(
                "table %s is on %s storage: the storage options of connection %r (for %s) are not applied",
                uri,
                storage_family(uri),
                self.deltalog_conn_id,
                self.settings.root or "remote tables",
            )
        else:
            self.log.info("table %s: storage options %s", uri, sorted(options) or "none")
        return DeltaTable(uri, options)

    def test_connection(self) -> tuple[bool, str]:
        """List the table root, so a wrong endpoint, bucket or credential shows up in the UI."""
        try:
            root = self.settings.root
            if not root:
                return False, "the connection defines no table root (host or extra 'root') to list"
            from deltalog.storage import Storage

            storage = Storage(root, self.settings.storage_options)
            entries = storage.fs.ls(storage.root, detail=False)
            return True, f"listed {len(entries)} entries under {root}"
        except Exception as exc:  # noqa: BLE001 - any failure is the answer the UI shows
            return False, f"cannot list the table root: {type(exc).__name__}: {exc}"
