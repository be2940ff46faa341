"""tensorgate's Python side.

Today this is the torch worker that the gateway spawns (``python -m tensorgate.worker``); the
training SDK will join it here. Everything else lives in private ``_modules`` so that the public
surface stays what ``__all__`` says.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
