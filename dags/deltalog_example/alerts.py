"""Who gets the fleet's objectives alert: the SMTP provider's ``SmtpNotifier`` from the Variables.

``deltalog_alert_email`` (comma-separated addresses; empty: no notifier, the alert task only logs
its message), ``deltalog_alert_from`` and ``deltalog_alert_smtp_conn_id`` (an ``smtp`` connection:
host, port, login; its extra ``disable_tls`` / ``disable_ssl`` for a plain relay). Swap in any other
notifier (``SlackNotifier(text=None)``, a deployment's own): deltalog fills the message fields it
leaves empty and its templates can read ``{{ deltalog_alert.subject }}`` / ``.text`` / ``.html``.
"""

from __future__ import annotations

from typing import Any

from deltalog_example import setting

__all__ = ["alert_notifiers"]


def alert_notifiers() -> list[Any]:
    """An ``SmtpNotifier`` to the ``deltalog_alert_email`` addresses, or none when that is empty."""
    to = [a.strip() for a in setting("deltalog_alert_email").split(",") if a.strip()]
    if not to:
        return []
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    return [
        SmtpNotifier(
            to=to,
            from_email=setting("deltalog_alert_from"),
            smtp_conn_id=setting("deltalog_alert_smtp_conn_id"),
        )
    ]
