"""The version of jqueue, read by the package, its commands and its build."""

__version__ = "0.1.0"
