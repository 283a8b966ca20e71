"""``delta.parquet.compression.codec``: the table property's values as pyarrow codec names.

Checkpoints and compacted data files both honour the property, so they read it
through one table; each writer decides itself how to report a value it does not know.
"""

from __future__ import annotations

CODEC_PROPERTY = "delta.parquet.compression.codec"
#: Delta's default when the property is unset (and what an unknown value falls back to).
DEFAULT_CODEC = "zstd"
#: Lower-case property value -> pyarrow ``compression`` argument.
PARQUET_CODECS = {
    "uncompressed": "none",
    "none": "none",
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4": "lz4",
    "lz4_raw": "lz4",
    "brotli": "brotli",
}
