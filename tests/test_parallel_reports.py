"""A test's report reaches the controller whatever text it captured (tests/parallel.py ``utf8_safe``).

The adversarial CLI tests pass non-UTF-8 bytes as lone surrogates (``\\udcff``); the CLI logs them.
Such a report once killed its xdist worker (execnet sends strict UTF-8) and ended the whole run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from parallel import utf8_safe

TESTS = Path(__file__).resolve().parent


def test_strings_with_lone_surrogates_are_escaped_and_the_rest_is_unchanged():
    data = {"sections": [("Captured log call", "bad \udcff byte")], "ok": "ünïcødé 🙂", "n": 3, "t": ("\udc80",)}
    safe = utf8_safe(data)
    assert safe == {
        "sections": [("Captured log call", "bad \\udcff byte")],
        "ok": "ünïcødé 🙂",
        "n": 3,
        "t": ("\\udc80",),
    }
    assert utf8_safe("plain") == "plain"


def test_a_worker_sends_a_report_with_a_lone_surrogate_and_the_run_goes_on(tmp_path):
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\npytest_plugins = ['parallel']\n"
    )
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            import logging

            def test_logs_a_surrogate():
                logging.getLogger("x").warning("argument %s", "rel/\\udcff")

            def test_fails_naming_a_surrogate():
                assert False, "argv: rel/\\udcff"

            def test_after():
                pass
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-q", "-rfE", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=300,
    )
    assert "INTERNALERROR" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    assert "1 failed, 2 passed" in proc.stdout, proc.stdout[-3000:]
    assert "rel/\\udcff" in proc.stdout  # the failure's message, escaped, not lost
