"""Which weight updates an actor may still take, across learner restarts.

A learner restarted without its checkpoint counts its versions from 1 again. Comparing
bare version numbers would refuse its updates until it passed its predecessor's number,
so every update names the publisher's session (a random id per learner process) and the
actor orders updates by (session, version): within a session versions only rise; an
update from a new session is taken whatever its number, and the session it replaces is
never taken again. The subscriber and the weight slots both keep one of these.
"""

from __future__ import annotations

from typing import Final

OLD_SESSION: Final = "old_session"
STALE_VERSION: Final = "stale_version"

REMEMBERED_SESSIONS: Final = 1024
"""Replaced sessions remembered (16 bytes each); one per learner restart, so never reached in
practice, and a bound on what a peer cycling session ids can make an actor hold."""


class SessionVersions:
    """The session followed, its newest version taken, and the sessions it replaced."""

    def __init__(self, session: str = "", version: int = -1) -> None:
        self.session = session
        self.version = version
        self._replaced: dict[str, None] = {}  # insertion-ordered, so the oldest is forgotten first

    def replaced(self, session: str) -> bool:
        """Whether ``session`` was followed once and replaced: never taken again."""
        return session in self._replaced

    def refusal(self, session: str, version: int) -> str | None:
        """Why an update of ``session`` at ``version`` must not be taken; None when it may."""
        if self.replaced(session):
            return OLD_SESSION
        if session == self.session and version <= self.version:
            return STALE_VERSION
        return None

    def follow(self, session: str) -> tuple[str, int] | None:
        """Make ``session`` (not a replaced one) the one followed, nothing of it taken yet; the
        previous session and its newest version when this is a change, else None."""
        if session == self.session:
            return None
        previous = (self.session, self.version)
        self._replaced[self.session] = None
        while len(self._replaced) > REMEMBERED_SESSIONS:
            del self._replaced[next(iter(self._replaced))]
        self.session, self.version = session, -1
        return previous

    def take(self, session: str, version: int) -> tuple[str, int] | None:
        """Record an update taken (one :meth:`refusal` allowed); as :meth:`follow`, the previous
        session and version when it changed the session."""
        previous = self.follow(session)
        self.version = version
        return previous
