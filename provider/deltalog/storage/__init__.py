"""Where a table's bytes live: one filesystem plus the table root, and the commit primitive.

| module | job |
|---|---|
| ``filesystem`` | ``Storage(uri, storage_options)``: fsspec filesystem + root, listing, reads, ``put_if_absent`` |
| ``table_ref`` | what every operation accepts as its table, and ``table_storage``: the one way to its ``Storage`` |
| ``s3_reads`` | S3 GETs and listings through obstore when the storage options translate exactly |
| ``dynamodb_commits`` | S3 commits coordinated through a DynamoDB table (Delta Spark's S3DynamoDBLogStore) |
| ``azure_gcs`` | Azure and GCS: opening adlfs / gcsfs, option checks, the conditional create settled by reading back |
| ``azure_gcs_reads`` | Azure and GCS GETs, listings and Azure's conditional create through obstore when the options translate |

Nothing here knows the Delta log: the layers above read and write it through ``Storage``.
"""

from deltalog.storage.filesystem import FileInfo, Storage, canonical_uri, is_remote

__all__ = ["FileInfo", "Storage", "canonical_uri", "is_remote"]
