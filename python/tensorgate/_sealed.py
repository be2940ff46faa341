"""Model files encrypted at rest (``tensorgate encrypt-model``): AES-256-GCM, decrypted in memory.

Layout: ``TGENC001`` | key id length (1 byte) | key id (ASCII) | nonce (12 bytes) | ciphertext |
tag (16 bytes). The magic and the key id are authenticated too (GCM associated data), so a changed
header fails like a changed body. The key id is the first 16 hex digits of the key's SHA-256: it
tells "wrong key" from "changed file" without revealing the key.

The key comes from, in order: ``TENSORGATE_MODEL_KEY`` (32 bytes as base64 or hex),
``TENSORGATE_MODEL_KEY_FILE`` (a file holding that), or ``TENSORGATE_MODEL_KEY_COMMAND`` (a shell
command that prints it: the hook for a KMS or a secrets manager). The plaintext exists only in
this process's memory: loaders get a ``BytesIO``, never a path to a decrypted copy.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import subprocess

from ._errors import LOAD_FAILED, WorkerError

MAGIC = b"TGENC001"
NONCE_BYTES = 12


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


def _parse_key(text: str, source: str) -> bytes:
    text = text.strip()
    for decode in (bytes.fromhex, base64.b64decode):
        try:
            key = decode(text)
        except (ValueError, binascii.Error):
            continue
        if len(key) == 32:
            return key
    raise WorkerError(LOAD_FAILED, f"{source} does not hold a 32-byte key as base64 or hex")


def model_key() -> bytes | None:
    """The configured model key, or None when none is configured."""
    if os.environ.get("TENSORGATE_MODEL_KEY"):
        return _parse_key(os.environ["TENSORGATE_MODEL_KEY"], "TENSORGATE_MODEL_KEY")
    path = os.environ.get("TENSORGATE_MODEL_KEY_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return _parse_key(f.read(), f"TENSORGATE_MODEL_KEY_FILE ({path})")
    command = os.environ.get("TENSORGATE_MODEL_KEY_COMMAND")
    if command:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            why = done.stderr.strip()[:200]
            raise WorkerError(
                LOAD_FAILED, f"TENSORGATE_MODEL_KEY_COMMAND exited with {done.returncode}: {why}"
            )
        return _parse_key(done.stdout, "the output of TENSORGATE_MODEL_KEY_COMMAND")
    return None


def is_sealed(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def open_model_file(path: str) -> str | io.BytesIO:
    """``path`` itself for a plain file; the decrypted bytes in memory for an encrypted one."""
    if not is_sealed(path):
        return path
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    with open(path, "rb") as f:
        data = f.read()
    id_len = data[len(MAGIC)] if len(data) > len(MAGIC) else 0
    header_end = len(MAGIC) + 1 + id_len
    if len(data) < header_end + NONCE_BYTES + 16:
        raise WorkerError(LOAD_FAILED, f"{path} is an encrypted model file cut short")
    sealed_with = data[len(MAGIC) + 1 : header_end].decode("ascii", "replace")
    key = model_key()
    if key is None:
        raise WorkerError(
            LOAD_FAILED,
            f"{path} is encrypted (key id {sealed_with}) and no key is configured: set "
            "TENSORGATE_MODEL_KEY, TENSORGATE_MODEL_KEY_FILE or TENSORGATE_MODEL_KEY_COMMAND",
        )
    if key_id(key) != sealed_with:
        raise WorkerError(
            LOAD_FAILED,
            f"{path} was encrypted with key id {sealed_with}; the configured key is {key_id(key)}",
        )
    nonce = data[header_end : header_end + NONCE_BYTES]
    try:
        plain = AESGCM(key).decrypt(nonce, data[header_end + NONCE_BYTES :], data[:header_end])
    except InvalidTag:
        raise WorkerError(
            LOAD_FAILED,
            f"{path} failed authentication: the encrypted file was changed after it was written",
        ) from None
    return io.BytesIO(plain)
