"""What the tests of the PyTorch peers (bench/peers/*.py) share: torch, or the skip (exit 77, which ctest reads as
skipped) where this python cannot import it, and a peer script loaded as a module."""
import importlib.util
import os
import sys

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: this python cannot import torch (apt-get install python3-torch)")
    sys.exit(77)

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers")


def load_peer(name):
    """bench/peers/NAME.py as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(PEERS, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
