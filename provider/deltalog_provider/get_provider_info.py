"""Provider metadata read by Airflow's ProvidersManager through the entry point.

Kept import-light on purpose: Airflow calls this at start-up in every component
(scheduler, api-server, triggerer, workers), so it must not import Airflow,
the hooks or the core library beyond the version string.
"""

from __future__ import annotations

from typing import Any

from deltalog import __version__

PACKAGE_NAME = "airflow-provider-deltalog"
INTEGRATION = "Delta Lake (deltalog)"
#: This project's home (the same URLs as pyproject.toml's [project.urls]; a test holds them equal).
SOURCE_URL = "https://github.com/deltalog/airflow-provider-deltalog"
#: The provider's guide; shown by the UI's and REST API's provider list, which fails without a
#: ``documentation-url`` (Airflow 3.3 reads the distribution's Project-URL "Documentation" instead).
DOCUMENTATION_URL = f"{SOURCE_URL}/blob/main/docs/provider.md"
#: The protocol the integration implements: the integration's external documentation.
PROTOCOL_URL = "https://github.com/delta-io/delta/blob/master/PROTOCOL.md"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, connection type with its UI fields, and module lists."""
    return {
        # Must equal the canonicalised distribution name or discovery rejects the provider.
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": "Safe, scheduled maintenance of Delta Lake tables (commit, compaction, vacuum, "
        "checkpoints, log cleanup, manifests, conversion) on a pure-Python Delta log implementation.",
        "versions": [__version__],
        "documentation-url": DOCUMENTATION_URL,
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": PROTOCOL_URL,
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["deltalog_provider.hooks.delta_table"]}],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "deltalog_provider.operators.commit",
                    "deltalog_provider.operators.compact",
                    "deltalog_provider.operators.vacuum",
                    "deltalog_provider.operators.checkpoint",
                    "deltalog_provider.operators.log_cleanup",
                    "deltalog_provider.operators.manifest",
                    "deltalog_provider.operators.convert",
                    "deltalog_provider.operators.create",
                    "deltalog_provider.operators.health",
                    "deltalog_provider.operators.objectives",
                ],
            }
        ],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["deltalog_provider.sensors.delta_table"]}],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["deltalog_provider.triggers.delta_table", "deltalog_provider.triggers.delta_log"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "deltalog",
                "hook-class-name": "deltalog_provider.hooks.delta_table.DeltaTableHook",
                "hook-name": "Delta Lake (deltalog)",
                "ui-field-behaviour": {
                    "hidden-fields": ["port"],
                    "relabeling": {
                        "host": "Table root (URI or path)",
                        "schema": "Sub-path under the root",
                        "login": "Access key id",
                        "password": "Secret access key",
                    },
                    "placeholders": {
                        "host": "s3://bucket/warehouse  or  /data/delta",
                        "schema": "optional, e.g. bronze",
                        "extra": '{"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1"}',
                    },
                },
                "conn-fields": {
                    "root": {
                        "label": "Table root (overrides host)",
                        "description": "URI or path that table names are resolved against.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "endpoint_url": {
                        "label": "Endpoint URL",
                        "description": "S3-compatible endpoint (MinIO, moto); passed to the filesystem.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "region_name": {"label": "Region", "schema": {"type": ["string", "null"]}},
                    "aws_conn_id": {
                        "label": "AWS connection id",
                        "description": "Take S3 credentials (keys, role, profile, web identity) from this "
                        "Amazon provider connection; needs apache-airflow-providers-amazon.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "azure_conn_id": {
                        "label": "Azure connection id",
                        "description": "Take the Azure identity (connection string, account key, SAS, service "
                        "principal, managed identity) from this wasb or adls connection.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "gcp_conn_id": {
                        "label": "Google Cloud connection id",
                        "description": "Take the Google identity (service-account key, workload identity "
                        "federation, application default credentials) from this google_cloud_platform connection.",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            }
        ],
    }
