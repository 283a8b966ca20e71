"""Delta Spark reads the ``_last_checkpoint`` deltalog wrote on a local table without a checksum error.

Delta Spark writes local tables through Hadoop's ``ChecksumFileSystem``, which keeps a ``.<name>.crc``
beside each file and verifies it on read. Before deltalog kept that sidecar true, every Delta Spark
load of a table whose ``_last_checkpoint`` deltalog had replaced failed the check, slept three times
a second and listed the log instead (its ``LastCheckpointInfo`` then says ``size -1``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from delta_spark import Corpus
from deltalog import DeltaTable

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _hadoop_read(spark: Any, path: Path) -> bytes:
    """``path`` read through Hadoop's local file system, as Delta Spark reads it (checksum verified)."""
    jvm = spark._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path.as_uri())
    fs = hpath.getFileSystem(spark._jsc.hadoopConfiguration())
    stream = fs.open(hpath)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def test_delta_spark_reads_our_last_checkpoint_through_its_checksum(
    delta_spark: Any, delta_corpus: Corpus, tmp_path: Path
) -> None:
    table = Path(delta_corpus.copy("plain", tmp_path))
    last = table / "_delta_log" / "_last_checkpoint"
    assert (last.parent / "._last_checkpoint.crc").exists(), "Delta Spark wrote no sidecar: nothing is checked"
    DeltaTable(str(table)).create_checkpoint()
    ours = last.read_bytes()
    assert _hadoop_read(delta_spark, last) == ours

    jvm = delta_spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(delta_spark._jsparkSession, str(table))
    info = delta_log.readLastCheckpointFile()
    assert info.isDefined()
    version = DeltaTable(str(table)).version()
    assert info.get().version() == version
    assert info.get().size() > 0, "Delta Spark fell back to listing: it could not read our _last_checkpoint"

    # The check is real: bytes that do not match the sidecar fail Hadoop's read.
    last.write_bytes(ours.replace(b'"version":', b'"version" :', 1))
    with pytest.raises(Py4JJavaError, match="ChecksumException"):
        _hadoop_read(delta_spark, last)
