import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# The example DAGs record into a maintenance history beside the demo tables by default
# (dags/deltalog_example); a test run writes none unless a test names one in its own folder.
os.environ.setdefault("AIRFLOW_VAR_DELTALOG_HISTORY_URI", "")

#: Shared fixtures: local S3 (moto), Azure (Azurite) and GCS (fake-gcs-server) servers; the Delta Spark
#: oracle session and its cached feature corpus; the reliability totals; how the suite runs on parallel
#: workers (groups, order, one summary: tests/parallel.py).
pytest_plugins = ["s3_server", "azure_server", "gcs_server", "delta_spark", "reliability_totals", "parallel"]


@pytest.fixture
def table_path(tmp_path):
    return str(tmp_path / "table")
