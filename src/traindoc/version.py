"""The package version, alone: the report imports it without importing the live face."""

__version__ = "0.1.0"
