"""The adversarial sweep: generated inputs of every class an outside review broke us with.

Each class is a hypothesis test that asserts the promises for every input it
generates: no live file deleted, the table still readable by deltalog and deltalake,
no traceback, an exit code from docs/cli.md. ``reliability_recorder`` counts every
example as an adversarial input tried and every failing one as an unsafe outcome
(together with the other classes' property tests: corrupt logs, path spellings,
links, units). Classes here:

* ``cli_args``: every option of every ``deltalog`` command, found by introspecting
  the parser (a new option is fuzzed without touching this file), with huge and
  negative numbers, empty and blank strings, non-UTF-8 bytes (as the shell hands them
  over), ``KEY=VALUE`` oddities and random text;
* ``cli_args_s3``: the same generator against a copy of the table on the S3 test server;
* ``string_booleans``: every yes/no switch of the core given strings and numbers;
* ``schema_mismatches``: commit requests whose file does not match the table's schema
  (types, nullability, extra columns) or whose stats lie;
* ``partition_values``: commit requests with partition values of every spelling for
  every partition type.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import json as _json
import os
import urllib.parse as _urlparse
from collections.abc import Callable
from typing import TypeVar

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from adversarial_support import cli_problems, fresh_copy, live_files, log_state, run_cli, table_problems
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.cli import build_parser
from deltalog.commit.transaction import Transaction
from deltalog.errors import DeltaLogError, InvalidArgumentError
from helpers import append, make_table, rows

T = TypeVar("T")


def _examples(n: int) -> Callable[[T], T]:
    """The settings every generated test here runs with: ``n`` examples, no deadline, no example database."""
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


SMALL = os.environ.get("DELTALOG_RELIABILITY_SCALE") == "small"
#: Generated inputs per class (modest: each CLI input copies a table and reads it with both readers).
CLI_EXAMPLES = 30 if SMALL else 80
BOOL_EXAMPLES = 20 if SMALL else 50
COMMIT_EXAMPLES = 20 if SMALL else 40

pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A partitioned table: 4 commits, a removed file (vacuum with zero retention may delete it), small files."""
    path = str(tmp_path_factory.mktemp("adversarial") / "t")
    table = make_table(path, partition_by=["part"])
    for i in range(3):
        append(table, rows(3, start=i * 3, part=f"p{i % 2}"), partition={"part": f"p{i % 2}"})
    snap = table.snapshot()
    txn = Transaction(table.storage, snap, operation="DELETE")
    txn.remove([{"path": snap.file_paths()[0], "dataChange": True}])
    txn.commit()
    return path


# --- class: CLI arguments ---------------------------------------------------------------------

#: Options left out: they start Spark (minutes, and a separate engine's own input handling).
SKIPPED_OPTIONS = {"--engine", "--spark-master", "--spark-conf"}

NUMBERS = st.sampled_from(
    [
        "99999999999999999999999999",
        "-99999999999999999999999",
        "9223372036854775808",
        "9223372036854775807",
        "-1",
        "0",
        "-0",
        "1",
        "1e308",
        "nan",
        "inf",
        "-inf",
        "0x10",
        "1_000",
        "0.5",
    ]
)
SPECIAL = st.sampled_from(
    [
        "",
        " ",
        "\t",
        "=",
        "==",
        "a=b=c",
        "=x",
        "bad\udcff",
        "\udcff=\udcfe",
        "x" * 300,
        ".",
        "-",
        "--",
        "null",
        "None",
        "true",
        "False",
        "'",
        '"',
        "\\",
        "part = 'p0'",
        "part IN ()",
        "part = 'p0' AND",
        "nope = 1",
        "128m",
        "8e",
        "1 EiB",
        "2024-01-01T00:00:00Z",
        "2024-13-45",
        "interval 1 month",
        "delta.logRetentionDuration=garbage",
        "delta.checkpointInterval=-4",
        "delta.appendOnly=yes",
        "delta.targetFileSize=0",
        "fsync=maybe",
        "endpoint_url=http://127.0.0.1:9",
        "part string",
        "part decimal(5,2)",
        "part, part",
        "{table}",
        "{parquet}",
        "{file}",
        "{missing}",
    ]
)
#: Random text as the shell can hand it over: no NUL, non-UTF-8 bytes as lone surrogates \udc80-\udcff.
TEXT = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF),
    ),
    max_size=16,
).filter(lambda s: not s.startswith(("/", "~")) and ".." not in s and "://" not in s)
VALUES = st.one_of(NUMBERS, SPECIAL, TEXT)
#: Where a command's table (or directory) argument points: never outside the example's own folder.
LOCATIONS = st.one_of(st.sampled_from(["{table}", "{table}", "{table}", "{new}", "{file}", "{missing}"]), TEXT)


def _commands() -> dict[str, list]:
    parser = build_parser()
    sub = parser._subparsers._group_actions[0]
    return {
        name: [a for a in sp._actions if a.dest != "help" and not (set(a.option_strings) & SKIPPED_OPTIONS)]
        for name, sp in sub.choices.items()
    }


COMMANDS = _commands()


@st.composite
def cli_invocations(draw) -> list[str]:
    """One command with its positionals, one *focus* option always given, the others now and then.

    Options that parse numbers get numbers (huge, negative, not finite) most of the time, so a
    value reaches the code behind the parser instead of stopping at argparse.
    """
    name = draw(st.sampled_from(sorted(COMMANDS)))
    actions = COMMANDS[name]
    optional = [a for a in actions if a.option_strings]
    focus = draw(st.sampled_from(optional)) if optional else None
    args = [name]
    for action in actions:
        if not action.option_strings:  # positional: the table or directory
            if action.nargs in ("?", "*") and draw(st.booleans()):
                continue
            value = draw(LOCATIONS)
            args.append(value if value.startswith("{") else os.path.join("rel", value))
            continue
        if action is not focus and not action.required and draw(st.integers(0, 5)) != 0:
            continue
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            args.append(flag)
            continue
        if action.choices and draw(st.booleans()):
            value = draw(st.sampled_from(list(action.choices)))
        elif action.type is not None and action.type is not str and draw(st.integers(0, 4)) < 3:
            value = draw(NUMBERS)
        else:
            value = draw(VALUES)
        args.append(f"{flag}={value}")
    return args


def _expand(args: list[str], path: str, workdir: str) -> list[str]:
    tokens = {
        "{table}": path,
        "{new}": os.path.join(workdir, "new"),
        "{parquet}": sorted(live_files(path))[0],
        "{file}": os.path.join(path, "_delta_log", f"{0:020d}.json"),
        "{missing}": os.path.join(workdir, "missing"),
    }
    out = []
    for a in args:
        for k, v in tokens.items():
            a = a.replace(k, v)
        out.append(a)
    return out


@_examples(CLI_EXAMPLES)
@given(args=cli_invocations())
@pytest.mark.slow
def test_cli_arguments(pristine, tmp_path, monkeypatch, args):
    """Any arguments: exit 0/1/2, one error line, no traceback; live files kept; both readers read the table."""
    workdir = str(tmp_path / "w")
    path = fresh_copy(pristine, workdir)
    monkeypatch.chdir(workdir)
    needed = live_files(path)
    before_log = log_state(path)
    argv = _expand(args, path, workdir)
    code, _out, err = run_cli(argv)
    problems = cli_problems(code, err) + table_problems(path, needed)
    if code == 2 and log_state(path) != before_log:
        problems.append("bad input (exit 2) but the log changed")
    assert not problems, (argv, problems)


# --- class: string booleans -----------------------------------------------------------------------


def _switches(path: str):
    from deltalog.compaction import compact
    from deltalog.ingest import commit_request
    from deltalog.log_maintenance.log_cleanup import cleanup_log
    from deltalog.log_maintenance.manifest import generate_manifest
    from deltalog.vacuuming import vacuum

    return [
        lambda v: vacuum(path, retention_hours=0, allow_short_retention=v),
        lambda v: vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=v),
        lambda v: vacuum(path, mode="lite", retention_hours=0, allow_short_retention=True, full_fallback=v),
        lambda v: cleanup_log(path, dry_run=v),
        lambda v: generate_manifest(path, full=True, dry_run=v),
        lambda v: compact(path, plan_only=v),
        lambda v: commit_request(path, {"operation": "WRITE", "add": []}, single_writer=v),
    ]


NOT_BOOLS = st.one_of(
    st.sampled_from(["False", "false", "no", "0", "", "off", "True", "yes", "1", "{{ params.allow }}"]),
    st.text(max_size=6),
    st.integers(-1, 2),
    st.none(),
    st.floats(allow_nan=True),
)


@_examples(BOOL_EXAMPLES)
@given(value=NOT_BOOLS, which=st.integers(0, 6))
@pytest.mark.slow
def test_string_booleans(pristine, tmp_path, value, which):
    """A switch given anything but a bool is refused (InvalidArgumentError) before anything is touched."""
    path = fresh_copy(pristine, str(tmp_path / "w"))
    needed, before_log = live_files(path), log_state(path)
    removed = {os.path.join(path, p) for p in os.listdir(path)}
    problems = []
    try:
        _switches(path)[which](value)
        problems.append(f"switch {which} accepted {value!r}")
    except InvalidArgumentError as exc:
        if "must be True or False" not in str(exc):
            problems.append(f"unclear error: {exc}")
    except Exception as exc:  # noqa: BLE001 - anything else is what this class looks for
        problems.append(f"{type(exc).__name__}: {exc}")
    problems += table_problems(path, needed)
    if log_state(path) != before_log or {os.path.join(path, p) for p in os.listdir(path)} != removed:
        problems.append("something was written or deleted")
    assert not problems, (which, value, problems)


def test_the_recorder_counts_each_example_and_each_failing_one_as_unsafe(monkeypatch):
    """How the report's row is counted (a failing example of any class is an unsafe outcome)."""
    from collections import Counter
    from types import SimpleNamespace

    import reliability_recorder as recorder

    monkeypatch.setattr(recorder, "COUNTS", Counter())

    def case(prop: str, status: str) -> SimpleNamespace:
        return SimpleNamespace(type="test_case", property=prop, status=status)

    recorder.observe(case("tests/reliability/test_adversarial.py::test_cli_arguments", "passed"))
    recorder.observe(case("test_vacuum_paths_property.py::test_vacuum_never_deletes_a_link_nor_through_one", "failed"))
    recorder.observe(case("test_adversarial.py::test_cli_arguments", "gave_up"))
    recorder.observe(case("test_other.py::test_unrelated", "failed"))
    recorder.observe(SimpleNamespace(type="info"))
    report = recorder.report()
    assert report["totals"]["adversarial_inputs"] == 2 and report["totals"]["unsafe_outcomes"] == 1
    assert report["adversarial_classes"] == {"cli_args": 1, "links": 1}


# --- class: schema mismatches in commit requests ------------------------------------------------


TABLE_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.float64()), ("s", pa.string())])
#: Column types a writer might put in a file, right or wrong for the table.
FILE_TYPES = [
    pa.int8(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.binary(),
    pa.bool_(),
    pa.decimal128(5, 2),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("ns"),
    pa.struct([("x", pa.int64())]),
    pa.list_(pa.int64()),
]


def _column(t: pa.DataType, n: int, with_nulls: bool) -> pa.Array:
    values: list = []
    for i in range(n):
        if with_nulls and i == 0:
            values.append(None)
        elif pa.types.is_integer(t):
            values.append(i % 100)
        elif pa.types.is_floating(t):
            values.append(i / 2)
        elif pa.types.is_string(t):
            values.append(f"s{i}")
        elif pa.types.is_binary(t):
            values.append(b"b")
        elif pa.types.is_boolean(t):
            values.append(i % 2 == 0)
        elif pa.types.is_decimal(t):
            values.append(_decimal.Decimal(i) / 4)
        elif pa.types.is_date(t):
            values.append(_dt.date(2024, 1, 1 + i % 28))
        elif pa.types.is_timestamp(t):
            values.append(_dt.datetime(2024, 1, 1, i % 24, tzinfo=_dt.UTC if t.tz else None))
        elif pa.types.is_struct(t):
            values.append({"x": i})
        else:
            values.append([i])
    return pa.array(values, t)


@st.composite
def data_files(draw):
    """A file for TABLE_SCHEMA: each column kept, dropped or retyped, maybe nulls in ``id``, maybe an extra
    column; the request may carry stats, true or lying."""
    n = draw(st.integers(1, 5))
    cols = {}
    for f in TABLE_SCHEMA:
        kind = draw(st.sampled_from(["same", "same", "retype", "drop"]))
        if kind == "drop":
            continue
        t = f.type if kind == "same" else draw(st.sampled_from(FILE_TYPES))
        cols[f.name] = _column(t, n, with_nulls=f.name == "id" and draw(st.booleans()))
    if draw(st.integers(0, 4)) == 0:
        cols["extra"] = _column(draw(st.sampled_from(FILE_TYPES)), n, False)
    if not cols:
        cols["id"] = _column(pa.int64(), n, False)
    stats = draw(st.sampled_from([None, "true", "lying", "garbage"]))
    return pa.table(cols), stats


@pytest.fixture(scope="module")
def schema_table(tmp_path_factory):
    from deltalog.create import create_table

    path = str(tmp_path_factory.mktemp("schema") / "t")
    create_table(path, TABLE_SCHEMA)
    from deltalog.ingest import commit_request

    pq.write_table(
        pa.table({"id": pa.array([1, 2], pa.int64()), "v": [0.5, 1.5], "s": ["a", "b"]}), path + "/base.parquet"
    )
    commit_request(path, {"operation": "WRITE", "add": ["base.parquet"]})
    return path


def _readers_agree_on_rows(path: str) -> list[str]:
    """Both readers read every row of the latest version, and every file's stats hold its rows."""
    problems = table_problems(path, live_files(path))
    if problems:
        return problems
    snap = DeltaTable(path).snapshot()
    expected = sum(pq.ParquetFile(os.path.join(path, p)).metadata.num_rows for p in snap.file_paths())
    got = deltalake.DeltaTable(path).to_pyarrow_table().num_rows
    if got != expected:
        return [f"deltalake reads {got} rows, the files hold {expected}"]
    for rec in snap.files.select(["path", "stats"]).to_pylist():
        stats = _json.loads(rec["stats"]) if rec["stats"] else {}
        lo, hi = (stats.get("minValues") or {}).get("id"), (stats.get("maxValues") or {}).get("id")
        if lo is None or hi is None:
            continue
        ids = pq.read_table(os.path.join(path, rec["path"]), columns=["id"]).column("id").to_pylist()
        if any(i is not None and not lo <= i <= hi for i in ids):
            return [f"{rec['path']}: stats claim id in [{lo}, {hi}], the file holds {ids} (filtered reads miss rows)"]
    return []


@_examples(COMMIT_EXAMPLES)
@given(case=data_files())
@pytest.mark.slow
def test_schema_mismatches(schema_table, tmp_path, case):
    """A commit request with a file of any shape: committed only if both readers then read every row truthfully."""
    from deltalog.ingest import commit_request

    data, stats = case
    path = fresh_copy(schema_table, str(tmp_path / "w"))
    before_log = log_state(path)
    pq.write_table(data, os.path.join(path, "new.parquet"))
    add: dict = {"path": "new.parquet"}
    if stats == "true":
        add["stats"] = {"numRecords": data.num_rows}
    elif stats == "lying":
        add["stats"] = {
            "numRecords": data.num_rows,
            "minValues": {"id": 1000},
            "maxValues": {"id": 1001},
            "nullCount": {"id": 0},
        }
    elif stats == "garbage":
        add["stats"] = {"numRecords": -1}
    problems: list[str] = []
    try:
        commit_request(path, {"operation": "WRITE", "add": [add]})
    except DeltaLogError:
        if log_state(path) != before_log:
            problems.append("refused, but the log changed")
    except Exception as exc:  # noqa: BLE001 - anything else is what this class looks for
        problems.append(f"{type(exc).__name__}: {exc}")
    problems += _readers_agree_on_rows(path)
    assert not problems, (data.schema, stats, problems)


# --- class: partition values ------------------------------------------------------------------------

PARTITION_TYPES = {
    "int": pa.int32(),
    "long": pa.int64(),
    "date": pa.date32(),
    "decimal(5,2)": pa.decimal128(5, 2),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "boolean": pa.bool_(),
    "double": pa.float64(),
    "string": pa.string(),
}
RAW_VALUES = st.one_of(
    st.sampled_from(
        [
            "1",
            "-0",
            "007",
            "1.5",
            "1.50",
            "1.555",
            "-1.01",
            "-0.5",
            "1234",
            "99999999999",
            "-2147483649",
            "1e3",
            "NaN",
            "Infinity",
            "true",
            "TRUE",
            "yes",
            "2024-01-01",
            "2024-1-1",
            "2024-02-30",
            "2024-01-01T00:00:00Z",
            "2024-01-01 00:00:00",
            "",
            " ",
            "__HIVE_DEFAULT_PARTITION__",
            "a b",
            "a%20b",
            "x/y",
            "ä",
        ]
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), max_size=6),
)


@pytest.fixture(scope="module")
def partition_tables(tmp_path_factory):
    from deltalog.create import create_table

    root = tmp_path_factory.mktemp("partitions")
    out = {}
    for name, t in PARTITION_TYPES.items():
        path = str(root / name.replace("(", "").replace(")", "").replace(",", "_"))
        create_table(path, pa.schema([("id", pa.int64()), ("p", t)]), partition_by=["p"])
        out[name] = path
    return out


@_examples(COMMIT_EXAMPLES)
@given(kind=st.sampled_from(sorted(PARTITION_TYPES)), raw=RAW_VALUES, explicit=st.booleans())
@example(kind="decimal(5,2)", raw="-1.01", explicit=False)  # deltalake's pyarrow reader misrenders these
@example(kind="decimal(5,2)", raw="-0.01", explicit=True)
@pytest.mark.slow
def test_partition_values(partition_tables, tmp_path, kind, raw, explicit):
    """A partition value of any spelling: committed only if both readers then read the table."""
    from deltalog.ingest import commit_request

    path = fresh_copy(partition_tables[kind], str(tmp_path / "w"))
    before_log = log_state(path)
    folder = "p=" + _urlparse.quote(raw, safe="") if raw else "p=__HIVE_DEFAULT_PARTITION__"
    os.makedirs(os.path.join(path, folder), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), os.path.join(path, folder, "f.parquet"))
    add: dict = {"path": f"{folder}/f.parquet"}
    if explicit:
        add["partitionValues"] = {"p": raw}
    problems: list[str] = []
    try:
        commit_request(path, {"operation": "WRITE", "add": [add]})
    except DeltaLogError:
        if log_state(path) != before_log:
            problems.append("refused, but the log changed")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"{type(exc).__name__}: {exc}")
    problems += table_problems(path, live_files(path))
    assert not problems, (kind, raw, explicit, problems)


# --- class: CLI arguments on the S3 test server ----------------------------------------------------

S3_CLI_EXAMPLES = 10 if SMALL else 25


@pytest.fixture(scope="module")
def s3_pristine(pristine, s3_server):
    """The pristine table uploaded once to its own bucket of the S3 test server."""
    import uuid

    import boto3
    import fsspec

    from s3_server import ACCESS_KEY, REGION, SECRET_KEY, storage_options_for

    bucket = f"adv-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    ).create_bucket(Bucket=bucket)
    options = storage_options_for(s3_server)
    fs = fsspec.filesystem("s3", **options)
    fs.put(pristine + "/", f"{bucket}/pristine/", recursive=True)
    return bucket, options, s3_server


def _s3_problems(uri: str, options: dict, endpoint: str, needed: list[str]) -> list[str]:
    import fsspec

    from s3_server import deltalake_options_for

    fs = fsspec.filesystem("s3", **options, use_listings_cache=False)
    problems = [f"live file deleted: {p}" for p in needed if not fs.exists(p)]
    try:
        DeltaTable(uri, options).snapshot()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"deltalog cannot read the table: {type(exc).__name__}: {exc}")
    try:
        deltalake.DeltaTable(uri, storage_options=deltalake_options_for(endpoint)).to_pyarrow_table()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"deltalake cannot read the table: {type(exc).__name__}: {exc}")
    return problems


@_examples(S3_CLI_EXAMPLES)
@given(args=cli_invocations())
@pytest.mark.slow
@pytest.mark.s3
def test_cli_arguments_on_s3(s3_pristine, pristine, tmp_path, monkeypatch, args):
    """The CLI class against a table on the S3 test server (the generated storage options come first, the
    server's last, so a generated endpoint or key can break the connection but not point elsewhere)."""
    import uuid

    import fsspec

    bucket, options, endpoint = s3_pristine
    fs = fsspec.filesystem("s3", **options, use_listings_cache=False)
    prefix = f"{bucket}/{uuid.uuid4().hex[:10]}"
    fs.copy(f"{bucket}/pristine/", prefix + "/", recursive=True)
    uri = f"s3://{prefix}"
    workdir = str(tmp_path / "w")
    local = fresh_copy(pristine, workdir)  # for the {parquet}/{file} tokens: local inputs
    monkeypatch.chdir(workdir)
    snap = DeltaTable(uri, options).snapshot()
    needed = [f"{prefix}/{_urlparse.unquote(p)}" for p in snap.file_paths()]
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    argv = [a.replace("{table}", uri) for a in args]
    argv = _expand(argv, local, workdir)
    argv += [f"--storage-option={k}={v}" for k, v in options.items() if isinstance(v, str)]
    code, _out, err = run_cli(argv)
    problems = cli_problems(code, err) + _s3_problems(uri, options, endpoint, needed)
    assert not problems, (argv, problems)
