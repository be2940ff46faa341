"""tensorgate's Python side: the torch worker that the gateway spawns
(``python -m tensorgate.worker``) and the training SDK (``from tensorgate import train``).
Everything else lives in private ``_modules`` so that the public surface stays what the public
modules' ``__all__`` say. Importing this package imports neither torch nor the worker.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
