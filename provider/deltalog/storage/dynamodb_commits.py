"""S3 commits coordinated through a DynamoDB table: the protocol of Delta Spark's S3DynamoDBLogStore.

Why: deltalog's own S3 commit is a conditional PUT (``If-None-Match: *``), atomic on S3,
but Delta Spark's default S3 log store (``S3SingleDriverLogStore``) checks for the file
and then does a plain PUT: it is only atomic inside one JVM, so a Delta Spark commit
racing from another process can overwrite ours. Several writers on one S3 table are
safe only when every one of them agrees on one arbiter; Delta Spark
(``io.delta.storage.S3DynamoDBLogStore``) uses a DynamoDB table (as delta-rs did in earlier
releases, with the storage options named below), and this module speaks the same protocol,
entry for entry (Delta's ``BaseExternalLogStore`` / ``S3DynamoDBLogStore``):

- one item per commit, key ``tablePath`` (HASH, the table URI as the writers spell it,
  no trailing slash) + ``fileName`` (RANGE, ``00000000000000000042.json``), attributes
  ``tempPath`` (relative to ``_delta_log``: ``.tmp/<fileName>.<uuid>``), ``complete``
  (the string ``"true"``/``"false"``) and, once complete, ``expireTime`` (epoch seconds,
  a day on; the table's TTL attribute);
- commit N: fail if N.json exists; make sure N-1 is complete (recover it if not); write
  the actions to the temp file; put the entry ``complete=false`` *only if absent* (the
  commit point: the loser gets FileExistsError); copy the temp file to N.json; mark the
  entry complete;
- recovery: a writer that died after its entry was put left a temp file and an
  incomplete entry; whoever next lists the log (or commits N+1) copies the temp file
  into N.json and marks the entry complete, so no writer ever leaves a hole.

Opt-in through ``storage_options`` with delta-rs's names: ``AWS_S3_LOCKING_PROVIDER``
= ``dynamodb``, ``DELTA_DYNAMO_TABLE_NAME`` (default ``delta_log``), and optionally
``AWS_ENDPOINT_URL_DYNAMODB``, ``AWS_REGION_DYNAMODB``, ``AWS_ACCESS_KEY_ID_DYNAMODB``,
``AWS_SECRET_ACCESS_KEY_DYNAMODB``, ``AWS_SESSION_TOKEN_DYNAMODB``; otherwise the
region and keys are the S3 options' (``key``, ``secret``, ``token``, ``profile``,
``client_kwargs.region_name``), then botocore's own chain. Creating the DynamoDB table
is the user's job, as with Delta Spark and delta-rs (docs/commits.md, "Several writers on S3").
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from deltalog.errors import InvalidArgumentError, StorageError

__all__ = ["DynamoDBCommits", "OPTIONS", "wanted"]

log = logging.getLogger(__name__)


class Storage(Protocol):
    """What the DynamoDB protocol needs of a table's storage (``deltalog.storage.filesystem.Storage``
    has it); declared here so this module, which that one uses, never imports it back."""

    @property
    def log_dir(self) -> str: ...

    def join(self, *parts: str) -> str: ...

    def exists(self, path: str) -> bool: ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def conditional_put(self, path: str, data: bytes) -> None: ...

    def delete(self, path: str) -> bool: ...


PROVIDER_OPTION = "AWS_S3_LOCKING_PROVIDER"
TABLE_OPTION = "DELTA_DYNAMO_TABLE_NAME"
DEFAULT_TABLE = "delta_log"
ENDPOINT_OPTION = "AWS_ENDPOINT_URL_DYNAMODB"
REGION_OPTION = "AWS_REGION_DYNAMODB"
KEY_OPTION = "AWS_ACCESS_KEY_ID_DYNAMODB"
SECRET_OPTION = "AWS_SECRET_ACCESS_KEY_DYNAMODB"
TOKEN_OPTION = "AWS_SESSION_TOKEN_DYNAMODB"
#: Storage options this module reads (never passed on to fsspec or obstore).
OPTIONS = frozenset(
    {PROVIDER_OPTION, TABLE_OPTION, ENDPOINT_OPTION, REGION_OPTION, KEY_OPTION, SECRET_OPTION, TOKEN_OPTION}
)

#: How long a complete entry must outlive its commit (Delta's default: a day), see BaseExternalLogStore.
EXPIRATION_DELAY_SECONDS = 86_400
#: Attempts at finishing an incomplete commit (copy + mark complete) before giving up, as Delta's fixDeltaLog.
FIX_ATTEMPTS = 4
#: Delta Spark's region when none is configured.
DEFAULT_REGION = "us-east-1"

_COMMIT_NAME = re.compile(r"^\d{20}\.json$")
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


@dataclass(frozen=True)
class CommitEntry:
    """One DynamoDB item: the commit ``file_name`` of ``table_path``, its temp file and whether it is done."""

    table_path: str
    file_name: str
    temp_path: str
    complete: bool
    expire_time: int | None = None

    def item(self) -> dict[str, dict[str, str]]:
        out = {
            "tablePath": {"S": self.table_path},
            "fileName": {"S": self.file_name},
            "tempPath": {"S": self.temp_path},
            "complete": {"S": "true" if self.complete else "false"},
        }
        if self.expire_time is not None:
            out["expireTime"] = {"N": str(self.expire_time)}
        return out

    @classmethod
    def from_item(cls, item: dict[str, dict[str, str]]) -> CommitEntry:
        expire = item.get("expireTime")
        return cls(
            item["tablePath"]["S"],
            item["fileName"]["S"],
            item["tempPath"]["S"],
            item["complete"]["S"] == "true",
            int(expire["N"]) if expire else None,
        )

    def as_complete(self) -> CommitEntry:
        return CommitEntry(
            self.table_path, self.file_name, self.temp_path, True, int(time.time()) + EXPIRATION_DELAY_SECONDS
        )


def wanted(options: dict[str, Any]) -> bool:
    """Whether the storage options ask for DynamoDB coordination (InvalidArgumentError for an unknown provider)."""
    provider = options.get(PROVIDER_OPTION)
    if provider is None:
        for name in OPTIONS - {PROVIDER_OPTION}:
            if name in options:
                raise InvalidArgumentError(
                    f"storage option {name} is set but {PROVIDER_OPTION} is not: set {PROVIDER_OPTION}=dynamodb "
                    "to coordinate S3 commits through DynamoDB"
                )
        return False
    if str(provider).strip().lower() != "dynamodb":
        raise InvalidArgumentError(f"storage option {PROVIDER_OPTION} must be 'dynamodb', got {provider!r}")
    return True


def table_path_for(uri: str) -> str:
    """The ``tablePath`` key: the table URI without user info, repeated or trailing slashes (as Delta Spark
    spells it: Hadoop's qualified Path).

    Every writer must spell the table the same way (Delta Spark on s3a writes ``s3a://bucket/path``,
    so open the table as ``s3a://`` too); entries under another spelling coordinate nothing.
    """
    scheme, _, rest = uri.partition("://")
    authority, slash, path = rest.partition("/")
    authority = authority.rsplit("@", 1)[-1]
    path = re.sub("/{2,}", "/", slash + path)  # as Hadoop's Path normalises it
    return f"{scheme}://{authority}{path}".rstrip("/")


class DynamoDBCommits:
    """The DynamoDB side of the commits of one table (``storage``), created once per Storage."""

    def __init__(self, uri: str, options: dict[str, Any]) -> None:
        scheme = uri.partition("://")[0].lower() if "://" in uri else ""
        if scheme not in ("s3", "s3a"):
            raise InvalidArgumentError(
                f"storage option {PROVIDER_OPTION}=dynamodb coordinates S3 commits; {uri!r} is not an s3:// or s3a:// URI"
            )
        self.table_name = str(options.get(TABLE_OPTION) or DEFAULT_TABLE)
        self.table_path = table_path_for(uri)
        self._profile = options.get("profile")
        self._settings = self._client_settings(options)

    # --- the DynamoDB client ------------------------------------------------------------

    @staticmethod
    def _client_settings(o: dict[str, Any]) -> dict[str, Any]:
        """The client's endpoint, region and keys: the DynamoDB options first, then the S3 ones."""
        found = o.get("client_kwargs")
        kwargs: dict[str, Any] = found if isinstance(found, dict) else {}
        settings = {
            "endpoint_url": o.get(ENDPOINT_OPTION),
            "region_name": o.get(REGION_OPTION) or kwargs.get("region_name") or o.get("region_name"),
            "aws_access_key_id": o.get(KEY_OPTION) or o.get("key"),
            "aws_secret_access_key": o.get(SECRET_OPTION) or o.get("secret"),
            "aws_session_token": o.get(TOKEN_OPTION) or o.get("token"),
        }
        return {k: v for k, v in settings.items() if v}

    @property
    def client(self) -> Any:
        """A botocore DynamoDB client, one per process and settings (clients are thread-safe, not fork-safe)."""
        settings = dict(self._settings)
        profile = self._profile
        key = (os.getpid(), profile, tuple(sorted(settings.items())))
        with _clients_lock:
            found = _clients.get(key)
            if found is not None:
                return found
        import botocore.config
        import botocore.session

        session = botocore.session.Session(profile=profile) if profile else botocore.session.get_session()
        if "region_name" not in settings and not session.get_config_variable("region"):
            settings["region_name"] = DEFAULT_REGION
        config = botocore.config.Config(connect_timeout=5, retries={"max_attempts": 3, "mode": "standard"})
        client = session.create_client("dynamodb", config=config, **settings)
        with _clients_lock:
            return _clients.setdefault(key, client)

    def _call(self, action: str, **kwargs: Any) -> Any:
        """One DynamoDB request; a missing table or any client failure becomes one clear deltalog error."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, action)(TableName=self.table_name, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ConditionalCheckFailedException":
                raise
            if code == "ResourceNotFoundException":
                raise InvalidArgumentError(
                    f"the DynamoDB table {self.table_name!r} (storage option {TABLE_OPTION}) does not exist"
                    f"{self._where()}: create it as for Delta Spark's S3DynamoDBLogStore (key tablePath: HASH, "
                    "fileName: RANGE, both strings; TTL on expireTime), see docs/commits.md"
                ) from None
            raise StorageError(f"DynamoDB {action} on table {self.table_name!r} failed: {exc}") from None
        except BotoCoreError as exc:
            raise StorageError(f"DynamoDB {action} on table {self.table_name!r} failed: {exc}") from None

    def _where(self) -> str:
        settings = self._settings
        where = settings.get("endpoint_url") or settings.get("region_name")
        return f" at {where}" if where else ""

    def get_entry(self, file_name: str) -> CommitEntry | None:
        item = self._call(
            "get_item",
            Key={"tablePath": {"S": self.table_path}, "fileName": {"S": file_name}},
            ConsistentRead=True,
        ).get("Item")
        return CommitEntry.from_item(item) if item else None

    def latest_entry(self) -> CommitEntry | None:
        """The entry of the newest commit of the table (file names sort as versions: 20 digits)."""
        items = self._call(
            "query",
            KeyConditionExpression="tablePath = :p",
            ExpressionAttributeValues={":p": {"S": self.table_path}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        ).get("Items", [])
        return CommitEntry.from_item(items[0]) if items else None

    def put_entry(self, entry: CommitEntry, *, overwrite: bool) -> None:
        """Put ``entry``; unless ``overwrite``, only if the commit has no entry yet (FileExistsError if it has)."""
        from botocore.exceptions import ClientError

        condition = {} if overwrite else {"ConditionExpression": "attribute_not_exists(fileName)"}
        try:
            self._call("put_item", Item=entry.item(), **condition)
        except ClientError:  # only ConditionalCheckFailedException gets here
            raise FileExistsError(f"{self.table_path}/_delta_log/{entry.file_name}") from None

    # --- commits ------------------------------------------------------------------------

    @staticmethod
    def is_commit(storage: Storage, path: str) -> bool:
        """Whether ``path`` is a commit file (N.json) of the table's log: the only writes coordinated here."""
        return posixpath.dirname(path) == storage.log_dir and bool(_COMMIT_NAME.match(posixpath.basename(path)))

    def commit(self, storage: Storage, path: str, data: bytes) -> None:
        """Create the commit ``path`` with ``data`` unless that version exists: FileExistsError if it does."""
        name = posixpath.basename(path)
        if storage.exists(path):
            raise FileExistsError(path)
        version = int(name.split(".", 1)[0])
        if version > 0:
            prev_name = f"{version - 1:020d}.json"
            prev = self.get_entry(prev_name)
            if prev is not None and not prev.complete:
                self.fix(storage, prev)
            elif not storage.exists(storage.join("_delta_log", prev_name)):
                raise StorageError(
                    f"cannot commit {path}: the previous commit {prev_name} is neither in the log nor pending in "
                    f"the DynamoDB table {self.table_name!r}"
                )
        else:
            entry = self.get_entry(name)
            if entry is not None and entry.complete:
                raise StorageError(
                    f"cannot create {self.table_path}: the DynamoDB table {self.table_name!r} still holds entries "
                    "of an earlier table at this location; delete them first"
                )
        entry = CommitEntry(self.table_path, name, f".tmp/{name}.{uuid.uuid4()}", False)
        temp = storage.join("_delta_log", *entry.temp_path.split("/"))
        storage.write_atomic(temp, data)
        try:
            self.put_entry(entry, overwrite=False)  # the commit point
        except FileExistsError:
            try:
                storage.delete(temp)  # ours, named by no entry
            except StorageError as exc:  # an unreferenced leftover, like any writer's temp file
                log.warning("cannot delete the temp file %s of a lost commit: %s", temp, exc)
            # The winner's version file may not be there yet (or ever, if it died): the
            # caller reads it next to check for conflicts, so finish the winner's commit first.
            winner = self.get_entry(name)
            if winner is not None and not winner.complete:
                self.fix(storage, winner)
            raise
        # The version is ours now. Finishing it is best effort, as in Delta Spark: a failure
        # here leaves the temp file and the incomplete entry, which the next reader or
        # writer completes, so the commit is reported as landed.
        try:
            self._copy(storage, temp, path, data)
            self.put_entry(entry.as_complete(), overwrite=True)
        except (OSError, StorageError) as exc:
            log.warning(
                "commit %s is recorded in DynamoDB but not finished (%s); the next reader finishes it", path, exc
            )

    def _copy(self, storage: Storage, temp: str, target: str, data: bytes | None = None) -> None:
        """Put the temp file's content at ``target`` unless it is there already (a recoverer was first)."""
        if data is None:
            data = storage.read_bytes(temp)
        try:
            storage.conditional_put(target, data)
        except FileExistsError:
            pass

    def fix(self, storage: Storage, entry: CommitEntry) -> None:
        """Finish an incomplete commit: copy its temp file to the version file, then mark the entry complete."""
        if entry.complete:
            return
        target = storage.join("_delta_log", entry.file_name)
        temp = storage.join("_delta_log", *entry.temp_path.split("/"))
        for attempt in range(FIX_ATTEMPTS):
            try:
                if not storage.exists(target):
                    self._copy(storage, temp, target)
                self.put_entry(entry.as_complete(), overwrite=True)
                log.info("finished the incomplete commit %s of %s", entry.file_name, self.table_path)
                return
            except (OSError, StorageError) as exc:
                if attempt == FIX_ATTEMPTS - 1:
                    raise StorageError(
                        f"cannot finish the incomplete commit {entry.file_name} of {self.table_path} (its temp file "
                        f"_delta_log/{entry.temp_path}, DynamoDB table {self.table_name!r}): {exc}"
                    ) from None
                time.sleep(0.1 * (attempt + 1))

    def recover(self, storage: Storage) -> None:
        """Before the log is listed: finish the newest commit if its writer did not (Delta Spark's listFrom)."""
        entry = self.latest_entry()
        if entry is not None and not entry.complete:
            self.fix(storage, entry)
