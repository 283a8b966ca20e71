"""Static checks of docker-compose.yml and the Dockerfile.

Docker cannot run on the CI machines, so these tests catch what would break a
user's first `docker compose up`: an image without an exact tag, a mounted file
or build context that does not exist, a connection env var that Airflow cannot
parse, and version drift between the containers and the pinned working set the
test suite runs with (Airflow, Python, Spark/pyspark, Hadoop).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPOSE = os.path.join(REPO, "docker-compose.yml")
DOCKERFILE = os.path.join(REPO, "Dockerfile")

AIRFLOW_SERVICES = [
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
]
REQUIRED_SERVICES = [*AIRFLOW_SERVICES, "postgres", "spark-master", "spark-worker", "minio", "minio-init"]
EXAMPLE_DAGS = ["deltalog_ingest.py", "deltalog_maintenance.py", "deltalog_maintenance_on_change.py"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}")


def _interpolate(value: str) -> str:
    """Resolve ``${VAR:-default}`` the way compose does when no .env file is present."""

    def repl(m: re.Match[str]) -> str:
        if m.group(2) is None:
            raise AssertionError(f"{value!r}: ${{{m.group(1)}}} has no default, `docker compose up` would warn")
        return m.group(3)

    return _VAR.sub(repl, value.replace("$$", "\0")).replace("\0", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    with open(COMPOSE, encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


SHARED_ENV = os.path.join(REPO, "docker", "airflow.env")


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: _interpolate(str(v)) for k, v in env.items()}


def _shared_env() -> dict[str, str]:
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from airflow_stack import read_env_file

    return read_env_file(SHARED_ENV)


def _pyspark_jar_version(prefix: str) -> str:
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", f"{prefix}-*.jar"))
    assert jars, f"no {prefix} jar in the installed pyspark"
    return re.search(rf"{re.escape(prefix)}-(\d+\.\d+\.\d+)\.jar$", os.path.basename(jars[0])).group(1)


def test_all_components_present(services: dict[str, Any]) -> None:
    missing = [s for s in REQUIRED_SERVICES if s not in services]
    assert not missing, f"services missing from docker-compose.yml: {missing}"
    commands = {s: services[s].get("command") for s in AIRFLOW_SERVICES}
    assert commands["airflow-apiserver"] == "api-server"
    assert commands["airflow-scheduler"] == "scheduler"
    assert commands["airflow-dag-processor"] == "dag-processor"
    assert commands["airflow-triggerer"] == "triggerer"


def test_every_image_pinned_to_an_exact_tag(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        image = svc.get("image")
        assert image, f"{name}: no image (a built service still needs a pinned local tag)"
        assert "$" not in image, f"{name}: image {image!r} depends on a variable"
        ref = image.split("@", 1)[0]
        last = ref.rsplit("/", 1)[-1]
        assert ":" in last, f"{name}: image {image!r} has no tag"
        tag = last.split(":", 1)[1]
        assert tag and tag != "latest", f"{name}: image {image!r} is not pinned"
        # A bare major tag (postgres:16) moves under you: require a release number or a MinIO release stamp.
        assert re.search(r"\d+\.\d+|RELEASE\.\d{4}-\d\d-\d\dT", tag), f"{name}: tag {tag!r} is not exact"


def test_dockerfile_base_image_pinned_and_matches_the_lock() -> None:
    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    base = re.search(r"^ARG AIRFLOW_IMAGE=(\S+)$", text, re.M).group(1)
    assert re.search(r"^FROM \$\{AIRFLOW_IMAGE\}$", text, re.M)
    with open(os.path.join(REPO, "requirements.lock"), encoding="utf-8") as f:
        lock = dict(line.strip().split("==", 1) for line in f if "==" in line)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    # The lock was resolved with this interpreter; the image must run the same Airflow and Python.
    assert base == f"apache/airflow:{lock['apache-airflow']}-python{py}", base
    assert f'"apache-airflow=={lock["apache-airflow"]}"' in text
    assert "-c /opt/deltalog/requirements.lock" in text
    assert re.search(r"openjdk-17-jre-headless", text), "the Airflow image needs a JRE for spark-submit"


def test_dockerfile_copies_existing_paths_and_dockerignore_skips_venv() -> None:
    with open(DOCKERFILE, encoding="utf-8") as f:
        lines = [ln for ln in f if ln.startswith("COPY ")]
    assert lines
    for line in lines:
        parts = [p for p in line.split()[1:] if not p.startswith("--")]
        for src in parts[:-1]:
            assert os.path.exists(os.path.join(REPO, src)), f"Dockerfile copies missing {src}"
    with open(os.path.join(REPO, ".dockerignore"), encoding="utf-8") as f:
        ignored = {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}
    assert {".venv", ".git", ".demo"} <= ignored


def test_build_contexts_exist(services: dict[str, Any]) -> None:
    built = [n for n, s in services.items() if "build" in s]
    assert set(AIRFLOW_SERVICES) <= set(built)
    for name in built:
        build = services[name]["build"]
        ctx = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        assert os.path.isdir(os.path.join(REPO, ctx)), f"{name}: build context {ctx} missing"
        assert os.path.isfile(os.path.join(REPO, ctx, dockerfile)), f"{name}: {dockerfile} missing"


def test_mounts_and_volumes_exist(compose: dict[str, Any], services: dict[str, Any]) -> None:
    named = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for vol in svc.get("volumes") or []:
            src = vol.split(":", 1)[0] if isinstance(vol, str) else vol["source"]
            if src.startswith((".", "/")):
                path = os.path.normpath(os.path.join(REPO, src))
                assert os.path.exists(path), f"{name}: bind mount {src} does not exist"
            else:
                assert src in named, f"{name}: volume {src} is not declared"


def test_dag_folder_mounted_with_the_example_dags(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        mounts = [v for v in services[name]["volumes"] if v.split(":")[1] == "/opt/airflow/dags"]
        assert mounts, f"{name}: the dags folder is not mounted"
        src = os.path.join(REPO, mounts[0].split(":")[0])
        for dag in EXAMPLE_DAGS:
            assert os.path.isfile(os.path.join(src, dag)), f"example DAG {dag} missing from {src}"
        assert os.path.isfile(os.path.join(src, "spark_jobs", "ingest_events.py"))


def test_init_scripts_referenced_exist(services: dict[str, Any]) -> None:
    mounted = {}
    for svc in services.values():
        for vol in svc.get("volumes") or []:
            src, dst = vol.split(":")[:2]
            mounted[dst] = src
    for name, svc in services.items():
        for part in (svc.get("entrypoint") or []) + (
            svc.get("command") or [] if isinstance(svc.get("command"), list) else []
        ):
            if isinstance(part, str) and part.startswith("/docker/"):
                assert part in mounted, f"{name}: {part} is not mounted"
                assert os.path.isfile(os.path.join(REPO, mounted[part])), f"{name}: {mounted[part]} missing"


def test_depends_on_names_existing_services(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        deps = svc.get("depends_on") or []
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in services, f"{name} depends on unknown service {dep}"
    for name in AIRFLOW_SERVICES[1:]:
        cond = services[name]["depends_on"]["airflow-init"]["condition"]
        assert cond == "service_completed_successfully"


def test_connections_are_well_formed(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        env = _env(services[name])
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert spark["conn_type"] == "spark"
        master = f"{spark['host']}:{spark['port']}"
        assert master == "spark://spark-master:7077"
        delta = json.loads(env["AIRFLOW_CONN_DELTALOG_DEFAULT"])
        assert delta["conn_type"] == "deltalog"
        assert delta["extra"]["endpoint_url"] == "http://minio:9000"
        minio_env = _env(services["minio"])
        assert (delta["login"], delta["password"]) == (minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"])
        assert env["AIRFLOW_VAR_DELTALOG_TABLE_URI"].startswith(delta["host"] + "/")
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:airflow@postgres")
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
        # Components sign and check each other's task tokens: one secret for all.
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"]


def test_table_lives_in_the_bucket_minio_init_creates(services: dict[str, Any]) -> None:
    env = _env(services["airflow-scheduler"])
    uri = env["AIRFLOW_VAR_DELTALOG_TABLE_URI"]
    assert uri.startswith("s3://")
    with open(os.path.join(REPO, "docker", "minio-init.sh"), encoding="utf-8") as f:
        script = f.read()
    bucket = re.search(r'BUCKET="\$\{DELTALOG_BUCKET:-([a-z0-9-]+)\}"', script).group(1)
    assert uri.split("/")[2] == bucket
    assert "mc mb --ignore-existing" in script


def test_spark_cluster_matches_pyspark(services: dict[str, Any]) -> None:
    from deltalog.engines.spark_packages import SPARK_VERSION

    spark_version = _pyspark_jar_version("spark-core_2.13")
    assert spark_version == SPARK_VERSION, "pyspark differs from the Spark line named in spark_packages.py"
    for name in ("spark-master", "spark-worker"):
        image = services[name]["image"]
        assert image.startswith(f"apache/spark:{spark_version}-scala2.13-"), (
            f"{name}: {image} != pyspark {spark_version}"
        )
    assert "spark://spark-master:7077" in " ".join(services["spark-worker"]["command"])


def test_spark_conf_reaches_minio_with_a_matching_hadoop_aws(services: dict[str, Any]) -> None:
    env = _env(services["airflow-scheduler"])
    conf = json.loads(env["AIRFLOW_VAR_DELTALOG_SPARK_CONF"])
    from deltalog.engines.spark_packages import HADOOP_AWS_PACKAGE, HADOOP_VERSION

    hadoop = _pyspark_jar_version("hadoop-client-api")
    assert hadoop == HADOOP_VERSION, "pyspark's Hadoop client differs from the one named in spark_packages.py"
    assert conf["spark.jars.packages"] == HADOOP_AWS_PACKAGE == f"org.apache.hadoop:hadoop-aws:{hadoop}"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert conf["spark.driver.host"] == services["airflow-scheduler"]["hostname"]


def test_deltalog_connection_resolves_to_minio_storage_options(services: dict[str, Any], tmp_path: Any) -> None:
    """The provider's own parser turns the env connection into s3fs options for MinIO.

    Run in a subprocess with a throw-away AIRFLOW_HOME: importing Airflow here would
    configure it for the whole test session.
    """
    env_vars = _env(services["airflow-scheduler"])
    code = (
        "import json, sys\n"
        "from airflow.models.connection import Connection\n"
        "from deltalog_provider.hooks.connection import settings_from_connection\n"
        "conn = Connection.from_json(sys.argv[1], conn_id='deltalog_default')\n"
        "s = settings_from_connection(conn)\n"
        "print(json.dumps({'root': s.root, 'options': s.storage_options, 'table': s.resolve(sys.argv[2])}))\n"
    )
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            env_vars["AIRFLOW_CONN_DELTALOG_DEFAULT"],
            env_vars["AIRFLOW_VAR_DELTALOG_TABLE_URI"],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    settings = json.loads(proc.stdout.strip().splitlines()[-1])
    minio_env = _env(services["minio"])
    assert settings["root"] == "s3://deltalog/warehouse"
    assert settings["options"]["endpoint_url"] == "http://minio:9000"
    assert settings["options"]["key"] == minio_env["MINIO_ROOT_USER"]
    assert settings["options"]["secret"] == minio_env["MINIO_ROOT_PASSWORD"]
    assert settings["table"] == "s3://deltalog/warehouse/events"


def test_documented_triggers_unpause_their_dag_first() -> None:
    """Issue 15 fault 3: docs/docker-compose.md triggered deltalog_maintenance without unpausing it.

    DAGs are paused at creation on the stack, so a trigger of a paused DAG queues forever.
    """
    with open(os.path.join(REPO, "docs", "docker-compose.md"), encoding="utf-8") as f:
        text = f.read()
    commands = re.findall(r"airflow dags (unpause|trigger) (\w+)", text)
    triggered = [dag for verb, dag in commands if verb == "trigger"]
    assert {"deltalog_ingest", "deltalog_maintenance"} <= set(triggered)
    unpaused: set[str] = set()
    for verb, dag in commands:
        if verb == "unpause":
            unpaused.add(dag)
        else:
            assert dag in unpaused, f"docs/docker-compose.md triggers {dag} before unpausing it"
    # The asset-scheduled DAG has no trigger of its own but must run on the ingest's commits.
    assert "deltalog_maintenance_on_change" in unpaused


def test_airflow_services_share_the_settings_file_the_system_test_reads(services: dict[str, Any]) -> None:
    """Compose and tests/test_system.py read docker/airflow.env, so they cannot drift."""
    shared = _shared_env()
    for name in AIRFLOW_SERVICES:
        env_files = services[name].get("env_file")
        env_files = [env_files] if isinstance(env_files, str) else env_files
        assert env_files == ["docker/airflow.env"], f"{name}: env_file {env_files}"
        repeated = set(_env(services[name])) & set(shared)
        assert not repeated, f"{name} repeats shared settings in environment: {sorted(repeated)}"
    assert shared["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    # Issue 15 fault 10: LocalExecutor sized (not 32 idle workers) and the UI's Test button on.
    assert 1 <= int(shared["AIRFLOW__CORE__PARALLELISM"]) <= 8
    assert shared["AIRFLOW__CORE__TEST_CONNECTION"] == "Enabled"
    test_system = open(os.path.join(REPO, "tests", "test_system.py"), encoding="utf-8").read()
    assert "airflow.env" in test_system


def test_image_carries_the_s3a_jars_the_jobs_use(services: dict[str, Any]) -> None:
    """Issue 15 fault 11: the s3a jars are resolved into the image, where the jobs' Ivy cache points."""
    from deltalog.engines import spark_packages

    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    cache = re.search(r"^ENV DELTALOG_CACHE=(\S+)$", text, re.M).group(1)
    assert re.search(r"^RUN python /opt/deltalog/scripts/spark_jars\.py", text, re.M)
    assert "COPY --chown=airflow:0 scripts/spark_jars.py /opt/deltalog/scripts/spark_jars.py" in text
    conf = json.loads(_env(services["airflow-scheduler"])["AIRFLOW_VAR_DELTALOG_SPARK_CONF"])
    assert conf["spark.jars.ivy"] == f"{cache}/{spark_packages.ivy_dir().name}"
    assert spark_packages.HADOOP_AWS_PACKAGE in spark_packages.packages()
    assert conf["spark.jars.packages"] == spark_packages.HADOOP_AWS_PACKAGE
    # The Postgres drivers `airflow db migrate` needs are installed and checked in the image.
    assert '"/opt/deltalog[airflow,amazon]"' in text and "import deltalog, deltalog_provider, pyspark, psycopg2" in text


def test_compose_check_script_is_valid_and_drives_this_stack(services: dict[str, Any]) -> None:
    """scripts/compose-check.sh (up, trigger, wait, assert, down) cannot run here: check it by construction."""
    import shutil

    script = os.path.join(REPO, "scripts", "compose-check.sh")
    proc = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", "-S", "warning", script], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout
    with open(script, encoding="utf-8") as f:
        text = f.read()
    assert "docker compose -f docker-compose.yml" in text
    assert re.search(r"trap down EXIT", text) and "down -v" in text
    assert "up -d --build" in text
    # It talks to the api-server the compose file publishes, from the container it execs into.
    assert "8080:8080" in services["airflow-apiserver"]["ports"]
    assert "compose exec -T" in text and "airflow-scheduler python -" in text
    assert "http://airflow-apiserver:8080" in text
    env = _env(services["airflow-scheduler"])
    for var in re.findall(r'os\.environ(?:\.get)?\[?\(?"(AIRFLOW_VAR_[A-Z_]+)"', text):
        assert var in env or var == "AIRFLOW_VAR_DELTALOG_INGEST_ROWS", var
    for dag in EXAMPLE_DAGS:
        assert dag.removesuffix(".py") in text
    # The embedded Python is valid Python.
    body = text.split("python - <<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    compile(body, "compose-check.sh:python", "exec")
    # The unpause comes before any trigger (fault 3 of issue 15).
    assert text.index('{"is_paused": False}') < text.index("def trigger")


def test_airflow_extra_brings_the_postgres_drivers() -> None:
    """Issue 15 fault 1: `airflow db migrate` on Postgres failed with No module named 'asyncpg'."""
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", req, maxsplit=1)[0] for req in extras["airflow"]}
    assert {"psycopg2-binary", "asyncpg"} <= names
    with open(os.path.join(REPO, "requirements.lock"), encoding="utf-8") as f:
        locked = {line.split("==")[0].lower() for line in f if "==" in line}
    assert {"psycopg2-binary", "asyncpg", "apache-airflow-providers-amazon"} <= locked
    import asyncpg  # noqa: F401
    import psycopg2  # noqa: F401
