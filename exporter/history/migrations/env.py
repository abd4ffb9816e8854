"""Alembic environment: migrations run programmatically from ``exporter.history.store``
on a connection it passes in ``config.attributes["connection"]``."""

from __future__ import annotations

from alembic import context

from exporter.history.common import VERSION_TABLE
from exporter.history.schema import declare_backend, metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - offline mode is not supported
    raise RuntimeError("podres-exporter history migrations need a live connection")

# The partial index's condition, as the migrations create it: declared here too, so that
# the metadata Alembic compares with (autogenerate) is right whoever opened the connection.
declare_backend(connection.dialect.name)
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=True,
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
