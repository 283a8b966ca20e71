"""Airflow-free helpers shared by operators, sensors and triggers."""
