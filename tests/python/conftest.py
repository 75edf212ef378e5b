"""conftest.py -- makes the package importable from the source tree
(<repo>/python) and the helper modules beside this file; FSH_LIB picks the
library (the Makefile sets it, else <repo>/build/libflightshuffle.so)."""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))
os.environ.setdefault("FSH_LIB", str(REPO / "build" / "libflightshuffle.so"))
