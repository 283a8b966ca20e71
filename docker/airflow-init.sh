#!/usr/bin/env bash
# One-shot set-up of the Airflow metadata database (Postgres) before the other
# Airflow components start; they wait for this container to exit successfully.
set -euo pipefail
airflow db migrate
# Fails the stack early if the provider or the Spark provider is not discoverable.
airflow providers get airflow-provider-deltalog >/dev/null
airflow providers get apache-airflow-providers-apache-spark >/dev/null
airflow version
# One slot: the example DAGs' rewrites of a table (compaction, vacuum) never overlap.
airflow pools set deltalog_maintenance 1 "serialises compaction and vacuum of the example table"
