import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# The example DAGs record into a maintenance history beside the demo tables by default
# (dags/deltalog_example); a test run writes none unless a test names one in its own folder.
os.environ.setdefault("AIRFLOW_VAR_DELTALOG_HISTORY_URI", "")

#: Shared fixtures: a local S3-compatible server (moto) for S3 tests; the Delta Spark
#: oracle session and its cached feature corpus.
pytest_plugins = ["s3_server", "delta_spark"]


@pytest.fixture
def table_path(tmp_path):
    return str(tmp_path / "table")
