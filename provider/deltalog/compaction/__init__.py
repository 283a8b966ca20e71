"""Compaction (OPTIMIZE): plan bins of small files, rewrite them with an engine, commit with dataChange=false.

| module | job |
|---|---|
| ``options`` | ``CompactionOptions`` (every option, its default and its check) and ``LocalOptions`` |
| ``plan`` | ``plan_compaction`` / ``plan_from_snapshot``: bins per partition, nothing written; the plan is JSON |
| ``predicate`` | the ``where`` partition filter |
| ``purge`` / ``zorder`` / ``liquid`` | deletion-vector purges, Z-order curves, liquid clustering: what each plans |
| ``local`` / ``bin_writer`` / ``zorder_writer`` | the local engine: bins in a thread pool, one bin rewritten with pyarrow, the curve rewrite |
| ``spark/`` | the Spark engine: the job, its ``spark-submit`` script, the local runner, committing its output |
| ``engine_output`` | what an engine reports per bin: ``BinOutput`` (rewritten) or ``BinSkipped`` |
| ``file_names`` | new files' names (each records its bin) and folders |
| ``commit`` | one OPTIMIZE commit of rewritten bins, with per-bin conflict handling |
| ``batches`` | ``commit_outputs``: committing bins a batch at a time (every engine's last step) |
| ``result`` | ``CompactionResult``, and the draft it is built from |
| ``run`` | ``compact()``: the three steps in one call |
"""

from deltalog.compaction.batches import commit_outputs
from deltalog.compaction.commit import CompactionCommit
from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.options import CompactionOptions, LocalOptions
from deltalog.compaction.plan import Bin, CompactionPlan, plan_compaction
from deltalog.compaction.purge import DeletionVectorHealth, deletion_vector_health
from deltalog.compaction.result import CompactionResult
from deltalog.compaction.run import compact

__all__ = [
    "Bin",
    "BinOutput",
    "BinSkipped",
    "CompactionCommit",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionResult",
    "DeletionVectorHealth",
    "LocalOptions",
    "commit_outputs",
    "compact",
    "deletion_vector_health",
    "plan_compaction",
]
