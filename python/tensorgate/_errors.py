"""The one error type the worker answers with.

Every failure a request can meet is turned into a ``WorkerError`` with a stable code from
docs/worker-protocol.md, so the gateway maps codes, not Python exception classes.
"""

from __future__ import annotations

LOAD_FAILED = "LOAD_FAILED"
UNSUPPORTED_FORMAT = "UNSUPPORTED_FORMAT"
INFERENCE_FAILED = "INFERENCE_FAILED"
BAD_TENSOR = "BAD_TENSOR"
BAD_PARAMETER = "BAD_PARAMETER"
BAD_IMAGE = "BAD_IMAGE"
IMAGE_TOO_LARGE = "IMAGE_TOO_LARGE"
IMAGE_FORMAT_NOT_SUPPORTED = "IMAGE_FORMAT_NOT_SUPPORTED"
BAD_TEXT = "BAD_TEXT"
TEXT_TOO_LONG = "TEXT_TOO_LONG"
BAD_AUDIO = "BAD_AUDIO"
AUDIO_FORMAT_NOT_SUPPORTED = "AUDIO_FORMAT_NOT_SUPPORTED"
AUDIO_TOO_LONG = "AUDIO_TOO_LONG"
HANDLER_FAILED = "HANDLER_FAILED"
SHARED_MEMORY_OUT_OF_RANGE = "SHARED_MEMORY_OUT_OF_RANGE"

#: The longest message sent back; TorchScript errors carry whole interpreter tracebacks.
MAX_MESSAGE_CHARS = 4000


class WorkerError(Exception):
    """A request failed with ``code``; ``type`` names the exception that caused it, if any."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def type(self) -> str:
        cause = self.__cause__
        return type(cause).__name__ if cause is not None else type(self).__name__

    def to_json(self) -> dict[str, str]:
        message = self.message
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        return {"code": self.code, "message": message, "type": self.type}
