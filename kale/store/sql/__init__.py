"""The stores on a database: each facet's operations as named SQL
statements, run through SQLAlchemy Core on SQLite or PostgreSQL."""
