"""Refusals as the broker logs and answers them: reasons cut short and made printable (they
quote names a client chose), and at most a few log lines per client host in a while."""

import dataclasses
import logging
import time

__all__ = ["RefusalLog", "shown"]

# Lines a host's refusals may log per window; the rest are counted in the next line.
LINES_PER_WINDOW = 20
WINDOW_S = 10.0
MAX_HOSTS = 4096
MAX_REASON_CHARS = 300


def shown(reason: str, limit: int = MAX_REASON_CHARS) -> str:
    """``reason`` cut to ``limit`` characters, control characters escaped."""
    cut = reason[:limit]
    if not cut.isprintable():
        cut = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return cut + ("..." if len(reason) > limit else "")


class RefusalLog:
    """Logs refusals at warning: each reason once per host every ``WINDOW_S``, and at most
    ``LINES_PER_WINDOW`` lines per host in that time."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._hosts: dict[str, _Window] = {}

    def refused(self, host: str, what: str, reason: str) -> None:
        now = time.monotonic()
        window = self._hosts.get(host)
        if window is None or now - window.start >= WINDOW_S:
            if window is None and len(self._hosts) >= MAX_HOSTS:
                self._hosts.clear()
            if window is not None and window.skipped:
                self._log.warning(
                    "%d more refusals from %s not logged", window.skipped, host or "?"
                )
            window = self._hosts[host] = _Window(now)
        text = shown(reason)
        if text in window.reasons or len(window.reasons) >= LINES_PER_WINDOW:
            window.skipped += 1
            return
        window.reasons.add(text)
        self._log.warning("refused %s from %s: %s", what, host or "?", text)


@dataclasses.dataclass(slots=True)
class _Window:
    start: float
    reasons: set[str] = dataclasses.field(default_factory=set)
    skipped: int = 0
