"""The store's defaults that the Dagster resource shows too, in a module without SQLAlchemy (loading
the code location must not import it)."""

RETRY_S = 60.0  # how long a read or write keeps retrying a transient error (a database restart)
