"""ppokit: PaddleNLP-config-compatible PPO/GRPO for language models on PyTorch."""

__version__ = "0.1.0"

from ppokit.errors import PpokitError
from ppokit.training.heap import ask_for_huge_pages

ask_for_huge_pages()  # before torch's first CPU allocation, where torch reads it (training/heap.py)

__all__ = ["PpokitError", "Session", "__version__"]


def __getattr__(name):
    # Session pulls in torch/transformers; import it only when asked for.
    if name == "Session":
        from ppokit.session import Session

        return Session
    raise AttributeError(f"module 'ppokit' has no attribute {name!r}")
