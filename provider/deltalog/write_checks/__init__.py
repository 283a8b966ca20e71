"""What a file added to a table must satisfy, checked before anything is committed.

| module | job |
|---|---|
| ``schema_enforcement`` | Delta schema-on-write for one data file: types, nullability, extra/partition columns, column mapping, type widening |
| ``claimed_stats`` | statistics a writer claims must be true of the file's footer |
| ``row_rules`` | CHECK constraints, invariants, generated columns and defaults on the rows, evaluated by DuckDB |
| ``identity`` | identity columns: values against start / step / high-water mark, the mark advanced |
| ``clustering`` | liquid clustering: the clustering columns, their stats required of every added file |
| ``hidden_paths`` | which paths readers and vacuum skip, and where a data file may live |
| ``iceberg_compat`` | a file added to an Iceberg-compatible table must have the layout compaction writes |
| ``handoffs`` | a plan or request file belongs to one table: its table id and the version it was made at |

Commit requests, convert and compaction call these; they read the protocol and the log,
never commit.
"""

__all__: list[str] = []
