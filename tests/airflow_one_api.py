"""``airflow`` whose ``dags test`` builds its in-process execution API once per run, as Airflow 3.3 does.

Run as ``<release venv>/bin/python -P tests/airflow_one_api.py dags test <dag id>`` (``-P``: this folder
is not put on ``sys.path``, so nothing here shadows a module of the release's venv).

``airflow dags test`` hands every task (and a deferred task's trigger) a client of an in-process
execution API. Up to Airflow 3.2 ``supervisor.in_process_api_server`` builds a new FastAPI app for each
(Cadwyn's versioned routers: about 4 CPU s a task on this machine); Airflow 3.3 builds it once per process
(apache/airflow#65235: the function is an ``lru_cache``, and a client without a DAG, a trigger's, no
longer keeps the DAG bag the previous task set). This module applies that change, where the release does
not have it yet, and then runs Airflow's own CLI (``airflow.__main__.main``, what the ``airflow`` script
runs): the same parser, the same ``dags test``, each task with its own client and DAG bag as before. The
release matrix's ``airflow dags test`` runs go through it; the lock (3.3) already behaves so.
"""

from __future__ import annotations

import functools
import sys
from typing import Any


def build_the_execution_api_once() -> bool:
    """Airflow 3.3's one in-process execution API per process on an earlier release; False if it has it."""
    from airflow.sdk.execution_time import supervisor

    if hasattr(supervisor.in_process_api_server, "cache_info"):  # 3.3+: Airflow's own cache
        return False
    api = functools.lru_cache(maxsize=1)(supervisor.in_process_api_server)
    supervisor.in_process_api_server = api
    tasks_client = supervisor.InProcessTestSupervisor._api_client

    def api_client(dag: Any = None) -> Any:
        if dag is None:  # a trigger's client: not the DAG bag the last task set (as 3.3 does)
            from airflow.api_fastapi.common.dagbag import dag_bag_from_app

            api().app.dependency_overrides.pop(dag_bag_from_app, None)
        return tasks_client(dag)

    supervisor.InProcessTestSupervisor._api_client = staticmethod(api_client)
    return True


if __name__ == "__main__":
    build_the_execution_api_once()
    from airflow.__main__ import main

    sys.exit(main())
