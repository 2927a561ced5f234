"""The two kinds of failure the `derive` command reports, each as one line on stderr."""

__all__ = ["UsageError", "EnvironmentProblem", "InternalFailure"]


class UsageError(Exception):
    """Bad input (an option, a size, an output path): exit status 2."""


class EnvironmentProblem(Exception):
    """Something is missing or failed outside our input (TeX, matplotlib, torch): status 1."""


class InternalFailure(Exception):
    """derive could not do what it was asked, and it is derive's failure, not the input's: exit
    status 1, the message printed as it is."""
