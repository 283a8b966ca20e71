"""OpenLineage for the operators: the table as the output dataset, with statistics.

The OpenLineage provider is optional: everything it defines is imported inside
``build_operator_lineage``, which returns None when it is not installed, so the
provider imports and runs without it (the OpenLineage developer guide's rule).
Dataset naming follows https://openlineage.io/docs/spec/naming : a local table is
namespace ``file`` + absolute path; an object-store table is ``scheme://bucket`` +
key prefix. The facet classes come from the OpenLineage client itself (a dependency of
the provider): ``airflow.providers.common.compat.openlineage.facet`` does not re-export
``DatasetVersionDatasetFacet``. Checked against the real provider and client by
``tests/provider/test_openlineage.py``.
"""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

_LIFECYCLES = ("ALTER", "CREATE", "DROP", "OVERWRITE", "RENAME", "TRUNCATE")
#: fsspec/Hadoop spellings of a scheme -> the one the naming spec uses in namespaces.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


def openlineage_dataset_name(uri: str) -> tuple[str, str]:
    """``(namespace, name)`` of a table location under the OpenLineage naming spec."""
    parsed = urlparse(uri)
    scheme = parsed.scheme if len(parsed.scheme) > 1 else ""
    if scheme in ("", "file", "local"):
        path = parsed.path if scheme else uri
        return "file", os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    return f"{scheme}://{parsed.netloc}", parsed.path.strip("/")


def build_operator_lineage(
    uri: str,
    *,
    version: int | None = None,
    lifecycle: str | None = "ALTER",
    row_count: int | None = None,
    size: int | None = None,
    file_count: int | None = None,
    as_input: bool = False,
) -> Any | None:
    """An ``OperatorLineage`` with the table as output (as input when ``as_input``: checks that
    only read), or None without the OpenLineage provider."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.generated.base import InputDataset, OutputDataset
        from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
        from openlineage.client.generated.lifecycle_state_change_dataset import (
            LifecycleStateChange,
            LifecycleStateChangeDatasetFacet,
        )
        from openlineage.client.generated.output_statistics_output_dataset import (
            OutputStatisticsOutputDatasetFacet,
        )
    except ImportError:
        log.debug("OpenLineage provider not installed: no lineage for %s", uri)
        return None
    namespace, name = openlineage_dataset_name(uri)
    facets: dict[str, Any] = {}
    if version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(version))
    if lifecycle in _LIFECYCLES:
        facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
            lifecycleStateChange=getattr(LifecycleStateChange, lifecycle)
        )
    if as_input:
        return OperatorLineage(inputs=[InputDataset(namespace=namespace, name=name, facets=facets)])
    output_facets: dict[str, Any] = {}
    if any(v is not None for v in (row_count, size, file_count)):
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
            rowCount=row_count, size=size, fileCount=file_count
        )
    dataset = OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets)
    return OperatorLineage(outputs=[dataset])
