import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from jvm_options import SHORT_JVM_OPTIONS  # noqa: E402 (after the path)

# The example DAGs record into a maintenance history beside the demo tables by default
# (dags/deltalog_example); a test run writes none unless a test names one in its own folder.
os.environ.setdefault("AIRFLOW_VAR_DELTALOG_HISTORY_URI", "")

# The JVMs the tests start through spark-submit live seconds to a minute: C1 only, a serial collector
# (tests/jvm_options.py). A caller's own setting wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", SHORT_JVM_OPTIONS)

#: Shared fixtures: local S3 (moto), Azure (Azurite) and GCS (fake-gcs-server) servers; the Delta Spark
#: oracle session and its cached feature corpus; the reliability totals; how the suite runs on parallel
#: workers (groups, order, one summary: tests/parallel.py).
pytest_plugins = ["s3_server", "azure_server", "gcs_server", "delta_spark", "reliability_totals", "parallel"]


@pytest.fixture
def table_path(tmp_path):
    return str(tmp_path / "table")
