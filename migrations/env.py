from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from service.db import to_sqlalchemy_url
from service.models import Base
from service.settings import get_settings

target_metadata = Base.metadata


def database_url() -> str:
    # A URL given by the caller (tests, `rft-server migrate --url`) wins over the environment.
    url = context.config.get_main_option("sqlalchemy.url")
    return to_sqlalchemy_url(url or get_settings().require_database_url())


def run_migrations_offline() -> None:
    context.configure(url=database_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
