"""Issue 13 item 4 for the operators: yes/no parameters are parsed strictly, never by truthiness.

``DeltaVacuumOperator(allow_short_retention="False")`` used to pass the string on,
and the core read it as consent. Now a literal string is checked when the task is
defined, a templated one after rendering, and only ``True``/``False`` or
``"true"``/``"false"`` (any case) pass; anything else fails the task without retry,
before the table is touched.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.errors import InvalidArgumentError
from deltalog_provider.operators import (
    DeltaCommitOperator,
    DeltaCompactOperator,
    DeltaLogCleanupOperator,
    DeltaManifestOperator,
    DeltaVacuumOperator,
)
from deltalog_provider.sensors import DeltaTableVersionSensor
from deltalog_provider.utils.coerce import strict_bool
from deltalog_provider.version_compat import AirflowFailException
from helpers import append, make_table, rows, table_with_a_removed_file

pytestmark = pytest.mark.airflow


@given(st.one_of(st.text(max_size=10), st.integers(), st.none(), st.floats(allow_nan=False)))
@settings(max_examples=200, deadline=None)
def test_strict_bool_accepts_only_bools_and_true_false_words(value):
    word = value.strip().lower() if isinstance(value, str) else None
    if word in ("true", "false"):
        assert strict_bool(value, "x") is (word == "true")
    else:
        with pytest.raises(InvalidArgumentError, match="x must be True or False"):
            strict_bool(value, "x")


def test_strict_bool_examples():
    assert strict_bool(True, "x") is True and strict_bool("FALSE", "x") is False and strict_bool(" true ", "x")
    for value in ("no", "0", "1", "yes", "False!", "{{ params.x }}", 0, 1, None):
        with pytest.raises(InvalidArgumentError):
            strict_bool(value, "x")


@pytest.mark.parametrize(
    "factory",
    [
        lambda v: DeltaVacuumOperator(task_id="t", table="/t", allow_short_retention=v),
        lambda v: DeltaVacuumOperator(task_id="t", table="/t", dry_run=v),
        lambda v: DeltaVacuumOperator(task_id="t", table="/t", full_fallback=v),
        lambda v: DeltaLogCleanupOperator(task_id="t", table="/t", dry_run=v),
        lambda v: DeltaManifestOperator(task_id="t", table="/t", full=v),
        lambda v: DeltaManifestOperator(task_id="t", table="/t", dry_run=v),
        lambda v: DeltaCompactOperator(task_id="t", table="/t", plan_only=v),
        lambda v: DeltaCommitOperator(task_id="t", table="/t", request={}, fail_if_superseded=v),
        lambda v: DeltaVacuumOperator(task_id="t", table="/t", emit_asset=v),
        lambda v: DeltaTableVersionSensor(task_id="t", table="/t", wait_for_creation=v),
    ],
)
def test_literal_non_bool_strings_fail_when_the_task_is_defined(factory):
    for word in ("False", "no", "0"):
        if word.lower() == "false":
            assert factory(word) is not None  # "False" is a clear word: parsed as False
            continue
        with pytest.raises(InvalidArgumentError, match="must be True or False"):
            factory(word)


def test_the_compact_operators_writer_options_are_the_cores():
    """Issue 43: ``writer_aware`` is a real bool checked when the task is defined, passed on as the option."""
    with pytest.raises(InvalidArgumentError, match="writer_aware"):
        DeltaCompactOperator(task_id="t", table="/t", writer_aware="no")
    with pytest.raises(InvalidArgumentError, match="writer_wait_seconds"):
        DeltaCompactOperator(task_id="t", table="/t", writer_wait_seconds=-1)
    options = DeltaCompactOperator(task_id="t", table="/t", writer_aware=False, writer_wait_seconds=5).options()
    assert options.writer_aware is False and options.writer_wait_seconds == 5
    assert DeltaCompactOperator(task_id="t", table="/t").options().writer_aware is True


@pytest.fixture()
def removed_table(tmp_path):
    path = str(tmp_path / "t")
    _, old = table_with_a_removed_file(path)
    return path, os.path.join(path, old)


@pytest.mark.parametrize("rendered", ["no", "0", "False ", "off", ""])
def test_templated_override_rendered_to_a_non_bool_fails_and_deletes_nothing(removed_table, rendered):
    path, old = removed_table
    op = DeltaVacuumOperator(
        task_id="v", table=path, retention_hours=0, allow_short_retention="{{ params.allow }}", emit_asset=False
    )
    op.allow_short_retention = rendered  # what template rendering leaves
    if rendered.strip().lower() == "false":
        with pytest.raises(AirflowFailException, match="refusing to vacuum with a retention of 0 hours"):
            op.execute({})
    else:
        with pytest.raises(AirflowFailException, match="allow_short_retention must be True or False"):
            op.execute({})
    assert os.path.exists(old)


def test_templated_override_rendered_true_is_consent(removed_table):
    path, old = removed_table
    op = DeltaVacuumOperator(
        task_id="v", table=path, retention_hours=0, allow_short_retention="{{ params.allow }}", emit_asset=False
    )
    op.allow_short_retention = "True"
    metrics = op.execute({})
    assert metrics["num_deleted_files"] == 1 and not os.path.exists(old)


def test_templated_dry_run_still_declares_the_table_as_outlet():
    op = DeltaVacuumOperator(task_id="v", table="/data/t", dry_run="{{ params.dry }}")
    assert op.outlets, "a templated dry_run may render to false and delete: the asset must be declared"


def test_manifest_operator_dry_run_writes_nothing(tmp_path):
    path = str(tmp_path / "t")
    append(make_table(path), rows(2))
    op = DeltaManifestOperator(task_id="m", table=path, full="{{ params.full }}", dry_run="true", emit_asset=False)
    op.full = "TRUE"  # rendered
    metrics = op.execute({})
    assert metrics["dry_run"] is True and len(metrics["manifests_written"]) == 1
    assert not os.path.exists(os.path.join(path, "_symlink_format_manifest"))


ANY_RENDERED = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["nan", "inf", "-inf", "1e400", "99999999999999999999999999", "[" * 5000, "{{ x }}", "None", "١٢", "²"]
    ),
    st.integers(),
    st.floats(),
    st.none(),
    st.booleans(),
)


@given(value=ANY_RENDERED)
@settings(max_examples=300, deadline=None)
def test_template_coercions_end_in_a_value_or_invalid_argument(value):
    """Issue 13 item 10 for rendered templates: any value becomes a typed value or InvalidArgumentError."""
    from deltalog_provider.utils.coerce import optional_float, optional_int, optional_list, optional_size

    for fn in (optional_int, optional_float, optional_list, optional_size, strict_bool):
        try:
            fn(value, "p")
        except InvalidArgumentError:
            pass
