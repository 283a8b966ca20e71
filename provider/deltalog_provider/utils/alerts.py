"""Delivering deltalog's objectives alert through the notifiers a deployment already has.

A notifier is any ``BaseNotifier`` (the SMTP provider's ``SmtpNotifier``, the Slack provider's
``SlackNotifier``, a deployment's own): deltalog calls it with the task's context plus
``deltalog_alert`` (``subject``, ``text``, ``html``, and the report), so its templates can use
``{{ deltalog_alert.subject }}`` and the like. The message fields a notifier leaves empty are
filled with deltalog's message (``subject``; ``html_content`` / ``text`` / ``message``), so
``SmtpNotifier(to="team@example.com")`` sends the alert as it is.

Unlike a callback (whose notifier errors Airflow logs and forgets), a failed delivery fails
the task: its retry sends the same message, because the history, not the notifier, says what
was already open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deltalog.errors import InvalidArgumentError
from deltalog_provider.version_compat import BaseNotifier

__all__ = ["ALERT_CONTEXT_KEY", "check_notifiers", "deliver"]

#: The context key a notifier's templates read the alert from.
ALERT_CONTEXT_KEY = "deltalog_alert"
#: Notifier attribute -> the message part that fills it when the notifier leaves it empty.
_FILLED = {"subject": "subject", "html_content": "html", "text": "text", "message": "text", "body": "text"}


def check_notifiers(notifiers: Any) -> list[Any]:
    """``notifiers`` as a list of ``BaseNotifier`` instances (one, a list, or None); anything else is refused."""
    if notifiers is None:
        return []
    items = list(notifiers) if isinstance(notifiers, list | tuple) else [notifiers]
    bad = [n for n in items if not isinstance(n, BaseNotifier)]
    if bad:
        raise InvalidArgumentError(
            f"notifiers must be Airflow notifiers (BaseNotifier instances such as SmtpNotifier), got {bad[0]!r}"
        )
    return items


def deliver(notifiers: Sequence[Any], context: Any, message: dict[str, Any], log: Any) -> int:
    """Send ``message`` through each notifier; the number delivered (a failure raises: the task fails)."""
    ctx = context if isinstance(context, dict) else dict(context)
    ctx[ALERT_CONTEXT_KEY] = message
    sent = 0
    for notifier in notifiers:
        for attr, part in _FILLED.items():
            if attr in getattr(notifier, "template_fields", ()) and getattr(notifier, attr, None) is None:
                setattr(notifier, attr, message[part])
        notifier.render_template_fields(ctx)
        notifier.notify(ctx)
        sent += 1
        log.info("objectives alert sent through %s", type(notifier).__name__)
    return sent
