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
      "apache-airflow==3.3.2" "/opt/deltalog[airflow,amazon]" \
    && python -c "import deltalog, deltalog_provider, pyspark, psycopg2, asyncpg" \
    && command -v spark-submit
# The s3a jars (hadoop-aws + the AWS SDK bundle its POM names) and Delta Spark, resolved
# by Maven coordinates into an Ivy cache keyed by the versions
# (deltalog.engines.spark_packages), at build time: the Spark jobs of a fresh container
# find them there (compose's spark.jars.ivy) instead of downloading them.
COPY --chown=airflow:0 scripts/spark_jars.py /opt/deltalog/scripts/spark_jars.py
ENV DELTALOG_CACHE=/opt/deltalog/cache
RUN python /opt/deltalog/scripts/spark_jars.py \
    && python -c "from deltalog.engines.spark_packages import ivy_dir; print(ivy_dir())"
