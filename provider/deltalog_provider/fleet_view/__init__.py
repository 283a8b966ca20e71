"""The fleet view: an Airflow plugin with the maintenance history as pages and charts.

``plugin.py`` registers it (entry point ``airflow.plugins``), ``app.py`` serves it behind
Airflow's authentication, ``pages.py`` and ``charts.py`` render HTML and SVG from history
rows (no Airflow import), ``source.py`` finds and caches the history. See docs/fleet-view.md.
"""
