"""Files per partition for ``health``, counted with Arrow kernels (issue 19: ten million files).

The bulk path must count exactly what the per-file dict count counted, for maps spelled
alike (the bulk path) and every irregular spelling (the fallback).
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.maintenance.health import files_per_partition

MAP = pa.map_(pa.string(), pa.string())


def reference(maps: list) -> list[int]:
    counts: dict[tuple, int] = {}
    for pv in maps:
        k = tuple(sorted(pv or []))
        counts[k] = counts.get(k, 0) + 1
    return sorted(counts.values())


values = st.one_of(st.none(), st.sampled_from(["a", "b", "", "2024-01-01"]))
regular = st.lists(st.tuples(values, values), min_size=1, max_size=60).map(
    lambda rows: [[("year", y), ("day", d)] for y, d in rows]
)
irregular = st.lists(
    st.one_of(
        st.none(),
        st.just([]),
        st.lists(st.tuples(st.sampled_from(["year", "day"]), values), max_size=2, unique_by=lambda kv: kv[0]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(st.one_of(regular, irregular), st.integers(0, 3))
def test_bulk_count_equals_the_per_file_count(maps, cut):
    arr = pa.array(maps, MAP)
    assert sorted(files_per_partition(arr)) == reference(maps)
    # Sliced and chunked columns (as a snapshot's table hands them out) count the same.
    tail = maps[cut:]
    if tail:
        assert sorted(files_per_partition(arr.slice(cut))) == reference(tail)
        chunked = pa.chunked_array([arr.slice(0, cut), arr.slice(cut)], MAP)
        assert sorted(files_per_partition(chunked)) == reference(maps)


def test_ten_thousand_files_in_a_hundred_partitions():
    maps = [[("part", f"p{i % 100:03d}")] for i in range(10_000)]
    assert sorted(files_per_partition(pa.array(maps, MAP))) == [100] * 100


def test_keys_in_another_order_are_the_same_partition():
    maps = [[("a", "1"), ("b", "2")], [("b", "2"), ("a", "1")], [("a", "1"), ("b", "3")]]
    assert sorted(files_per_partition(pa.array(maps, MAP))) == [1, 2]
