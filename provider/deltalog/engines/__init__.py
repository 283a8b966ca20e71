"""Execution engines for the heavy data work (the local pyarrow engine and the Spark jobs)."""
