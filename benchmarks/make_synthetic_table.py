#!/usr/bin/env python3
"""Write a synthetic Delta table log (and optionally empty data files) for benchmarks.

The table is valid per the Delta protocol (reader 1 / writer 2): version 0 holds
protocol + metaData, every later commit appends --adds-per-commit files and, every
--remove-every commits, removes the oldest live files. No engine is needed to make it,
so snapshot, checkpoint and vacuum costs can be measured at scale.

  make_synthetic_table.py OUT --commits 10000 --adds-per-commit 10 [--partitions 16]
      [--remove-every 5] [--data-files] [--checkpoint-every 0]

--checkpoint-every N>0 asks deltalake (delta-rs), when installed, to write a checkpoint
every N versions, so a table can be measured with and without checkpoints.
"""

import argparse
import json
import os
import uuid

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--adds-per-commit", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--remove-every", type=int, default=5)
    ap.add_argument("--data-files", action="store_true", help="create empty data files")
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--start-ms", type=int, default=1_700_000_000_000)
    a = ap.parse_args()

    log = os.path.join(a.out, "_delta_log")
    os.makedirs(log, exist_ok=True)
    live: list[dict] = []
    ts = a.start_ms
    for v in range(a.commits):
        ts += 1000
        actions = [
            {
                "commitInfo": {
                    "timestamp": ts,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Append"},
                    "isBlindAppend": v % a.remove_every != 0 if a.remove_every else True,
                }
            }
        ]
        if v == 0:
            actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
            actions.append(
                {
                    "metaData": {
                        "id": str(uuid.UUID(int=42)),
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": json.dumps(SCHEMA),
                        "partitionColumns": ["part"] if a.partitions else [],
                        "configuration": {},
                        "createdTime": ts,
                    }
                }
            )
        for i in range(a.adds_per_commit):
            part = f"p{(v * a.adds_per_commit + i) % a.partitions}" if a.partitions else None
            name = f"part-{v:07d}-{i:04d}-{uuid.UUID(int=v * 100000 + i)}.c000.snappy.parquet"
            path = f"part={part}/{name}" if part else name
            add = {
                "path": path,
                "partitionValues": {"part": part} if part else {},
                "size": 1024 + i,
                "modificationTime": ts,
                "dataChange": True,
                "stats": json.dumps(
                    {"numRecords": 100, "minValues": {"id": v}, "maxValues": {"id": v + 99}, "nullCount": {"id": 0}}
                ),
            }
            actions.append({"add": add})
            live.append(add)
            if a.data_files:
                full = os.path.join(a.out, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                open(full, "wb").close()
        if a.remove_every and v and v % a.remove_every == 0 and len(live) > a.adds_per_commit:
            for old in live[: a.adds_per_commit // 2]:
                actions.append(
                    {
                        "remove": {
                            "path": old["path"],
                            "deletionTimestamp": ts,
                            "dataChange": True,
                            "partitionValues": old["partitionValues"],
                            "size": old["size"],
                            "extendedFileMetadata": True,
                        }
                    }
                )
            del live[: a.adds_per_commit // 2]
        with open(os.path.join(log, f"{v:020d}.json"), "w") as f:
            f.write("\n".join(json.dumps(x, separators=(",", ":")) for x in actions) + "\n")
        os.utime(os.path.join(log, f"{v:020d}.json"), (ts / 1000, ts / 1000))
        if a.checkpoint_every and v and v % a.checkpoint_every == 0:
            from deltalake import DeltaTable

            DeltaTable(a.out, version=v).create_checkpoint()
    print(json.dumps({"table": a.out, "versions": a.commits, "live_files": len(live)}))


if __name__ == "__main__":
    main()
