"""The one place that names the Spark line and the jars deltalog's Spark parts need.

The product's Spark jobs, the Delta Spark oracle in the tests, the compose file's
``spark.jars.packages`` and the Dockerfile all use the versions below (the tests
check the compose file against them), so a user's cluster that runs Delta Spark
runs our jobs unchanged:

- Spark 4.2.0 (pip ``pyspark==4.2.0``), the newest line Delta Spark 4.4.0 supports
  (``delta-spark`` pins ``pyspark<=4.2.0``).
- Delta Spark 4.4.0, Maven ``io.delta:delta-spark_4.2_2.13`` (the Spark-line suffixed
  artifact ``configure_spark_with_delta_pip`` picks; ``delta-spark_2.13:4.4.x`` is not
  published).
- The s3a connector ``org.apache.hadoop:hadoop-aws`` at the version of the Hadoop
  client inside pyspark 4.2.0 (3.5.0); its POM brings the matching AWS SDK bundle.

Jars are resolved from Maven coordinates only, by Spark's own Ivy
(``spark.jars.packages``), into a cache keyed by the versions under
``~/.cache/deltalog`` so every clone on the machine reuses one download, from Maven
Central alone (``spark.jars.ivySettings``: :func:`ivy_settings_file`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from deltalog.errors import InvalidArgumentError

__all__ = [
    "DELTA_SQL_CONF",
    "GCS_CONNECTOR_PACKAGE",
    "HADOOP_AZURE_PACKAGE",
    "azure_jar_list_file",
    "azure_spark_conf",
    "gcs_jar_list_file",
    "gcs_spark_conf",
    "ivy_dir",
    "ivy_settings_file",
    "jar_list_file",
    "packages",
    "resolve_conf",
    "spark_conf",
]

SPARK_VERSION = "4.2.0"
SCALA_BINARY_VERSION = "2.13"
DELTA_SPARK_VERSION = "4.4.0"
#: The Hadoop client bundled in pyspark 4.2.0 (jars/hadoop-client-api-3.5.0.jar).
HADOOP_VERSION = "3.5.0"

_SPARK_LINE = ".".join(SPARK_VERSION.split(".")[:2])
DELTA_SPARK_PACKAGE = f"io.delta:delta-spark_{_SPARK_LINE}_{SCALA_BINARY_VERSION}:{DELTA_SPARK_VERSION}"
HADOOP_AWS_PACKAGE = f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}"
#: Google's GCS connector for Hadoop 3 (the JSON API; an endpoint can be named, so it runs against
#: fake-gcs-server). Hadoop's own ``hadoop-gcp`` 3.5.0 reaches storage.googleapis.com only and fails
#: without credentials, so it cannot be tested here.
GCS_CONNECTOR_VERSION = "hadoop3-2.2.26"
#: hadoop-azure at the Hadoop client's version: its ABFS driver speaks the DFS endpoint, or, for
#: accounts without a hierarchical namespace (and Azurite), the Blob endpoint.
HADOOP_AZURE_PACKAGE = f"org.apache.hadoop:hadoop-azure:{HADOOP_VERSION}"
GCS_CONNECTOR_PACKAGE = f"com.google.cloud.bigdataoss:gcs-connector:{GCS_CONNECTOR_VERSION}"

#: Spark settings that turn a session into a Delta Spark session.
DELTA_SQL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def cache_root() -> Path:
    """``$DELTALOG_CACHE`` or ``~/.cache/deltalog``: expensive downloads and corpora, shared by clones."""
    return Path(os.environ.get("DELTALOG_CACHE") or Path.home() / ".cache" / "deltalog")


def ivy_dir() -> Path:
    """The Ivy directory (``spark.jars.ivy``), keyed by the versions; one for every subset of the packages."""
    return cache_root() / f"ivy-spark{SPARK_VERSION}-delta{DELTA_SPARK_VERSION}-hadoop{HADOOP_VERSION}"


#: Ivy settings with one resolver: Maven Central (Ivy's ``ibiblio`` resolver in the Maven 2 layout, at its
#: default root). Spark's built-in chain also asks a second, Spark-packages repository that none of our
#: coordinates need; where it cannot be reached (a machine that reaches Maven Central only) every artifact
#: it misses there prints a warning, dozens per resolution, which read as failures.
IVY_SETTINGS = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by deltalog (deltalog.engines.spark_packages): resolve Spark packages from Maven Central alone. -->
<ivysettings>
  <settings defaultResolver="central"/>
  <!-- A lock per artifact in the cache: resolutions running at once (the set-up resolves its package
       sets side by side) never write the same file together. -->
  <caches lockStrategy="artifact-lock-nio"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true"/>
  </resolvers>
</ivysettings>
"""


def ivy_settings_file() -> Path:
    """The Ivy settings file of :data:`IVY_SETTINGS` in the Ivy directory (written when missing or different).

    Every resolution of ``spark.jars.packages`` names it (``spark.jars.ivySettings``): the set-up's
    (``scripts/spark_jars.py``), the tests' sessions and spark-submit calls, and the Spark engines' jobs
    when the jars are not cached yet.
    """
    path = ivy_dir() / "ivysettings.xml"
    try:
        current = path.read_text()
    except OSError:
        current = None
    if current != IVY_SETTINGS:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.write_text(IVY_SETTINGS)
        os.replace(staging, path)  # one rename: a concurrent reader sees the old or the new file, whole
    return path


def resolve_conf(coordinates: str) -> dict[str, str]:
    """Spark settings that resolve ``coordinates`` (Maven, comma-separated) from Maven Central into the cache."""
    return {
        "spark.jars.packages": coordinates,
        "spark.jars.ivy": str(ivy_dir()),
        "spark.jars.ivySettings": str(ivy_settings_file()),
    }


def packages(*, delta: bool = True, s3a: bool = True) -> str:
    """The ``spark.jars.packages`` value (comma-separated Maven coordinates)."""
    names = ([DELTA_SPARK_PACKAGE] if delta else []) + ([HADOOP_AWS_PACKAGE] if s3a else [])
    return ",".join(names)


def jar_list_file(*, delta: bool, s3a: bool) -> Path:
    """Where ``scripts/spark_jars.py`` records the jars Ivy resolved for one package set."""
    return ivy_dir() / f"jars-{'delta' if delta else ''}{'-' if delta and s3a else ''}{'s3a' if s3a else ''}.txt"


def spark_conf(*, delta: bool = True, s3a: bool = True) -> dict[str, str]:
    """Spark settings that put the packages on the classpath (+ the Delta SQL extension when ``delta``).

    Once ``scripts/spark_jars.py`` has resolved a package set, its jars are named
    directly (``spark.jars``: no Ivy resolution, no network, no lock at session
    start); before that, ``spark.jars.packages`` with the cache as ``spark.jars.ivy`` (:func:`resolve_conf`).
    """
    conf: dict[str, str] = {}
    if delta or s3a:
        listed = jar_list_file(delta=delta, s3a=s3a)
        jars = listed.read_text().split() if listed.exists() else []
        if jars and all(os.path.exists(j) for j in jars):
            conf["spark.jars"] = ",".join(jars)
        else:
            conf = resolve_conf(packages(delta=delta, s3a=s3a))
    if delta:
        conf.update(DELTA_SQL_CONF)
    return conf


def azure_jar_list_file() -> Path:
    """Where ``scripts/spark_jars.py`` records hadoop-azure's jars."""
    return ivy_dir() / "jars-azure.txt"


def _jars_conf(listed: Path, coordinates: str) -> dict[str, str]:
    jars = listed.read_text().split() if listed.exists() else []
    if jars and all(os.path.exists(j) for j in jars):
        return {"spark.jars": ",".join(jars)}
    return resolve_conf(coordinates)


def azure_spark_conf(host: str, options: dict[str, Any]) -> tuple[dict[str, str], str]:
    """Spark settings for an Azure table on the DFS ``host`` (``<account>.dfs.core.windows.net``), and the
    ABFS scheme to name it with.

    The identity and endpoint of the adlfs storage ``options``: a ``connection_string``
    (its ``AccountKey`` or ``SharedAccessSignature``, its ``BlobEndpoint``), ``account_key``,
    ``sas_token``, a service principal (``tenant_id``, ``client_id``, ``client_secret``), or,
    with none of them, the managed identity (``managed_identity_client_id`` optional). A Blob
    endpoint at an address and port (an emulator) is reached over its Blob API without TLS, as
    an account without a hierarchical namespace. Anonymous access has no ABFS form.
    """
    from deltalog.storage.azure_gcs_reads import parse_connection_string

    parts = parse_connection_string(str(options.get("connection_string") or ""))
    key = parts.get("AccountKey") or options.get("account_key")
    sas = parts.get("SharedAccessSignature") or options.get("sas_token")
    hadoop: dict[str, str] = {}
    scheme = "abfss"
    endpoint = parts.get("BlobEndpoint")
    if endpoint and not urlparse(endpoint).hostname.endswith(".core.windows.net"):  # type: ignore[union-attr]
        parsed = urlparse(endpoint)
        if parsed.scheme != "http" or not parsed.port:
            raise InvalidArgumentError(
                f"the Spark engine reaches an Azure endpoint other than the public cloud's only as an emulator "
                f"(http://address:port/account), not {endpoint}"
            )
        scheme = "abfs"
        hadoop.update(
            {
                "fs.azure.abfs.endpoint": f"{parsed.hostname}:{parsed.port}",
                "fs.azure.always.use.https": "false",
                "fs.azure.account.hns.enabled": "false",
                "fs.azure.fns.account.service.type": "BLOB",
                # The default Apache HTTP client wants a TLS socket factory even for plain HTTP.
                "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
                "fs.azure.ssl.channel.mode": "Default_JSSE",
            }
        )
    if key:
        hadoop[f"fs.azure.account.key.{host}"] = str(key)
    elif sas:
        hadoop.update(
            {
                f"fs.azure.account.auth.type.{host}": "SAS",
                f"fs.azure.sas.token.provider.type.{host}": "org.apache.hadoop.fs.azurebfs.sas.FixedSASTokenProvider",
                f"fs.azure.sas.fixed.token.{host}": str(sas).lstrip("?"),
            }
        )
    elif options.get("anon") is True:
        raise InvalidArgumentError("the Spark engine has no anonymous access to Azure (ABFS signs every request)")
    elif options.get("client_id") and options.get("client_secret") and options.get("tenant_id"):
        hadoop.update(
            {
                f"fs.azure.account.auth.type.{host}": "OAuth",
                f"fs.azure.account.oauth.provider.type.{host}": "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
                f"fs.azure.account.oauth2.client.id.{host}": str(options["client_id"]),
                f"fs.azure.account.oauth2.client.secret.{host}": str(options["client_secret"]),
                f"fs.azure.account.oauth2.client.endpoint.{host}": (
                    f"https://login.microsoftonline.com/{options['tenant_id']}/oauth2/token"
                ),
            }
        )
    else:  # DefaultAzureCredential's place in ABFS: the managed identity
        hadoop.update(
            {
                f"fs.azure.account.auth.type.{host}": "OAuth",
                f"fs.azure.account.oauth.provider.type.{host}": "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider",
            }
        )
        if options.get("managed_identity_client_id"):
            hadoop[f"fs.azure.account.oauth2.client.id.{host}"] = str(options["managed_identity_client_id"])
    conf = _jars_conf(azure_jar_list_file(), HADOOP_AZURE_PACKAGE)
    # hadoop-azure 3.5.0 leaves two non-daemon scheduler threads behind: without an explicit exit
    # the driver's JVM outlives the finished job (spark-submit never returns).
    conf["spark.submit.callSystemExitOnMainExit"] = "true"
    return {**conf, **{f"spark.hadoop.{k}": v for k, v in hadoop.items()}}, scheme


def gcs_jar_list_file() -> Path:
    """Where ``scripts/spark_jars.py`` records the GCS connector's jars."""
    return ivy_dir() / f"jars-gcs-{GCS_CONNECTOR_VERSION}.txt"


#: Hadoop 3.5's core-default.xml gives these ``fs.gs`` sizes with a unit (``64m``), which the GCS
#: connector 2.2 reads as plain integers: the same values in bytes.
_GCS_SIZES = {
    "fs.gs.block.size": 64 << 20,
    "fs.gs.rewrite.max.chunk.size": 512 << 20,
    "fs.gs.outputstream.buffer.size": 8 << 20,
    "fs.gs.inputstream.inplace.seek.limit": 8 << 20,
    "fs.gs.inputstream.min.range.request.size": 2 << 20,
}


def gcs_spark_conf(options: dict[str, Any]) -> dict[str, str]:
    """Spark settings for a ``gs://`` table: the GCS connector's jars and the Hadoop settings that reach
    what the gcsfs storage ``options`` reach, with the same identity.

    ``endpoint_url`` (or ``STORAGE_EMULATOR_HOST``) names the endpoint; ``token`` is ``anon``
    (no credentials), a service-account key file's path, or unset / ``google_default``
    (application default credentials: ``GOOGLE_APPLICATION_CREDENTIALS``, else the metadata
    server); ``project`` is the project. A token given as a dict or a credentials object has no
    Hadoop form: InvalidArgumentError (write the key to a file the cluster can read).
    """
    conf = _jars_conf(gcs_jar_list_file(), GCS_CONNECTOR_PACKAGE)
    hadoop: dict[str, Any] = {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        **_GCS_SIZES,
    }
    endpoint = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if endpoint:
        hadoop["fs.gs.storage.root.url"] = str(endpoint).rstrip("/") + "/"
    if options.get("project"):
        hadoop["fs.gs.project.id"] = options["project"]
    token = options.get("token")
    if token == "anon":
        hadoop.update({"fs.gs.auth.service.account.enable": "false", "fs.gs.auth.null.enable": "true"})
    elif isinstance(token, str) and token not in ("google_default", "cloud"):
        if not os.path.isfile(token):
            raise InvalidArgumentError(f"the Spark engine reads a GCS key from a file; {token!r} is not one")
        hadoop.update({"fs.gs.auth.service.account.enable": "true", "fs.gs.auth.service.account.json.keyfile": token})
    elif token not in (None, "google_default", "cloud"):
        raise InvalidArgumentError(
            "the Spark engine takes a GCS identity as a key file path, 'anon' or application default credentials; "
            f"a token given as {type(token).__name__} has no Hadoop form (write the key to a file)"
        )
    return {**conf, **{f"spark.hadoop.{k}": str(v) for k, v in hadoop.items()}}


def s3a_conf(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1") -> dict[str, str]:
    """s3a settings for an S3-compatible endpoint (MinIO, a local test server) with static keys."""
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.endpoint.region": region,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
