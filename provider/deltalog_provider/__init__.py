"""deltalog_provider: the Apache Airflow provider for deltalog.

Thin by design: every operator parses its arguments, gets a table from
``DeltaTableHook``, calls ONE core operation of ``deltalog`` and reports the
result (XCom, asset event, OpenLineage). Nothing here implements protocol logic.
Importing this package must stay cheap (Airflow imports it during discovery).
"""

from deltalog import __version__

__all__ = ["__version__"]
