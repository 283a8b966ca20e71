import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: Shared fixtures: a local S3-compatible server (moto) for S3 tests.
pytest_plugins = ["s3_server"]


@pytest.fixture
def table_path(tmp_path):
    return str(tmp_path / "table")
