"""fairbench: deploy LLM serving configurations and benchmark them fairly."""

__version__ = "0.1.0"
