"""deltalog's side of ``bench_writer_conflicts``: maintenance of each table in a loop, in a process of its own.

``python benchmarks/writer_conflicts_maintainer.py '<json>'`` with ``tables`` (paths), ``target_size``
(bytes), ``pause`` (seconds between two rounds of a table), ``stop_file``, ``out`` (where the
rounds go, as JSON) and ``writer_aware`` (the compaction option). One thread per table, as one
maintenance task per table would run: compaction with the default post-commit hooks (a checkpoint
when one is due), then the pause; the same loop Delta Spark's OPTIMIZE runs on the other tables.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import threading
import time
import traceback
from typing import Any

from deltalog.compaction import compact


def _round(uri: str, target: int, writer_aware: bool) -> dict[str, Any]:
    t0 = time.time()
    try:
        r = compact(uri, target_size=target, writer_aware=writer_aware)
    except Exception as exc:  # noqa: BLE001 - reported, the loop goes on
        return {
            "table": uri,
            "start": t0,
            "seconds": time.time() - t0,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    d = r.to_dict()
    return {
        "table": uri,
        "start": t0,
        "seconds": round(time.time() - t0, 3),
        "versions": d["versions"],
        "bins_committed": d["num_bins_committed"],
        "bins_lost": d["num_bins_lost_to_writers"],
        "files_deferred": d["num_files_deferred_for_writers"],
        "bins_deferred": d["num_bins_deferred_for_writers"],
        "waited_s": d["seconds_waiting_for_writers"],
        "error": r.error,
    }


def main(spec: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING)
    stop = spec["stop_file"]
    rounds: list[dict[str, Any]] = []
    lock = threading.Lock()

    def loop(uri: str) -> None:
        while not os.path.exists(stop):
            r = _round(uri, int(spec["target_size"]), bool(spec["writer_aware"]))
            with lock:
                rounds.append(r)
            end = time.time() + float(spec["pause"])
            while time.time() < end and not os.path.exists(stop):
                time.sleep(0.1)

    threads = [threading.Thread(target=loop, args=(u,), daemon=True) for u in spec["tables"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open(spec["out"], "w") as fh:
        json.dump({"rounds": rounds, "peak_mb": round(peak_mb, 1)}, fh)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
