"""What every repository shares: the session of the request or task it serves. Repositories
hold all of a domain's SQL and never commit: the caller's unit of work does
(service.db.session_scope for tasks, get_session for requests)."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy.orm import Session

from service.models import Base

Row = TypeVar("Row", bound=Base)


class Repository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def insert(self, row: Row) -> Row:
        """Add a row and flush it: its id and server defaults are set when this returns."""
        self.session.add(row)
        self.session.flush()
        return row
