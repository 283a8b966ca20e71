"""Spark job: execute a deltalog compaction plan and write the commit request for its result.

Submitted by ``SparkSubmitOperator`` in ``deltalog_maintenance`` with ``--plan`` (written by
the ``plan_compaction`` task), ``--table`` and ``--output-request`` (committed by the
``commit_compaction`` task). The work is done by deltalog's Spark compaction job
(``deltalog/engines/spark_compaction.py``, plain Parquet, no Delta jars); this file
only gives the DAG a script inside the dags folder to submit.
"""

from __future__ import annotations

import sys

from deltalog.engines.spark_compaction import main

if __name__ == "__main__":
    sys.exit(main())
