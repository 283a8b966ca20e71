"""Azure and Google Cloud credentials from the Airflow connections a deployment already has.

A ``deltalog`` connection may name ``azure_conn_id`` (a ``wasb`` connection such as
``wasb_default``, or an ``adls`` one such as ``azure_data_lake_default``) or
``gcp_conn_id`` (``google_cloud_default``), as it names ``aws_conn_id`` for S3. The named
connection's fields are read the way the Microsoft Azure and Google providers document them
and turned into adlfs / gcsfs storage options; the deltalog connection's own options win.

Why read the fields instead of calling the providers' hooks: adlfs and gcsfs build their own
clients (asynchronous ones) from those options, so the identity must be described, not
handed over as another library's client. The providers are not needed at run time; install
them (extras ``microsoft-azure`` / ``google`` of apache-airflow) for their connection forms
in the UI.

Azure, in the order the ``wasb`` hook tries them: a connection string; a service principal
(``tenant_id`` + login = client id + password = secret); anonymous (``public_read``); a
shared access key (extra ``shared_access_key``, or the password); a SAS token; else
``DefaultAzureCredential`` (managed identity with ``managed_identity_client_id``, workload
identity with ``workload_identity_tenant_id``, the Azure CLI, ...). The host is the account
URL (``wasb``) or the account name (``adls``); an endpoint that is not the public cloud's
(an emulator, a sovereign cloud) is kept. Google: ``keyfile_dict`` (a service-account key
or any credential JSON google-auth loads), ``key_path``, ``credential_config_file``
(workload identity federation), ``is_anonymous``; with none of them, application default
credentials. ``project`` is passed on; ``key_secret_name`` (Secret Manager) is refused.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

from deltalog.errors import InvalidArgumentError
from deltalog_provider.version_compat import BaseHook

__all__ = [
    "azure_options_from_connection",
    "azure_storage_options",
    "gcs_options_from_connection",
    "gcs_storage_options",
]

#: The OAuth scope the Google provider asks for by default (read-write access to Cloud Storage included).
GOOGLE_DEFAULT_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_PUBLIC_BLOB = ".blob.core.windows.net"
_PUBLIC_DFS = ".dfs.core.windows.net"


def _field(extra: dict[str, Any], conn_type: str, name: str) -> Any:
    """An extra field, under its plain name or the older ``extra__<type>__<name>`` spelling."""
    value = extra.get(name)
    if value in (None, ""):
        value = extra.get(f"extra__{conn_type}__{name}")
    return None if value in (None, "") else value


def _account_url(conn: Any, conn_type: str) -> str | None:
    """The Blob endpoint the connection names (``wasb``: the host is a URL; ``adls``: an account name)."""
    host = (conn.host or "").strip()
    if not host:
        return None
    if "://" not in host:
        # adls: the account name; a wasb host without a scheme is taken the same way.
        return f"https://{host}{_PUBLIC_BLOB}"
    return host.rstrip("/")


def _split_url(url: str) -> tuple[str, str | None]:
    """(account name, custom Blob endpoint or None for the public cloud) of an account URL."""
    parsed = urlparse(url)
    hostname = parsed.hostname or ""
    for suffix in (_PUBLIC_BLOB, _PUBLIC_DFS):
        if hostname.endswith(suffix) and parsed.scheme == "https":
            return hostname[: -len(suffix)], None
    path = parsed.path.strip("/")
    account = path.split("/", 1)[0] if path else hostname.split(".", 1)[0]  # emulators: /<account>
    return account, url.rstrip("/")


def azure_options_from_connection(conn: Any) -> dict[str, Any]:
    """adlfs storage options describing a ``wasb`` or ``adls`` connection's identity (no I/O)."""
    conn_type = conn.conn_type or "wasb"
    extra = dict(conn.extra_dejson or {})
    connection_string = _field(extra, conn_type, "connection_string")
    if connection_string:
        return {"connection_string": connection_string}
    url = _account_url(conn, conn_type)
    account = _field(extra, conn_type, "account_name")
    endpoint = None
    if url:
        account, endpoint = _split_url(url)
    tenant = _field(extra, conn_type, "tenant_id")
    key = _field(extra, conn_type, "shared_access_key")
    sas = _field(extra, conn_type, "sas_token")
    if tenant:
        # A service principal: login is its client id, password its secret (both providers' rule).
        if not (conn.login and conn.password):
            raise InvalidArgumentError(
                f"Azure connection {conn.conn_id!r} names tenant_id but not the client id (login) and secret (password)"
            )
        options: dict[str, Any] = {"tenant_id": tenant, "client_id": conn.login, "client_secret": conn.password}
    elif conn_type == "wasb" and _field(extra, conn_type, "public_read"):
        options = {"anon": True}
    elif key or (conn.password and not sas):
        if conn_type == "wasb" and not url:
            account = conn.login  # wasb without a host: login is the account name
        options = {"account_key": key or conn.password}
    elif sas:
        sas = str(sas)
        if sas.startswith("http"):  # a full SAS URL: the account and endpoint come from it
            parsed = urlparse(sas)
            account, endpoint = _split_url(f"{parsed.scheme}://{parsed.netloc}{parsed.path}")
            sas = parsed.query
        options = {"sas_token": sas.lstrip("?")}
    else:
        # DefaultAzureCredential: managed identity, workload identity, environment, Azure CLI.
        options = {"anon": False}
        for name in ("managed_identity_client_id", "workload_identity_tenant_id"):
            value = _field(extra, conn_type, name)
            if value:
                options[name] = value
    if not account:
        raise InvalidArgumentError(
            f"Azure connection {conn.conn_id!r} names no storage account: set its host (the account URL for "
            "wasb, the account name for adls) or a connection_string"
        )
    if endpoint is not None:
        return _with_endpoint(options, account, endpoint, conn.conn_id)
    return {"account_name": account, **options}


def _with_endpoint(options: dict[str, Any], account: str, endpoint: str, conn_id: str) -> dict[str, Any]:
    """Options for an account behind a Blob endpoint that is not the public cloud's."""
    parsed = urlparse(endpoint)
    if "account_key" in options or "sas_token" in options:
        # adlfs reaches a custom (or plain-HTTP) endpoint only through a connection string.
        secret = (
            f"AccountKey={options['account_key']}"
            if "account_key" in options
            else f"SharedAccessSignature={options['sas_token']}"
        )
        return {
            "connection_string": f"DefaultEndpointsProtocol={parsed.scheme};AccountName={account};{secret};"
            f"BlobEndpoint={endpoint};"
        }
    if parsed.scheme != "https" or parsed.path.strip("/"):
        raise InvalidArgumentError(
            f"Azure connection {conn_id!r}: a token credential reaches an account over HTTPS at its own host only, "
            f"not {endpoint}"
        )
    return {"account_name": account, "account_host": parsed.netloc, **options}


def gcs_options_from_connection(conn: Any) -> dict[str, Any]:
    """gcsfs storage options describing a ``google_cloud_platform`` connection's identity.

    Credential files are read here (google-auth), so a bad key fails the task with the
    connection's name rather than on the first request.
    """
    import google.auth

    extra = dict(conn.extra_dejson or {})
    conn_type = "google_cloud_platform"
    options: dict[str, Any] = {}
    project = _field(extra, conn_type, "project")
    if project:
        options["project"] = project
    if _field(extra, conn_type, "key_secret_name"):
        raise InvalidArgumentError(
            f"Google connection {conn.conn_id!r} keeps its key in Secret Manager (key_secret_name), which deltalog "
            "does not read: give keyfile_dict, key_path or credential_config_file, or use application default "
            "credentials"
        )
    scopes = _field(extra, conn_type, "scope")
    scope_list = [s.strip() for s in str(scopes).split(",") if s.strip()] if scopes else [GOOGLE_DEFAULT_SCOPE]
    if _field(extra, conn_type, "is_anonymous"):
        return {**options, "token": "anon"}
    keyfile = _field(extra, conn_type, "keyfile_dict")
    path = _field(extra, conn_type, "key_path") or _field(extra, conn_type, "credential_config_file")
    try:
        if keyfile:
            info = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
        elif path and str(path).lstrip().startswith("{"):  # credential_config_file given inline
            info = json.loads(path)
        elif path:
            with open(str(path), encoding="utf-8") as fh:
                info = json.load(fh)
        else:
            return {**options, "token": "google_default"}  # application default credentials, resolved by gcsfs
        credentials = _google_credentials(info, scope_list)
    except (ValueError, OSError, google.auth.exceptions.GoogleAuthError) as exc:
        raise InvalidArgumentError(f"Google connection {conn.conn_id!r}: cannot load its credentials: {exc}") from None
    return {**options, "token": credentials}


def _google_credentials(info: dict[str, Any], scopes: list[str]) -> Any:
    """Credentials of the kind the JSON names (the deployment's own configuration, as the Google provider reads it)."""
    import warnings

    import google.auth
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account

    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "service_account":
        return service_account.Credentials.from_service_account_info(info, scopes=scopes)
    if kind == "authorized_user":
        return user_credentials.Credentials.from_authorized_user_info(info, scopes=scopes)
    if kind not in ("external_account", "external_account_authorized_user", "impersonated_service_account"):
        raise ValueError(f"unknown credential type {kind!r}")
    with warnings.catch_warnings():  # google-auth warns about untrusted input; this is the connection's own
        warnings.simplefilter("ignore", DeprecationWarning)
        credentials, _ = google.auth.load_credentials_from_dict(info, scopes=scopes)
    return credentials


def azure_storage_options(conn_id: str) -> dict[str, Any]:
    """adlfs options from the Azure connection ``conn_id`` (``wasb_default``, ``azure_data_lake_default``, ...)."""
    return azure_options_from_connection(BaseHook.get_connection(conn_id))


def gcs_storage_options(conn_id: str) -> dict[str, Any]:
    """gcsfs options from the Google connection ``conn_id`` (``google_cloud_default``, ...)."""
    return gcs_options_from_connection(BaseHook.get_connection(conn_id))
