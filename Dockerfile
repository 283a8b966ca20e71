# The Airflow image of the docker-compose stack: Apache Airflow 3.3.2 plus a Java
# runtime (spark-submit runs the PySpark driver inside the Airflow containers in
# client deploy mode) plus this provider with the pinned working set of
# requirements.lock, so the containers run exactly what the test suite ran.
#
# Build context: the repository root (see .dockerignore).
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

USER root
# Spark 4 needs Java 17 or newer. Debian bookworm ships 17; newer Debian releases
# only ship 21, which Spark 4 supports as well. procps gives spark-class `ps`.
RUN set -eux; \
    apt-get update; \
    (apt-get install -y --no-install-recommends openjdk-17-jre-headless \
      || apt-get install -y --no-install-recommends openjdk-21-jre-headless); \
    apt-get install -y --no-install-recommends procps; \
    ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/opt/java

USER airflow
COPY --chown=airflow:0 requirements.lock pyproject.toml README.md /opt/deltalog/
COPY --chown=airflow:0 provider/ /opt/deltalog/provider/
# The lock file is used as a constraints file: exactly the versions the test
# suite ran with (Airflow 3.3.2, apache-spark provider 6.3.4, pyspark 4.2.0, ...),
# without installing the test-only packages it also pins.
RUN pip install --no-cache-dir -c /opt/deltalog/requirements.lock \
      "apache-airflow==3.3.2" "/opt/deltalog[airflow]" \
    && python -c "import deltalog, deltalog_provider, pyspark" \
    && command -v spark-submit
