"""deltalog: the Delta Lake transaction-log protocol in Python (pyarrow + fsspec).

No Airflow import anywhere in this package: the Airflow provider lives in
``deltalog_provider`` and only calls into here.
"""

from deltalog._version import __version__
from deltalog.errors import DeltaLogError
from deltalog.snapshot import Snapshot
from deltalog.table import DeltaTable

__all__ = ["DeltaLogError", "DeltaTable", "Snapshot", "__version__"]
