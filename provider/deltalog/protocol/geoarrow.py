"""Geometry and geography columns as Arrow carries them into Parquet (the ``geospatial`` feature).

Delta Spark stores a ``geometry(<crs>)`` or ``geography(<crs>, <edges>)`` column as WKB
in a Parquet BYTE_ARRAY column annotated with the GEOMETRY or GEOGRAPHY logical type
(its CRS, and for a geography its edge algorithm); it needs that annotation to read the
column back. pyarrow (21 and later) reads such a column as, and writes it from, the
``geoarrow.wkb`` extension type, but only when a type of that name is registered:
without one it reads plain binary and writes the annotation away. So compaction
registers one (:func:`register`, a no-op when another library such as geoarrow-pyarrow
already did) and gives each geospatial column the type its Delta type describes
(:func:`wkb_type`), so that a rewritten file carries the annotation Delta Spark wrote.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pyarrow as pa

__all__ = [
    "DEFAULT_CRS",
    "EXTENSION_NAME",
    "WkbType",
    "geospatial_parts",
    "geospatial_writes_supported",
    "parquet_geospatial_parts",
    "register",
    "wkb_storage",
    "wkb_type",
]

#: The GeoArrow extension name Arrow's Parquet writer maps to the GEOMETRY/GEOGRAPHY logical types.
EXTENSION_NAME = "geoarrow.wkb"
#: pyarrow's first release whose Parquet reader and writer know the GEOMETRY/GEOGRAPHY logical types.
_FIRST_PYARROW = (21, 0)
_GEO = re.compile(r"(geometry|geography)\(\s*([^(),]+?)\s*(?:,\s*([^(),]+?)\s*)?\)")
#: How pyarrow prints a Parquet column's GEOMETRY/GEOGRAPHY logical type (its JSON form omits the edges).
_PARQUET_GEO = re.compile(r"(Geometry|Geography)\(crs=([^,)]*)(?:, algorithm=([^)]*))?\)")
#: The CRS a Parquet GEOMETRY/GEOGRAPHY column without one has (the Parquet format's default).
DEFAULT_CRS = "OGC:CRS84"
_lock = threading.Lock()


class WkbType(pa.ExtensionType):  # type: ignore[misc]  # pyarrow ships no type hints
    """``geoarrow.wkb`` over binary; its metadata is GeoArrow's JSON (``crs``, ``edges``)."""

    def __init__(self, metadata: bytes = b"{}") -> None:
        self._metadata = metadata
        super().__init__(pa.binary(), EXTENSION_NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return self._metadata

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> WkbType:
        return cls(serialized)


def geospatial_writes_supported() -> bool:
    """Whether this pyarrow writes the GEOMETRY/GEOGRAPHY logical types (21 and later)."""
    version = tuple(int(p) for p in pa.__version__.split(".")[:2] if p.isdigit())
    return version >= _FIRST_PYARROW


def register() -> None:
    """Register :class:`WkbType` under ``geoarrow.wkb`` unless a type of that name is registered already."""
    with _lock:
        try:
            pa.register_extension_type(WkbType())
        except pa.ArrowKeyError:  # registered before (by us or by geoarrow-pyarrow): either type serves
            pass


def geospatial_parts(delta_type: str) -> tuple[str, str, str | None]:
    """(``geometry``/``geography``, CRS, edges or None) of a Delta geospatial type."""
    m = _GEO.fullmatch(delta_type)
    if m is None:
        raise ValueError(f"{delta_type!r} is not a geometry or geography type")
    kind, crs, edges = m.groups()
    return kind, crs, (edges or "spherical").lower() if kind == "geography" else None


def parquet_geospatial_parts(logical_type: Any) -> tuple[str, str, str | None] | None:
    """The same parts of a Parquet column's logical type (None when it is not GEOMETRY/GEOGRAPHY)."""
    m = _PARQUET_GEO.fullmatch(str(logical_type))
    if m is None:
        return None
    kind, crs, edges = m.groups()
    kind = kind.lower()
    return kind, crs or DEFAULT_CRS, (edges or "spherical").lower() if kind == "geography" else None


def wkb_type(delta_type: str) -> pa.DataType:
    """The Arrow type of a column of Delta type ``geometry(<crs>)`` or ``geography(<crs>, <edges>)``."""
    kind, crs, edges = geospatial_parts(delta_type)
    meta: dict[str, Any] = {"crs": crs}
    if edges is not None:
        meta["edges"] = edges
    return WkbType(json.dumps(meta, separators=(",", ":")).encode())


def wkb_storage(array: pa.Array) -> pa.Array:
    """The WKB bytes of ``array`` as plain binary, whether it was read annotated or not."""
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    return array if array.type == pa.binary() else array.cast(pa.binary())
