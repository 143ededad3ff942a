"""`python -m ppokit.bench`: time GRPO steps phase by phase, and optionally TRL's on the same work.

Each trainer runs in its own child process (`ppokit.bench.worker`), so peak RSS and the measured
matmul peak belong to that trainer alone; the parent prints the table and writes the JSON.
"""

from ppokit.bench.summary import summarize

__all__ = ["summarize"]
