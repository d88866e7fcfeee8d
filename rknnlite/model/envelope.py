"""Encryption envelope for model files (AES-256-GCM in authenticated chunks).

The envelope wraps *any* payload — a portable rknnlite model or a Rockchip
``.rknn`` file — and is opened in memory only: :func:`decrypt` never writes
plaintext to disk, it fills one ``bytearray`` of exactly the payload size.

File layout (all integers little-endian; offsets in bytes)::

    offset  size  field
    ------  ----  -----------------------------------------------------------
         0     8  magic  b"RKLCRYPT"
         8     2  format version (u16) = 1
        10     2  flags (u16): bit 0 = passphrase key (else raw 32-byte key),
                  bit 1 = device-bound; all other bits must be 0
        12     4  chunk size (u32): plaintext bytes per chunk, 16 B .. 1 GiB
        16     8  payload size (u64): plaintext bytes in total
        24     1  scrypt log2(N)  (0 for a raw key; 10..20 for a passphrase)
        25     1  scrypt r        (0 for a raw key; 1..32)
        26     1  scrypt p        (0 for a raw key; 1..16)
        27     5  reserved, must be 0
        32    32  random per-file salt
        64    16  key check:  HKDF-SHA256(master, salt, "...key-check")
        80    16  file check: last 16 bytes of the file-key HKDF output below
        96    16  header digest: SHA-256(bytes 0..95)[:16]
       112        chunk 0, chunk 1, ... chunk n-1

    chunk i = AES-256-GCM(ciphertext of min(chunk size, rest) bytes) || 16-byte tag
    n       = max(1, ceil(payload size / chunk size))   (an empty payload has one
              empty final chunk, so even it carries a tag)
    total   = 112 + payload size + 16 * n   (checked exactly against the buffer)

Key schedule:

* ``master`` is the raw 32-byte key, or ``scrypt(passphrase, salt, N, r, p)``
  (32 bytes) for a passphrase.
* ``key check = HKDF-SHA256(ikm=master, salt=salt,
  info="rknnlite envelope v1 key-check", 16 bytes)`` — independent of the
  device, so a wrong key is told apart from a wrong device.
* ``HKDF-SHA256(ikm=master, salt=salt, info="rknnlite envelope v1 file-key"
  || flags (u16) || device tag, 48 bytes)`` gives the per-file AES-256 key
  (first 32 bytes) and the file check (last 16).  ``device tag`` is empty for
  an unbound file, else ``SHA-256("rknnlite device id" || 0x00 || identity)``.
  The random salt makes every file's key different, so nonces never repeat
  across files.
* Chunk ``i`` uses the nonce ``u64_be(i) || 00 00 00 || last`` (``last`` is
  ``01`` for the final chunk, else ``00``) and the whole 112-byte header as
  associated data (STREAM construction): a reordered, dropped, truncated or
  appended chunk, or any edit of the header, fails authentication.

Error reporting: anything wrong with the bytes (bad magic, corrupted header,
wrong length, failed tag) raises :class:`~rknnlite.errors.DecryptError`; a key
that does not open the file (wrong key or passphrase, wrong kind of key, a
device-bound file on another board) raises :class:`~rknnlite.errors.KeyInvalidError`.
The header digest catches accidental header damage before the key checks run,
so a damaged header is not reported as a wrong key.  All size fields are
validated against the actual buffer length before anything is allocated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import struct
import unicodedata
from dataclasses import dataclass
from typing import Optional, Tuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from ..errors import DecryptError, DeviceUnavailableError, InvalidParamError, KeyInvalidError
from .source import open_source

__all__ = [
    "MAGIC",
    "VERSION",
    "HEADER_SIZE",
    "TAG_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "MIN_CHUNK_SIZE",
    "MAX_CHUNK_SIZE",
    "KEY_SIZE",
    "KEY_ENV_VAR",
    "DEVICE_ID_PATHS",
    "ModelKey",
    "EnvelopeInfo",
    "resolve_key",
    "generate_key",
    "write_key_file",
    "device_identity",
    "is_encrypted",
    "encrypt",
    "decrypt",
    "envelope_info",
    "rekey",
]

#: The 8 bytes every envelope starts with (never ``RKNN...`` nor ``CYPTRKNN``).
MAGIC = b"RKLCRYPT"
#: The envelope format version this module writes and the newest it reads.
VERSION = 1
#: Size of the fixed header in bytes.
HEADER_SIZE = 112
#: Size of each chunk's GCM tag in bytes.
TAG_SIZE = 16
#: Plaintext bytes per chunk when ``encrypt`` is not told otherwise (1 MiB).
DEFAULT_CHUNK_SIZE = 1 << 20
#: Smallest accepted chunk size in bytes.
MIN_CHUNK_SIZE = 16
#: Largest accepted chunk size in bytes (1 GiB).
MAX_CHUNK_SIZE = 1 << 30
#: Length of a raw key in bytes (AES-256).
KEY_SIZE = 32
#: Environment variable consulted when no key is given.
KEY_ENV_VAR = "RKNNLITE_MODEL_KEY"
#: Files read, in order, for the board identity (tests may monkeypatch this tuple).
DEVICE_ID_PATHS: Tuple[str, ...] = ("/proc/device-tree/serial-number", "/etc/machine-id")

_FLAG_PASSPHRASE = 0x1
_FLAG_DEVICE_BOUND = 0x2
_KNOWN_FLAGS = _FLAG_PASSPHRASE | _FLAG_DEVICE_BOUND

# magic, version, flags, chunk size, payload size, log2 N, r, p, 5 reserved, salt
_FIXED = struct.Struct("<8sHHIQBBB5s32s")
_SALT_SIZE = 32
_CHECK_SIZE = 16
_KEY_CHECK_OFF = 64
_FILE_CHECK_OFF = 80
_DIGEST_OFF = 96
assert _FIXED.size == _KEY_CHECK_OFF

_INFO_KEY_CHECK = b"rknnlite envelope v1 key-check"
_INFO_FILE_KEY = b"rknnlite envelope v1 file-key"
_DEVICE_TAG_PREFIX = b"rknnlite device id\x00"

# scrypt: defaults for new files and the bounds a file may ask for.
_SCRYPT_DEFAULT = (15, 8, 1)  # N = 32768, r = 8, p = 1: 32 MiB, ~0.1 s
_SCRYPT_LOG_N_RANGE = (10, 20)
_SCRYPT_R_MAX = 32
_SCRYPT_P_MAX = 16
_SCRYPT_MAX_MEMORY = 256 << 20  # bytes: 128 * r * N
_SCRYPT_MAX_WORK = 1 << 22  # N * r * p (about 2.5 s on a desktop core)

_KEY_FILE_MAX = 4096  # a key file bigger than this is certainly not a key file


# --------------------------------------------------------------------------- keys


class ModelKey:
    """An immutable key for the envelope: a raw 32-byte key or a passphrase.

    Build one with :meth:`raw`, :meth:`from_string`, :meth:`from_file`,
    :meth:`from_env` or :meth:`passphrase`; the plain constructor is private.
    The secret is kept in a ``bytes`` copy and never shown by ``repr``.

    Attributes:
        kind: ``"raw"`` or ``"passphrase"``.
        scrypt_params: ``(log2 N, r, p)`` used when *encrypting* with a
            passphrase, ``None`` for a raw key.  Decryption always uses the
            parameters stored in the file.
    """

    __slots__ = ("kind", "scrypt_params", "_secret")

    kind: str
    scrypt_params: Optional[Tuple[int, int, int]]
    _secret: bytes

    def __init__(self, kind: str, secret: bytes, scrypt_params: Optional[Tuple[int, int, int]] = None):
        if kind not in ("raw", "passphrase"):
            raise InvalidParamError(f"key kind must be 'raw' or 'passphrase', not {kind!r}", op="key")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "_secret", bytes(secret))
        object.__setattr__(self, "scrypt_params", scrypt_params)

    def __setattr__(self, name, value):
        raise AttributeError("ModelKey is immutable")

    def __delattr__(self, name):
        raise AttributeError("ModelKey is immutable")

    def __repr__(self) -> str:
        if self.kind == "raw":
            return "ModelKey(kind='raw')"
        log_n, r, p = self.scrypt_params  # type: ignore[misc]
        return f"ModelKey(kind='passphrase', log_n={log_n}, r={r}, p={p})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, ModelKey):
            return NotImplemented
        return (
            self.kind == other.kind
            and self.scrypt_params == other.scrypt_params
            and hmac.compare_digest(self._secret, other._secret)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.scrypt_params, hashlib.sha256(self._secret).digest()))

    def __reduce__(self):
        # Pickling (e.g. to a worker process) carries the secret; __setattr__ is blocked,
        # so rebuild through the constructor.
        return (ModelKey, (self.kind, self._secret, self.scrypt_params))

    # -- constructors

    @classmethod
    def raw(cls, key) -> "ModelKey":
        """A raw key from exactly 32 bytes (``bytes``, ``bytearray`` or ``memoryview``; copied).

        Raises:
            KeyInvalidError: ``key`` is not bytes-like or not 32 bytes long.
        """
        try:
            data = bytes(memoryview(key).cast("B"))
        except TypeError:
            raise KeyInvalidError(
                f"a raw key must be {KEY_SIZE} bytes (bytes-like), not {type(key).__name__}", op="key"
            ) from None
        if len(data) != KEY_SIZE:
            raise KeyInvalidError(
                f"a raw key must be exactly {KEY_SIZE} bytes, got {len(data)} bytes "
                "(for a hex or base64 key use ModelKey.from_string)",
                op="key",
            )
        return cls("raw", data)

    @classmethod
    def from_string(cls, text: str) -> "ModelKey":
        """A raw key from text: 64 hex digits, or base64 (standard or URL-safe) of 32 bytes.

        Whitespace anywhere (spaces, newlines) is ignored; base64 padding may be omitted.

        Raises:
            KeyInvalidError: the text decodes to something other than 32 bytes.
        """
        return cls("raw", _decode_key_text(text, "key string"))

    @classmethod
    def from_file(cls, path) -> "ModelKey":
        """A raw key read from a key file (``str`` or ``os.PathLike``).

        The file holds either exactly 32 raw bytes, or text with 64 hex digits
        or base64 of 32 bytes (surrounding whitespace and newlines tolerated).
        Files larger than 4 KiB are refused without being read.

        Raises:
            KeyInvalidError: the file is missing, unreadable, too large, or its
                content is not a 32-byte key.
        """
        try:
            fspath = os.fspath(path)
        except TypeError:
            raise KeyInvalidError(
                f"a key file path must be str or os.PathLike, not {type(path).__name__}", op="key"
            ) from None
        try:
            with open(fspath, "rb") as f:
                data = f.read(_KEY_FILE_MAX + 1)
        except FileNotFoundError:
            if isinstance(fspath, str) and _looks_like_key_text(fspath):
                # Do not echo what is probably the secret itself.
                raise KeyInvalidError(
                    "key file not found; the string looks like a hex/base64 key itself: "
                    "a str key is a path to a key file, use ModelKey.from_string(...) for key text",
                    op="key",
                ) from None
            raise KeyInvalidError(f"key file not found: {fspath}", op="key") from None
        except OSError as e:
            raise KeyInvalidError(f"cannot read key file {fspath}: {e.strerror or e}", op="key") from None
        if len(data) > _KEY_FILE_MAX:
            raise KeyInvalidError(
                f"{fspath} is too large to be a key file (over {_KEY_FILE_MAX} bytes); expected "
                f"{KEY_SIZE} raw bytes, 64 hex digits or base64 of {KEY_SIZE} bytes",
                op="key",
            )
        if len(data) == KEY_SIZE:
            return cls("raw", data)
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise KeyInvalidError(
                f"key file {fspath} holds {len(data)} bytes that are not text; expected "
                f"{KEY_SIZE} raw bytes, 64 hex digits or base64 of {KEY_SIZE} bytes",
                op="key",
            ) from None
        return cls("raw", _decode_key_text(text, f"key file {fspath}"))

    @classmethod
    def from_env(cls, var: str = KEY_ENV_VAR) -> "ModelKey":
        """A raw key from an environment variable holding 64 hex digits or base64 of 32 bytes.

        Raises:
            KeyInvalidError: the variable is unset or empty, or not a valid key.
        """
        value = os.environ.get(var)
        if value is None or not value.strip():
            raise KeyInvalidError(f"environment variable {var} is not set", op="key")
        return cls("raw", _decode_key_text(value, f"environment variable {var}"))

    @classmethod
    def passphrase(cls, text, *, log_n: int = _SCRYPT_DEFAULT[0], r: int = _SCRYPT_DEFAULT[1],
                   p: int = _SCRYPT_DEFAULT[2]) -> "ModelKey":
        """A passphrase key, stretched with scrypt (N = 2**log_n, r, p) when used.

        ``text`` is a ``str`` (NFC-normalised, then UTF-8 encoded) or bytes.
        ``log_n``, ``r`` and ``p`` only matter when encrypting; they are stored
        in the file.  Bounds: 10 <= log_n <= 20, 1 <= r <= 32, 1 <= p <= 16,
        memory 128*r*N <= 256 MiB, N*r*p <= 2**22.

        Raises:
            KeyInvalidError: the passphrase is empty or not text/bytes.
            InvalidParamError: the scrypt parameters are out of bounds.
        """
        if isinstance(text, str):
            secret = unicodedata.normalize("NFC", text).encode("utf-8")
        elif isinstance(text, (bytes, bytearray, memoryview)):
            secret = bytes(text)
        else:
            raise KeyInvalidError(f"a passphrase must be str or bytes, not {type(text).__name__}", op="key")
        if not secret:
            raise KeyInvalidError("the passphrase is empty", op="key")
        for name, value in (("log_n", log_n), ("r", r), ("p", p)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidParamError(f"scrypt {name} must be an int, not {type(value).__name__}", op="key")
        problem = _scrypt_problem(log_n, r, p)
        if problem:
            raise InvalidParamError(f"scrypt parameters out of bounds: {problem}", op="key")
        return cls("passphrase", secret, (log_n, r, p))


def _looks_like_key_text(text: str) -> bool:
    try:
        _decode_key_text(text, "")
    except KeyInvalidError:
        return False
    return True


def _decode_key_text(text, what: str) -> bytes:
    if not isinstance(text, str):
        raise KeyInvalidError(f"{what} must be str, not {type(text).__name__}", op="key")
    s = "".join(text.split())
    expected = f"expected 64 hex digits or base64 of {KEY_SIZE} bytes"
    if not s:
        raise KeyInvalidError(f"{what} is empty; {expected}", op="key")
    if len(s) == 2 * KEY_SIZE and all(c in "0123456789abcdefABCDEF" for c in s):
        return bytes.fromhex(s)
    if len(s) == 2 * KEY_SIZE:
        raise KeyInvalidError(f"{what} has 64 characters but is not valid hex; {expected}", op="key")
    b64 = s.replace("-", "+").replace("_", "/")
    b64 += "=" * (-len(b64) % 4)
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise KeyInvalidError(
            f"{what} is neither hex nor base64 ({len(s)} characters); {expected}", op="key"
        ) from None
    if len(data) != KEY_SIZE:
        raise KeyInvalidError(
            f"{what} decodes (base64) to {len(data)} bytes, not {KEY_SIZE}; {expected}", op="key"
        )
    return data


def resolve_key(obj) -> Optional[ModelKey]:
    """Turn a ``key=`` argument into a :class:`ModelKey` (or ``None``).

    Accepted: a :class:`ModelKey` (returned as is); ``bytes`` / ``bytearray`` /
    ``memoryview`` of exactly 32 bytes (a raw key, copied); ``str`` or
    ``os.PathLike`` = the path of a key file (see :meth:`ModelKey.from_file`);
    ``None`` = the ``RKNNLITE_MODEL_KEY`` environment variable if it is set,
    else ``None``.

    Raises:
        KeyInvalidError: the key material is malformed (wrong length, bad hex
            or base64, unreadable key file) or of an unsupported type.
    """
    if obj is None:
        value = os.environ.get(KEY_ENV_VAR)
        if value is None or not value.strip():
            return None
        return ModelKey.from_env(KEY_ENV_VAR)
    if isinstance(obj, ModelKey):
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return ModelKey.raw(obj)
    if isinstance(obj, (str, os.PathLike)):
        return ModelKey.from_file(obj)
    raise KeyInvalidError(
        f"key must be 32 bytes, a key file path (str / os.PathLike) or a ModelKey, not {type(obj).__name__}",
        op="key",
    )


def generate_key() -> bytes:
    """Return a new random 32-byte raw key (from the OS CSPRNG)."""
    return secrets.token_bytes(KEY_SIZE)


def write_key_file(path, key, *, fmt: str = "hex", overwrite: bool = False) -> None:
    """Write a raw key to ``path`` with permissions 0o600.

    ``key`` is 32 bytes or a raw :class:`ModelKey`.  ``fmt`` is ``"hex"``
    (64 hex digits and a newline, the default), ``"base64"`` (and a newline)
    or ``"raw"`` (the 32 bytes).  An existing file is refused unless
    ``overwrite`` is true (losing a key loses every model encrypted with it).

    Raises:
        KeyInvalidError: ``key`` is not a raw 32-byte key.
        InvalidParamError: unknown ``fmt``.
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        OSError: the file cannot be written.
    """
    mk = key if isinstance(key, ModelKey) else ModelKey.raw(key)
    if mk.kind != "raw":
        raise KeyInvalidError("only a raw 32-byte key can be written to a key file, not a passphrase", op="key")
    if fmt == "hex":
        data = (mk._secret.hex() + "\n").encode("ascii")
    elif fmt == "base64":
        data = base64.b64encode(mk._secret) + b"\n"
    elif fmt == "raw":
        data = mk._secret
    else:
        raise InvalidParamError(f"fmt must be 'hex', 'base64' or 'raw', not {fmt!r}", op="key")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    flags |= getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(os.fspath(path), flags, 0o600)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # an existing file keeps its old mode otherwise
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
    finally:
        if fd >= 0:
            os.close(fd)


# --------------------------------------------------------------------------- device identity


def device_identity() -> bytes:
    """Return this board's identity: the first non-empty file of :data:`DEVICE_ID_PATHS`.

    By default ``/proc/device-tree/serial-number`` (the SoC serial), else
    ``/etc/machine-id``; NULs and surrounding whitespace are stripped.

    Raises:
        DeviceUnavailableError: none of the files exists or holds an identity.
    """
    tried = []
    for path in DEVICE_ID_PATHS:
        try:
            with open(path, "rb") as f:
                data = f.read(4096)
        except OSError:
            tried.append(path)
            continue
        ident = data.replace(b"\x00", b"").strip()
        if ident:
            return ident
        tried.append(path)
    raise DeviceUnavailableError(
        "no device identity for device binding (tried " + ", ".join(tried or ["no paths"]) + ")",
        op="device_identity",
    )


def _device_tag(bound: bool, device_id) -> bytes:
    if not bound:
        return b""
    if device_id is None:
        ident = device_identity()
    elif isinstance(device_id, str):
        ident = device_id.encode("utf-8")
    elif isinstance(device_id, (bytes, bytearray, memoryview)):
        ident = bytes(device_id)
    else:
        raise InvalidParamError(f"device_id must be bytes or str, not {type(device_id).__name__}", op="envelope")
    if not ident:
        raise InvalidParamError("device_id is empty", op="envelope")
    return hashlib.sha256(_DEVICE_TAG_PREFIX + ident).digest()


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class EnvelopeInfo:
    """What an envelope header says (read without a key).

    Attributes:
        version: format version of the file.
        chunk_size: plaintext bytes per chunk.
        payload_size: plaintext bytes in total (what :func:`decrypt` returns).
        key_kind: ``"raw"`` or ``"passphrase"``.
        device_bound: whether the file only opens on the board it was bound to.
        total_size: the exact byte length the whole envelope must have.
        scrypt_params: ``(log2 N, r, p)`` for a passphrase file, else ``None``.
    """

    version: int
    chunk_size: int
    payload_size: int
    key_kind: str
    device_bound: bool
    total_size: int = 0
    scrypt_params: Optional[Tuple[int, int, int]] = None


def _scrypt_problem(log_n: int, r: int, p: int) -> str:
    lo, hi = _SCRYPT_LOG_N_RANGE
    if not lo <= log_n <= hi:
        return f"log2(N) = {log_n}, expected {lo}..{hi}"
    if not 1 <= r <= _SCRYPT_R_MAX:
        return f"r = {r}, expected 1..{_SCRYPT_R_MAX}"
    if not 1 <= p <= _SCRYPT_P_MAX:
        return f"p = {p}, expected 1..{_SCRYPT_P_MAX}"
    if 128 * r * (1 << log_n) > _SCRYPT_MAX_MEMORY:
        return f"memory 128*r*N = {128 * r << log_n} bytes exceeds {_SCRYPT_MAX_MEMORY}"
    if (r * p) << log_n > _SCRYPT_MAX_WORK:
        return f"work N*r*p = {(r * p) << log_n} exceeds {_SCRYPT_MAX_WORK}"
    return ""


def _n_chunks(payload_size: int, chunk_size: int) -> int:
    return max(1, -(-payload_size // chunk_size))


def _total_size(payload_size: int, chunk_size: int) -> int:
    return HEADER_SIZE + payload_size + TAG_SIZE * _n_chunks(payload_size, chunk_size)


class _Header:
    __slots__ = ("raw", "version", "flags", "chunk_size", "payload_size", "scrypt", "salt", "key_check", "file_check")

    @property
    def passphrase(self) -> bool:
        return bool(self.flags & _FLAG_PASSPHRASE)

    @property
    def device_bound(self) -> bool:
        return bool(self.flags & _FLAG_DEVICE_BOUND)


def _parse_header(view: memoryview, op: str) -> _Header:
    n = len(view)
    if n < len(MAGIC) or view[: len(MAGIC)] != MAGIC:
        raise DecryptError("not an rknnlite encrypted model (bad magic)", op=op)
    if n < 10:
        raise DecryptError(f"truncated envelope header ({n} of {HEADER_SIZE} bytes)", op=op)
    (version,) = struct.unpack_from("<H", view, 8)
    if version > VERSION:
        raise DecryptError(
            f"envelope version {version} is newer than this rknnlite supports (version {VERSION}); "
            "upgrade rknnlite",
            op=op,
        )
    if version < 1:
        raise DecryptError(f"invalid envelope version {version}", op=op)
    if n < HEADER_SIZE:
        raise DecryptError(f"truncated envelope header ({n} of {HEADER_SIZE} bytes)", op=op)
    raw = bytes(view[:HEADER_SIZE])
    if not hmac.compare_digest(hashlib.sha256(raw[:_DIGEST_OFF]).digest()[:16], raw[_DIGEST_OFF:]):
        raise DecryptError("the envelope header is corrupted (header checksum mismatch)", op=op)
    _, _, flags, chunk_size, payload_size, log_n, r, p, reserved, salt = _FIXED.unpack_from(raw)
    if flags & ~_KNOWN_FLAGS:
        raise DecryptError(f"unknown envelope flags 0x{flags:04x}", op=op)
    if reserved != bytes(len(reserved)):
        raise DecryptError("reserved envelope header bytes are not zero", op=op)
    if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
        raise DecryptError(
            f"invalid chunk size {chunk_size} bytes (expected {MIN_CHUNK_SIZE}..{MAX_CHUNK_SIZE})", op=op
        )
    if flags & _FLAG_PASSPHRASE:
        problem = _scrypt_problem(log_n, r, p)
        if problem:
            raise DecryptError(f"refusing the file's scrypt parameters: {problem}", op=op)
    elif log_n or r or p:
        raise DecryptError("scrypt parameters set in an envelope with a raw key", op=op)
    h = _Header()
    h.raw = raw
    h.version = version
    h.flags = flags
    h.chunk_size = chunk_size
    h.payload_size = payload_size
    h.scrypt = (log_n, r, p)
    h.salt = salt
    h.key_check = raw[_KEY_CHECK_OFF:_FILE_CHECK_OFF]
    h.file_check = raw[_FILE_CHECK_OFF:_DIGEST_OFF]
    return h


def _master(key: ModelKey, salt: bytes, scrypt_params) -> bytes:
    if key.kind == "raw":
        return key._secret
    log_n, r, p = scrypt_params
    return Scrypt(salt=salt, length=KEY_SIZE, n=1 << log_n, r=r, p=p).derive(key._secret)


def _derive(master: bytes, salt: bytes, flags: int, device_tag: bytes) -> Tuple[bytes, bytes, bytes]:
    """(key check, AES key, file check) for one file."""
    key_check = HKDF(hashes.SHA256(), _CHECK_SIZE, salt, _INFO_KEY_CHECK).derive(master)
    info = _INFO_FILE_KEY + struct.pack("<H", flags) + device_tag
    okm = HKDF(hashes.SHA256(), KEY_SIZE + _CHECK_SIZE, salt, info).derive(master)
    return key_check, okm[:KEY_SIZE], okm[KEY_SIZE:]


def _nonce(index: int, last: bool) -> bytes:
    return index.to_bytes(8, "big") + (b"\x00\x00\x00\x01" if last else b"\x00\x00\x00\x00")


def _as_view(obj, op: str) -> memoryview:
    try:
        return open_source(obj).view
    except TypeError:
        raise InvalidParamError(
            f"expected a bytes-like object or a path, not {type(obj).__name__}", op=op
        ) from None


def _require_key(key, op: str, missing: str) -> ModelKey:
    mk = resolve_key(key)
    if mk is None:
        raise KeyInvalidError(missing, op=op)
    return mk


# --------------------------------------------------------------------------- public API


def is_encrypted(buf) -> bool:
    """Whether ``buf`` starts with the envelope magic ``b"RKLCRYPT"``.

    ``buf`` is any bytes-like object (nothing is copied), or a path (only the
    first 8 bytes are read; a file that cannot be read gives ``False``, so
    opening it reports the real error).  Only the magic is checked: use
    :func:`envelope_info` to validate the header.
    """
    if isinstance(buf, (str, os.PathLike)):
        try:
            with open(buf, "rb") as f:
                return f.read(len(MAGIC)) == MAGIC
        except OSError:
            return False
    try:
        view = memoryview(buf)
    except TypeError:
        return False
    if view.ndim != 1 or view.itemsize != 1:
        if not view.c_contiguous:
            return False
        view = view.cast("B")
    return len(view) >= len(MAGIC) and view[: len(MAGIC)] == MAGIC


def envelope_info(buf) -> EnvelopeInfo:
    """Parse and validate only the header of an envelope (no key needed).

    ``buf`` is bytes-like or a path (memory-mapped, not read); it may be just
    the first :data:`HEADER_SIZE` bytes.  The total length is *not* checked
    here (``total_size`` says what it must be).

    Raises:
        DecryptError: bad magic, truncated or corrupted header, unsupported
            (newer) version, or invalid field values.
    """
    h = _parse_header(_as_view(buf, "envelope_info"), "envelope_info")
    return EnvelopeInfo(
        version=h.version,
        chunk_size=h.chunk_size,
        payload_size=h.payload_size,
        key_kind="passphrase" if h.passphrase else "raw",
        device_bound=h.device_bound,
        total_size=_total_size(h.payload_size, h.chunk_size),
        scrypt_params=h.scrypt if h.passphrase else None,
    )


def encrypt(payload, key, *, bind_device: bool = False, chunk_size: int = DEFAULT_CHUNK_SIZE,
            device_id=None) -> bytes:
    """Encrypt ``payload`` into a new envelope and return it as ``bytes``.

    Args:
        payload: the plaintext — any bytes-like object, or a path (memory-mapped).
        key: anything :func:`resolve_key` accepts, e.g. 32 bytes, a key-file
            path or a :class:`ModelKey` (``ModelKey.passphrase(...)`` for a
            passphrase).  ``None`` uses ``RKNNLITE_MODEL_KEY``.
        bind_device: mix this board's identity into the key, so the file only
            opens here (see :func:`device_identity`).
        chunk_size: plaintext bytes per authenticated chunk (16 B .. 1 GiB).
        device_id: identity to bind to instead of :func:`device_identity`
            (bytes or str); only allowed together with ``bind_device=True``.

    The output (``112 + len(payload) + 16 * chunks`` bytes) is built in one
    ``bytearray`` and copied once into the returned ``bytes``.

    Raises:
        KeyInvalidError: no key, or malformed key material.
        InvalidParamError: bad ``chunk_size`` or ``device_id``.
        DeviceUnavailableError: binding requested and no identity is available.
    """
    op = "encrypt"
    mk = _require_key(key, op, f"encrypt needs a key: pass key= or set {KEY_ENV_VAR}")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or not (
        MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE
    ):
        raise InvalidParamError(
            f"chunk_size must be an int in {MIN_CHUNK_SIZE}..{MAX_CHUNK_SIZE} bytes, got {chunk_size!r}", op=op
        )
    if device_id is not None and not bind_device:
        raise InvalidParamError("device_id is only meaningful with bind_device=True", op=op)
    view = _as_view(payload, op)
    flags = (_FLAG_PASSPHRASE if mk.kind == "passphrase" else 0) | (_FLAG_DEVICE_BOUND if bind_device else 0)
    device_tag = _device_tag(bind_device, device_id)
    return bytes(_seal(view, mk, flags, chunk_size, device_tag))


def _seal(view: memoryview, mk: ModelKey, flags: int, chunk_size: int, device_tag: bytes) -> bytearray:
    payload_size = len(view)
    salt = secrets.token_bytes(_SALT_SIZE)
    scrypt = mk.scrypt_params if mk.kind == "passphrase" else (0, 0, 0)
    key_check, aes_key, file_check = _derive(_master(mk, salt, scrypt), salt, flags, device_tag)
    head = _FIXED.pack(MAGIC, VERSION, flags, chunk_size, payload_size, *scrypt, bytes(5), salt)
    head += key_check + file_check
    head += hashlib.sha256(head).digest()[:16]
    assert len(head) == HEADER_SIZE

    out = bytearray(_total_size(payload_size, chunk_size))
    out[:HEADER_SIZE] = head
    dst = memoryview(out)
    aead = AESGCM(aes_key)
    n = _n_chunks(payload_size, chunk_size)
    src_off, dst_off = 0, HEADER_SIZE
    for i in range(n):
        size = min(chunk_size, payload_size - src_off)
        _encrypt_into(aead, _nonce(i, i == n - 1), view[src_off:src_off + size], head,
                      dst[dst_off:dst_off + size + TAG_SIZE])
        src_off += size
        dst_off += size + TAG_SIZE
    return out


def decrypt(buf, key, *, device_id=None) -> bytearray:
    """Decrypt an envelope in memory and return the payload.

    Args:
        buf: the envelope — any bytes-like object (not copied) or a path
            (memory-mapped, not read into the heap).
        key: anything :func:`resolve_key` accepts; ``None`` uses
            ``RKNNLITE_MODEL_KEY``.
        device_id: identity to check a device-bound file against instead of
            :func:`device_identity` (ignored for unbound files).

    Returns a ``bytearray`` of exactly the payload size, allocated once (after
    every size field has been checked against ``len(buf)``) and filled chunk by
    chunk.  Nothing is written to disk.  On failure the partly filled buffer is
    zeroed before the exception propagates.

    Raises:
        DecryptError: not an envelope, newer version, corrupted header, wrong
            length (truncated / appended bytes), or a chunk that fails
            authentication (tampered, reordered, dropped).
        KeyInvalidError: no key, malformed key material, wrong key or
            passphrase, wrong kind of key, or a file bound to another device.
        DeviceUnavailableError: the file is device-bound and this machine has
            no identity.
    """
    return _open(buf, key, device_id, "decrypt")[0]


def _open(buf, key, device_id, op: str) -> Tuple[bytearray, _Header]:
    view = _as_view(buf, op)
    h = _parse_header(view, op)
    total = _total_size(h.payload_size, h.chunk_size)
    if len(view) < total:
        raise DecryptError(
            f"the encrypted model is truncated: {len(view)} bytes, the header promises {total}", op=op
        )
    if len(view) > total:
        raise DecryptError(
            f"{len(view) - total} unexpected bytes after the last chunk ({len(view)} bytes, expected {total})",
            op=op,
        )
    mk = _require_key(
        key, op, f"the model is encrypted: pass a key (key=/key_path=) or set {KEY_ENV_VAR}"
    )
    if h.passphrase and mk.kind != "passphrase":
        raise KeyInvalidError("the model is encrypted with a passphrase, but a raw key was given", op=op)
    if not h.passphrase and mk.kind != "raw":
        raise KeyInvalidError("the model is encrypted with a raw 32-byte key, but a passphrase was given", op=op)
    if h.device_bound:
        try:
            device_tag = _device_tag(True, device_id)
        except DeviceUnavailableError as e:
            raise DeviceUnavailableError(
                f"the model is bound to a device, but this machine has no identity: {e.message}", op=op
            ) from None
    else:
        device_tag = b""
    key_check, aes_key, file_check = _derive(_master(mk, h.salt, h.scrypt), h.salt, h.flags, device_tag)
    if not hmac.compare_digest(key_check, h.key_check):
        what = "passphrase" if h.passphrase else "key"
        raise KeyInvalidError(f"wrong {what}: it does not open this encrypted model", op=op)
    if not hmac.compare_digest(file_check, h.file_check):
        if h.device_bound:
            raise KeyInvalidError(
                "the key is right but the model is bound to another device (this board's identity differs)",
                op=op,
            )
        raise DecryptError("the envelope header does not match its key (file check failed)", op=op)

    size = h.payload_size
    chunk = h.chunk_size
    out = bytearray(size)
    dst = memoryview(out)
    aead = AESGCM(aes_key)
    aad = h.raw
    n = _n_chunks(size, chunk)
    src_off, dst_off = HEADER_SIZE, 0
    i = 0
    try:
        for i in range(n):
            m = min(chunk, size - dst_off)
            _decrypt_into(aead, _nonce(i, i == n - 1), view[src_off:src_off + m + TAG_SIZE], aad,
                          dst[dst_off:dst_off + m])
            src_off += m + TAG_SIZE
            dst_off += m
    except InvalidTag:
        _wipe(dst, min(size, dst_off + chunk))
        dst.release()
        raise DecryptError(
            f"chunk {i} of {n} failed authentication: the encrypted model was tampered with, "
            "reordered or truncated",
            op=op,
        ) from None
    except BaseException:
        _wipe(dst, size)
        raise
    dst.release()
    return out, h


def _wipe(dst: memoryview, end: int) -> None:
    zeros = bytes(min(end, 1 << 20))
    off = 0
    while off < end:
        m = min(len(zeros), end - off)
        dst[off:off + m] = zeros[:m]
        off += m


def rekey(buf, old_key, new_key, *, bind_device: Optional[bool] = None, device_id=None) -> bytes:
    """Re-encrypt an envelope under ``new_key`` and return the new envelope (``bytes``).

    The payload is decrypted in memory with ``old_key`` and sealed again with a
    fresh salt; the chunk size is kept.  ``bind_device=None`` keeps the
    original binding, ``True``/``False`` sets it.  ``device_id`` overrides the
    board identity for both the old and the new binding.  The intermediate
    plaintext is zeroed before returning.

    Raises:
        the errors of :func:`decrypt` (for ``old_key``) and :func:`encrypt`
        (for ``new_key``).
    """
    op = "rekey"
    plain, h = _open(buf, old_key, device_id, op)
    try:
        mk = _require_key(new_key, op, f"rekey needs a new key: pass new_key or set {KEY_ENV_VAR}")
        bound = h.device_bound if bind_device is None else bool(bind_device)
        flags = (_FLAG_PASSPHRASE if mk.kind == "passphrase" else 0) | (_FLAG_DEVICE_BOUND if bound else 0)
        device_tag = _device_tag(bound, device_id)
        return bytes(_seal(memoryview(plain), mk, flags, h.chunk_size, device_tag))
    finally:
        _wipe(memoryview(plain), len(plain))


def _encrypt_into(aead, nonce: bytes, data, aad: bytes, out: memoryview) -> None:
    """``AESGCM.encrypt_into`` where cryptography has it (no intermediate copy), else
    ``encrypt`` and one copy (cryptography < 44, e.g. Debian 13's 43)."""
    if hasattr(aead, "encrypt_into"):
        aead.encrypt_into(nonce, data, aad, out)
    else:
        out[:] = aead.encrypt(nonce, bytes(data), aad)


def _decrypt_into(aead, nonce: bytes, data, aad: bytes, out: memoryview) -> None:
    """``AESGCM.decrypt_into`` where cryptography has it, else ``decrypt`` and one copy."""
    if hasattr(aead, "decrypt_into"):
        aead.decrypt_into(nonce, data, aad, out)
    else:
        out[:] = aead.decrypt(nonce, bytes(data), aad)
