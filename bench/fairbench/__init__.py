"""fairbench: deploy LLM serving configurations and benchmark them fairly."""

from importlib.metadata import version

__version__ = version("fairbench")
"""The installed distribution's version: pyproject.toml's, the one place it is written."""
