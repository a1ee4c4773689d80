"""The database the migrations build is the one the models describe: a column or table added
to service/models.py without its Alembic migration (or the other way round) fails here,
not in production at the first query."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from service.db import to_sqlalchemy_url
from service.models import Base
from service.stack import LocalStack


def test_the_migrated_schema_matches_the_models(stack: LocalStack) -> None:
    engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "compare_server_default": False}
            )
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert differences == []
