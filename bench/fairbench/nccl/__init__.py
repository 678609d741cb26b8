"""The all-reduce sweep of ``fairbench nccl``: ``runner`` plans and starts the ranks, ``worker`` is one rank.

The worker runs under the serving venv's Python (torch), by path; it imports nothing of fairbench."""
