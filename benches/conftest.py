"""Puts the repository root on sys.path so ``benches.*`` imports work under any import mode."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
