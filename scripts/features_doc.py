"""Write docs/features.md from the feature x operation table (provider/deltalog/protocol/features.py).

Run after changing the table: ``.venv/bin/python scripts/features_doc.py``.
``tests/test_features.py`` fails while the page differs from what this writes.
"""

from __future__ import annotations

from pathlib import Path

from deltalog.protocol.features import markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "features.md"


def main() -> None:
    DOC.write_text(markdown(), encoding="utf-8")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
