"""The provider's version, read by setuptools and stamped on every job it creates."""

__version__ = "0.1.0"
