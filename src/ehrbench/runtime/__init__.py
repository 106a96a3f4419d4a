"""The Ray runtime: actors hosting databases, indexes, users and trial workers, the runner, checkpoints, budgets and
the cluster-wide rate limits and spending caps, which every process of the runtime supplies to the model clients
it builds."""
from . import budget, rate_limits  # noqa: F401 - supply the ledger and the limiters to the model layer
