"""What attention is: the declarations of its steps (the only hand-entered mathematics), the
graphs they form, and the stated assumptions of the facts."""

from .attention import STEP_NAMES, self_attention
from .declaration import Declaration, Graph

__all__ = ["Declaration", "Graph", "STEP_NAMES", "self_attention"]
