"""Former name of ``deltalog_provider.version_compat`` (the one version-compat seam).

Kept only so code written against the old name keeps importing; new code imports
``deltalog_provider.version_compat``. Nothing is defined here.
"""

from __future__ import annotations

from deltalog_provider.version_compat import *  # noqa: F403
from deltalog_provider.version_compat import __all__  # noqa: F401
