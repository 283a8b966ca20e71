"""``get_provider_info()`` against the JSON schema that the installed Airflow ships.

Airflow's ProvidersManager validates every provider's info with ``provider_info.schema.json``
(inside the ``airflow`` package) and drops a provider that fails. The schema differs by
release, so this runs in every venv of the release matrix (tests/test_airflow_releases.py).
"""

from __future__ import annotations

import copy
import importlib.resources
import json

import jsonschema
import pytest

from deltalog_provider.get_provider_info import get_provider_info

pytestmark = pytest.mark.airflow

#: Keys Airflow reads that its runtime schema does not list (the schema allows extra keys):
#: ``documentation-url`` feeds the UI's and REST API's provider list, ``versions`` the provider's version.
READ_OUTSIDE_THE_SCHEMA = {"documentation-url", "versions"}
#: Connection-type keys that later releases read (``hook-name`` is in the schema from 3.2; the
#: ProvidersManager of 3.2+ reads ``conn-fields`` and ``ui-field-behaviour``, which the official
#: providers carry too); older releases ask DeltaTableHook.get_ui_field_behaviour instead.
CONNECTION_KEYS_OUTSIDE_THE_SCHEMA = {"conn-fields", "ui-field-behaviour", "hook-name"}


def _schema() -> dict:
    return json.loads((importlib.resources.files("airflow") / "provider_info.schema.json").read_text())


def test_provider_info_is_valid_against_the_schema_airflow_ships():
    schema = _schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    info = get_provider_info()
    errors = [f"{list(e.path)}: {e.message}" for e in validator_class(schema).iter_errors(info)]
    assert not errors, errors
    # Every key is one the schema defines (no typo the schema's open objects would let through).
    assert set(info) - set(schema["properties"]) == READ_OUTSIDE_THE_SCHEMA
    connection = schema["properties"]["connection-types"]["items"]
    assert set(info["connection-types"][0]) - set(connection["properties"]) <= CONNECTION_KEYS_OUTSIDE_THE_SCHEMA
    assert {"connection-type", "hook-class-name"} <= set(info["connection-types"][0])


def test_the_schema_check_would_catch_a_broken_provider_info():
    """The validation above can fail: a connection type without its hook class, a hook list that is not a list."""
    schema = _schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    broken = copy.deepcopy(get_provider_info())
    del broken["connection-types"][0]["hook-class-name"]
    assert list(validator.iter_errors(broken))
    broken = copy.deepcopy(get_provider_info())
    broken["hooks"] = "deltalog_provider.hooks.delta_table"
    assert list(validator.iter_errors(broken))
