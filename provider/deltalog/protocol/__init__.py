"""What the Delta protocol says, with no log read: features, the protocol action, properties, formats.

| module | job |
|---|---|
| ``features`` | the feature x operation table: supported / conditional / refused, and why |
| ``table_protocol`` | ``Protocol`` (the action), ``check_readable`` / ``check_writable`` before anything is touched |
| ``properties`` | every table property deltalog reads: its parser, its default, its check at ``create`` |
| ``isolation`` | the isolation level names |
| ``schema`` | Delta schema JSON <-> pyarrow |
| ``partition_values`` | one canonical spelling per partition value |
| ``file_stats`` | Delta per-file statistics from a Parquet footer |
| ``deletion_vectors`` | the deletion-vector codec (descriptors, RoaringBitmap files) |
| ``parquet_layout`` | what a data file must look like: physical schema, codec, log paths |
| ``sizes`` | byte-size strings and the table's target file size |
"""

from deltalog.protocol.features import FEATURES, Feature, Operation
from deltalog.protocol.schema import arrow_schema_to_schema_string, parse_schema_string
from deltalog.protocol.table_protocol import Protocol

__all__ = ["FEATURES", "Feature", "Operation", "Protocol", "arrow_schema_to_schema_string", "parse_schema_string"]
