"""Tests for the model encryption envelope (rknnlite.model.envelope)."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import stat
import struct
import sys
import tracemalloc

import pytest

from rknnlite.errors import (
    DecryptError,
    DeviceUnavailableError,
    InvalidParamError,
    KeyInvalidError,
    ModelInvalidError,
)
from rknnlite.model import envelope as env
from rknnlite.model.envelope import (
    HEADER_SIZE,
    KEY_ENV_VAR,
    MAGIC,
    TAG_SIZE,
    EnvelopeInfo,
    ModelKey,
    decrypt,
    device_identity,
    encrypt,
    envelope_info,
    generate_key,
    is_encrypted,
    rekey,
    resolve_key,
    write_key_file,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
CHUNK = 64


def fast_pass(text="correct horse battery staple"):
    """A passphrase key with cheap scrypt parameters (tests only)."""
    return ModelKey.passphrase(text, log_n=10, r=1, p=1)


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV_VAR, raising=False)


def payload(n, seed=0):
    return random.Random(seed).randbytes(n) if hasattr(random.Random, "randbytes") else os.urandom(n)


def chunk_offsets(blob, chunk):
    """[(start, end)] of each sealed chunk (ciphertext + tag) in an envelope."""
    info = envelope_info(blob)
    out, pos, left = [], HEADER_SIZE, info.payload_size
    n = max(1, -(-left // chunk))
    for _ in range(n):
        m = min(chunk, left)
        out.append((pos, pos + m + TAG_SIZE))
        pos += m + TAG_SIZE
        left -= m
    assert pos == len(blob)
    return out


def reheader(blob, *, version=None, flags=None, chunk_size=None, payload_size=None, scrypt=None,
             reserved=None):
    """Rewrite header fields and fix the header digest (simulates a crafted file)."""
    fmt = struct.Struct("<8sHHIQBBB5s")
    magic, ver, fl, cs, ps, ln, r, p, res = fmt.unpack_from(blob)
    ver = ver if version is None else version
    fl = fl if flags is None else flags
    cs = cs if chunk_size is None else chunk_size
    ps = ps if payload_size is None else payload_size
    ln, r, p = (ln, r, p) if scrypt is None else scrypt
    res = res if reserved is None else reserved
    head = bytearray(blob[:HEADER_SIZE])
    head[: fmt.size] = fmt.pack(magic, ver, fl, cs, ps, ln, r, p, res)
    head[96:112] = hashlib.sha256(bytes(head[:96])).digest()[:16]
    return bytes(head) + bytes(blob[HEADER_SIZE:])


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 64 * 7, 64 * 7 + 5, 1000])
def test_round_trip_sizes_small_chunks(size):
    data = payload(size, size)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    n_chunks = max(1, -(-size // CHUNK))
    assert len(blob) == HEADER_SIZE + size + TAG_SIZE * n_chunks
    assert blob.startswith(MAGIC)
    out = decrypt(blob, KEY)
    assert isinstance(out, bytearray)
    assert out == data
    assert len(out) == size


def test_round_trip_default_chunk_multiple_and_partial():
    for size in (2 << 20, (2 << 20) + 3, 0):
        data = payload(size, 7)
        blob = encrypt(data, KEY)
        assert envelope_info(blob).chunk_size == 1 << 20
        assert decrypt(blob, KEY) == data


def test_ciphertext_differs_per_file():
    data = payload(500)
    a = encrypt(data, KEY, chunk_size=CHUNK)
    b = encrypt(data, KEY, chunk_size=CHUNK)
    assert a != b
    assert data not in a
    assert decrypt(a, KEY) == decrypt(b, KEY) == data


def test_accepts_buffer_types_and_paths(tmp_path):
    data = payload(300)
    for src in (data, bytearray(data), memoryview(data)):
        blob = encrypt(src, KEY, chunk_size=CHUNK)
        for b in (blob, bytearray(blob), memoryview(blob)):
            assert decrypt(b, bytearray(KEY)) == data
    plain = tmp_path / "model.rknn"
    plain.write_bytes(data)
    blob_path = tmp_path / "model.rknn.enc"
    blob_path.write_bytes(encrypt(plain, KEY, chunk_size=CHUNK))
    assert decrypt(blob_path, KEY) == data
    assert decrypt(str(blob_path), memoryview(KEY)) == data
    assert is_encrypted(blob_path)
    assert not is_encrypted(plain)
    assert not is_encrypted(tmp_path / "missing")


def test_decrypt_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = payload(1000)
    blob_path = tmp_path / "m.enc"
    blob_path.write_bytes(encrypt(data, KEY, chunk_size=CHUNK))
    before = sorted(os.listdir(tmp_path))
    assert decrypt(blob_path, KEY) == data
    assert sorted(os.listdir(tmp_path)) == before


# --------------------------------------------------------------------------- key sources


def test_key_file_raw_hex_base64(tmp_path):
    data = payload(200)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    files = {
        "raw": KEY,
        "hex": (KEY.hex() + "\n").encode(),
        "hex_upper_spaced": ("  " + " ".join(KEY.hex().upper()[i:i + 8] for i in range(0, 64, 8)) + "\r\n").encode(),
        "b64": base64.b64encode(KEY) + b"\n",
        "b64url_nopad": base64.urlsafe_b64encode(KEY).rstrip(b"="),
    }
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert decrypt(blob, path) == data, name
        assert decrypt(blob, str(path)) == data, name
        assert decrypt(blob, ModelKey.from_file(path)) == data, name


def test_key_strings():
    data = payload(100)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    for text in (KEY.hex(), KEY.hex().upper(), base64.b64encode(KEY).decode(),
                 base64.urlsafe_b64encode(KEY).decode().rstrip("="), "\n" + KEY.hex() + "\n"):
        assert decrypt(blob, ModelKey.from_string(text)) == data


def test_env_var_key(monkeypatch):
    data = payload(100)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    monkeypatch.setenv(KEY_ENV_VAR, KEY.hex())
    assert decrypt(blob, None) == data
    assert resolve_key(None) == ModelKey.raw(KEY)
    monkeypatch.setenv(KEY_ENV_VAR, base64.b64encode(KEY).decode() + "\n")
    assert decrypt(blob, None) == data
    assert decrypt(blob, ModelKey.from_env()) == data
    monkeypatch.setenv("MY_KEY", KEY.hex())
    assert decrypt(blob, ModelKey.from_env("MY_KEY")) == data
    # encrypt with the env key too
    assert decrypt(encrypt(data, None, chunk_size=CHUNK), KEY) == data


def test_no_key_and_no_env():
    blob = encrypt(b"abc", KEY, chunk_size=CHUNK)
    assert resolve_key(None) is None
    with pytest.raises(KeyInvalidError) as ei:
        decrypt(blob, None)
    assert "pass a key (key=/key_path=) or set RKNNLITE_MODEL_KEY" in str(ei.value)
    with pytest.raises(KeyInvalidError):
        encrypt(b"abc", None)
    with pytest.raises(KeyInvalidError, match="not set"):
        ModelKey.from_env()


def test_passphrase_round_trip_and_wrong_passphrase():
    data = payload(1000)
    blob = encrypt(data, fast_pass(), chunk_size=CHUNK)
    info = envelope_info(blob)
    assert info.key_kind == "passphrase"
    assert info.scrypt_params == (10, 1, 1)
    assert decrypt(blob, fast_pass()) == data
    # decryption uses the file's parameters, not the key's
    assert decrypt(blob, ModelKey.passphrase("correct horse battery staple")) == data
    with pytest.raises(KeyInvalidError, match="passphrase"):
        decrypt(blob, fast_pass("wrong horse"))
    with pytest.raises(KeyInvalidError, match="passphrase"):
        decrypt(blob, KEY)


def test_passphrase_unicode_normalised():
    blob = encrypt(b"x" * 10, fast_pass("caf\u00e9"), chunk_size=CHUNK)
    assert decrypt(blob, fast_pass("cafe\u0301")) == b"x" * 10


def test_default_passphrase_params():
    key = ModelKey.passphrase("pw")
    assert key.kind == "passphrase" and key.scrypt_params == (15, 8, 1)


def test_raw_file_given_passphrase():
    blob = encrypt(b"abc", KEY, chunk_size=CHUNK)
    with pytest.raises(KeyInvalidError, match="raw"):
        decrypt(blob, fast_pass())


def test_wrong_key():
    data = payload(500)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    with pytest.raises(KeyInvalidError, match="wrong key"):
        decrypt(blob, OTHER_KEY)
    with pytest.raises(KeyInvalidError):
        decrypt(encrypt(b"", KEY), OTHER_KEY)


@pytest.mark.parametrize(
    "bad",
    [b"", KEY[:31], KEY + b"\0", KEY.hex().encode(), bytearray(16), 12345, 1.5, [1, 2]],
)
def test_bad_key_material_objects(bad):
    with pytest.raises(KeyInvalidError):
        resolve_key(bad)


def test_bad_key_error_messages():
    with pytest.raises(KeyInvalidError, match="32 bytes, got 31"):
        resolve_key(KEY[:31])
    with pytest.raises(KeyInvalidError, match="not valid hex"):
        ModelKey.from_string("g" * 64)
    with pytest.raises(KeyInvalidError, match="neither hex nor base64"):
        ModelKey.from_string("not a key!!")
    with pytest.raises(KeyInvalidError, match="16 bytes, not 32"):
        ModelKey.from_string(base64.b64encode(bytes(16)).decode())
    with pytest.raises(KeyInvalidError, match="empty"):
        ModelKey.from_string("  \n")
    with pytest.raises(KeyInvalidError):
        ModelKey.from_string(KEY.hex()[:-2])
    with pytest.raises(KeyInvalidError, match="empty"):
        ModelKey.passphrase("")
    with pytest.raises(InvalidParamError):
        ModelKey.passphrase("pw", log_n=30)
    with pytest.raises(InvalidParamError):
        ModelKey.passphrase("pw", log_n=20, r=32)


def test_bad_key_files(tmp_path, monkeypatch):
    missing = tmp_path / "nope.key"
    with pytest.raises(KeyInvalidError, match="not found"):
        resolve_key(missing)
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"")
    with pytest.raises(KeyInvalidError, match="empty"):
        resolve_key(empty)
    short = tmp_path / "short.key"
    short.write_bytes(KEY[:20])
    with pytest.raises(KeyInvalidError):
        resolve_key(short)
    binary = tmp_path / "bin.key"
    binary.write_bytes(b"\xff" * 40)
    with pytest.raises(KeyInvalidError, match="not text"):
        resolve_key(binary)
    big = tmp_path / "big.key"
    big.write_bytes(b"0" * 10000)
    with pytest.raises(KeyInvalidError, match="too large"):
        resolve_key(big)
    with pytest.raises(KeyInvalidError, match="cannot read"):
        resolve_key(tmp_path)  # a directory
    # a hex key passed as a str is taken for a path; the message must not echo it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KeyInvalidError) as ei:
        resolve_key(KEY.hex())
    assert KEY.hex() not in str(ei.value)
    assert "from_string" in str(ei.value)
    monkeypatch.setenv(KEY_ENV_VAR, "zz")
    with pytest.raises(KeyInvalidError, match=KEY_ENV_VAR):
        resolve_key(None)


def test_model_key_immutable_and_repr():
    k = ModelKey.raw(KEY)
    with pytest.raises(AttributeError):
        k.kind = "passphrase"
    with pytest.raises(AttributeError):
        k._secret = b""
    assert KEY.hex() not in repr(k) and "raw" in repr(k)
    p = ModelKey.passphrase("hunter2", log_n=10, r=1, p=1)
    assert "hunter2" not in repr(p)
    assert ModelKey.raw(KEY) == ModelKey.from_string(KEY.hex())
    assert ModelKey.raw(KEY) != ModelKey.raw(OTHER_KEY)
    assert hash(ModelKey.raw(KEY)) == hash(ModelKey.from_string(KEY.hex()))
    assert resolve_key(k) is k
    import copy
    import pickle

    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(k) == k


def test_generate_and_write_key_file(tmp_path):
    key = generate_key()
    assert isinstance(key, bytes) and len(key) == 32
    assert generate_key() != key
    data = payload(100)
    blob = encrypt(data, key, chunk_size=CHUNK)
    for fmt in ("hex", "base64", "raw"):
        path = tmp_path / f"k.{fmt}"
        write_key_file(path, key, fmt=fmt)
        if sys.platform != "win32":
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert decrypt(blob, path) == data
    with pytest.raises(FileExistsError):
        write_key_file(tmp_path / "k.hex", key)
    (tmp_path / "loose.key").write_bytes(b"old")
    os.chmod(tmp_path / "loose.key", 0o644)
    write_key_file(tmp_path / "loose.key", ModelKey.raw(key), overwrite=True)
    if sys.platform != "win32":
        assert stat.S_IMODE(os.stat(tmp_path / "loose.key").st_mode) == 0o600
    assert decrypt(blob, tmp_path / "loose.key") == data
    with pytest.raises(KeyInvalidError):
        write_key_file(tmp_path / "x.key", KEY[:5])
    with pytest.raises(KeyInvalidError):
        write_key_file(tmp_path / "y.key", fast_pass())
    with pytest.raises(InvalidParamError):
        write_key_file(tmp_path / "z.key", key, fmt="pem")


# --------------------------------------------------------------------------- device binding


def test_device_bound_with_explicit_id():
    data = payload(300)
    blob = encrypt(data, KEY, bind_device=True, device_id=b"board-A", chunk_size=CHUNK)
    assert envelope_info(blob).device_bound
    assert decrypt(blob, KEY, device_id=b"board-A") == data
    assert decrypt(blob, KEY, device_id="board-A") == data
    with pytest.raises(KeyInvalidError, match="bound to another device"):
        decrypt(blob, KEY, device_id=b"board-B")
    # wrong key is still reported as a wrong key
    with pytest.raises(KeyInvalidError, match="wrong key"):
        decrypt(blob, OTHER_KEY, device_id=b"board-A")


def test_device_id_requires_bind_device():
    with pytest.raises(InvalidParamError):
        encrypt(b"abc", KEY, device_id=b"board-A")


def test_unbound_file_ignores_device_id():
    blob = encrypt(b"abc" * 50, KEY, chunk_size=CHUNK)
    assert not envelope_info(blob).device_bound
    assert decrypt(blob, KEY, device_id=b"whatever") == b"abc" * 50


def test_device_identity_paths(tmp_path, monkeypatch):
    serial = tmp_path / "serial-number"
    machine_id = tmp_path / "machine-id"
    serial.write_bytes(b"c3d4e5f6a7b8\x00")
    machine_id.write_bytes(b"0123456789abcdef\n")
    monkeypatch.setattr(env, "DEVICE_ID_PATHS", (str(serial), str(machine_id)))
    assert device_identity() == b"c3d4e5f6a7b8"

    data = payload(400)
    blob = encrypt(data, KEY, bind_device=True, chunk_size=CHUNK)
    assert decrypt(blob, KEY) == data
    assert decrypt(blob, KEY, device_id=b"c3d4e5f6a7b8") == data

    # another board: different serial
    serial.write_bytes(b"ffffffffffff\x00")
    with pytest.raises(KeyInvalidError, match="bound to another device"):
        decrypt(blob, KEY)

    # no serial: falls back to machine-id (different identity -> refused)
    serial.unlink()
    assert device_identity() == b"0123456789abcdef"
    with pytest.raises(KeyInvalidError, match="bound to another device"):
        decrypt(blob, KEY)

    # an empty serial file is skipped as well
    serial.write_bytes(b"\x00\n")
    assert device_identity() == b"0123456789abcdef"

    # nothing at all
    serial.unlink()
    machine_id.unlink()
    with pytest.raises(DeviceUnavailableError):
        device_identity()
    with pytest.raises(DeviceUnavailableError):
        encrypt(data, KEY, bind_device=True)
    with pytest.raises(DeviceUnavailableError):
        decrypt(blob, KEY)
    # an unbound file does not need an identity
    assert decrypt(encrypt(data, KEY, chunk_size=CHUNK), KEY) == data


# --------------------------------------------------------------------------- tampering


@pytest.fixture(scope="module")
def sealed():
    data = payload(64 * 6 + 17, 99)
    return data, encrypt(data, KEY, chunk_size=CHUNK)


def test_flip_every_header_byte(sealed):
    _, blob = sealed
    for pos in range(HEADER_SIZE):
        for mask in (0x01, 0x80):
            bad = bytearray(blob)
            bad[pos] ^= mask
            with pytest.raises(DecryptError):
                decrypt(bytes(bad), KEY)


def test_flip_ciphertext_and_tag_bytes(sealed):
    _, blob = sealed
    for start, end in chunk_offsets(blob, CHUNK):
        for pos in (start, (start + end - TAG_SIZE) // 2, end - TAG_SIZE - 1, end - TAG_SIZE, end - 1):
            bad = bytearray(blob)
            bad[pos] ^= 0x04
            with pytest.raises(DecryptError, match="authentication"):
                decrypt(bad, KEY)


def test_tamper_empty_payload():
    blob = encrypt(b"", KEY)
    assert len(blob) == HEADER_SIZE + TAG_SIZE
    assert decrypt(blob, KEY) == bytearray()
    bad = bytearray(blob)
    bad[-1] ^= 1
    with pytest.raises(DecryptError):
        decrypt(bad, KEY)
    with pytest.raises(DecryptError):
        decrypt(blob[:HEADER_SIZE], KEY)


def test_truncation_at_every_chunk_boundary(sealed):
    _, blob = sealed
    for start, end in chunk_offsets(blob, CHUNK):
        for cut in (start, end, end - TAG_SIZE):
            if cut == len(blob):
                continue
            with pytest.raises(DecryptError):
                decrypt(blob[:cut], KEY)
            # even with the wrong key a truncated file is reported as damaged, never a wrong key
            with pytest.raises(DecryptError):
                decrypt(blob[:cut], OTHER_KEY)


def test_truncation_at_random_points(sealed):
    _, blob = sealed
    rng = random.Random(1234)
    cuts = set(range(0, HEADER_SIZE + 2)) | {rng.randrange(len(blob)) for _ in range(300)}
    for cut in sorted(cuts):
        with pytest.raises(DecryptError):
            decrypt(blob[:cut], KEY)


def test_truncated_with_header_rewritten(sealed):
    """Dropping the last chunk and fixing the payload size still fails (header is AAD)."""
    data, blob = sealed
    offsets = chunk_offsets(blob, CHUNK)
    dropped = blob[: offsets[-1][0]]
    forged = reheader(dropped, payload_size=CHUNK * (len(offsets) - 1))
    assert envelope_info(forged).payload_size == CHUNK * (len(offsets) - 1)
    with pytest.raises(DecryptError):
        decrypt(forged, KEY)


def test_drop_last_chunk(sealed):
    _, blob = sealed
    offsets = chunk_offsets(blob, CHUNK)
    with pytest.raises(DecryptError):
        decrypt(blob[: offsets[-1][0]], KEY)


def test_drop_middle_chunk(sealed):
    _, blob = sealed
    (s, e) = chunk_offsets(blob, CHUNK)[2]
    with pytest.raises(DecryptError):
        decrypt(blob[:s] + blob[e:], KEY)


def test_swap_chunks(sealed):
    _, blob = sealed
    offsets = chunk_offsets(blob, CHUNK)
    (a0, a1), (b0, b1) = offsets[1], offsets[3]
    swapped = blob[:a0] + blob[b0:b1] + blob[a1:b0] + blob[a0:a1] + blob[b1:]
    assert len(swapped) == len(blob)
    with pytest.raises(DecryptError, match="chunk 1"):
        decrypt(swapped, KEY)


def test_duplicate_chunk(sealed):
    _, blob = sealed
    offsets = chunk_offsets(blob, CHUNK)
    (a0, a1), (b0, b1) = offsets[0], offsets[1]
    dup = blob[:b0] + blob[a0:a1] + blob[b1:]
    with pytest.raises(DecryptError):
        decrypt(dup, KEY)


def test_append_bytes(sealed):
    _, blob = sealed
    for extra in (b"\0", b"x" * 15, b"y" * 16, b"z" * (CHUNK + TAG_SIZE), blob[HEADER_SIZE:]):
        with pytest.raises(DecryptError, match="unexpected bytes"):
            decrypt(blob + extra, KEY)


def test_splice_chunk_from_other_file():
    data = payload(64 * 4)
    a = encrypt(data, KEY, chunk_size=CHUNK)
    b = encrypt(data, KEY, chunk_size=CHUNK)
    mixed = a[: HEADER_SIZE + CHUNK + TAG_SIZE] + b[HEADER_SIZE + CHUNK + TAG_SIZE:]
    with pytest.raises(DecryptError):
        decrypt(mixed, KEY)


def test_final_chunk_marker():
    """A file cut at a chunk boundary with a forged shorter payload size is refused."""
    data = payload(64 * 4)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    # keep exactly 2 full chunks, claim a 128-byte payload: chunk 1 was not sealed as final
    cut = blob[: HEADER_SIZE + 2 * (CHUNK + TAG_SIZE)]
    with pytest.raises(DecryptError):
        decrypt(reheader(cut, payload_size=2 * CHUNK), KEY)


# --------------------------------------------------------------------------- crafted headers


@pytest.mark.parametrize(
    "fields",
    [
        {"payload_size": 2**64 - 1},
        {"payload_size": 2**62},
        {"payload_size": 10**12},
        {"chunk_size": 0},
        {"chunk_size": 2**32 - 1},
        {"chunk_size": 1},
        {"payload_size": 2**40, "chunk_size": 16},
    ],
)
def test_absurd_sizes_no_big_allocation(fields):
    blob = encrypt(payload(500), KEY, chunk_size=CHUNK)
    forged = reheader(blob, **fields)
    tracemalloc.start()
    try:
        with pytest.raises(DecryptError):
            decrypt(forged, KEY)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    chunk = fields.get("chunk_size", CHUNK)
    if not 16 <= chunk <= 2**30:
        with pytest.raises(DecryptError, match="chunk size"):
            envelope_info(forged)


def test_crafted_flags_reserved_and_scrypt():
    blob = encrypt(b"abc", KEY, chunk_size=CHUNK)
    with pytest.raises(DecryptError, match="flags"):
        decrypt(reheader(blob, flags=0x80), KEY)
    with pytest.raises(DecryptError, match="reserved"):
        decrypt(reheader(blob, reserved=b"\0\0\0\0\1"), KEY)
    with pytest.raises(DecryptError, match="scrypt"):
        decrypt(reheader(blob, scrypt=(10, 1, 1)), KEY)
    pblob = encrypt(b"abc", fast_pass(), chunk_size=CHUNK)
    # a crafted file must not make scrypt use gigabytes or take minutes
    for params in ((30, 8, 1), (20, 32, 1), (18, 8, 16), (10, 0, 1), (10, 1, 0), (0, 0, 0), (20, 8, 2)):
        with pytest.raises(DecryptError, match="scrypt"):
            decrypt(reheader(pblob, scrypt=params), fast_pass())
    # header claims a passphrase but file was sealed with a raw key -> rejected before any decryption
    with pytest.raises(DecryptError):
        decrypt(reheader(blob, flags=0x1), fast_pass())
    # cleared device-bound flag on a bound file (digest fixed up) is still refused
    bound = encrypt(b"abc" * 40, KEY, bind_device=True, device_id=b"A", chunk_size=CHUNK)
    with pytest.raises((DecryptError, KeyInvalidError)):
        decrypt(reheader(bound, flags=0), KEY)


def test_newer_version_refused():
    blob = encrypt(b"abc", KEY, chunk_size=CHUNK)
    newer = reheader(blob, version=7)
    with pytest.raises(DecryptError) as ei:
        decrypt(newer, KEY)
    msg = str(ei.value)
    assert "version 7" in msg and "version 1" in msg
    with pytest.raises(DecryptError, match="version 7"):
        envelope_info(newer)
    # even a header too short for the rest, as long as the version is there
    with pytest.raises(DecryptError, match="version 7"):
        envelope_info(newer[:12])
    with pytest.raises(DecryptError, match="version 0"):
        envelope_info(reheader(blob, version=0))


# --------------------------------------------------------------------------- info / magic / rekey


def test_envelope_info_fields(tmp_path):
    blob = encrypt(payload(1000), KEY, chunk_size=256)
    info = envelope_info(blob)
    assert info == EnvelopeInfo(
        version=1, chunk_size=256, payload_size=1000, key_kind="raw", device_bound=False,
        total_size=len(blob), scrypt_params=None,
    )
    # only the header is needed
    assert envelope_info(blob[:HEADER_SIZE]) == info
    path = tmp_path / "m.enc"
    path.write_bytes(blob)
    assert envelope_info(path) == info
    with pytest.raises(AttributeError):
        info.version = 2
    bound = envelope_info(encrypt(b"", fast_pass(), bind_device=True, device_id=b"x"))
    assert bound.key_kind == "passphrase" and bound.device_bound and bound.payload_size == 0
    assert bound.chunk_size == 1 << 20


@pytest.mark.parametrize("bad", [b"", b"RKLC", b"RKLCRYPT", MAGIC + b"\1\0", b"RKNN" + bytes(200),
                                 b"CYPTRKNN" + bytes(200)])
def test_envelope_info_invalid(bad):
    with pytest.raises(DecryptError):
        envelope_info(bad)


def test_is_encrypted():
    blob = encrypt(b"abc", KEY)
    assert is_encrypted(blob)
    assert is_encrypted(bytearray(blob))
    assert is_encrypted(memoryview(blob))
    assert is_encrypted(MAGIC)
    assert not is_encrypted(b"RKNN\0\0\0\0" + bytes(100))
    assert not is_encrypted(b"CYPTRKNN" + bytes(100))
    assert not is_encrypted(b"")
    assert not is_encrypted(b"RKLCRYP")
    assert not MAGIC.startswith(b"RKNN") and not MAGIC.startswith(b"CYPTRKNN")


def test_decrypt_non_envelope():
    for bad in (b"RKNN\0\0\0\0" + bytes(300), b"CYPTRKNN" + bytes(300), b""):
        with pytest.raises(DecryptError, match="magic"):
            decrypt(bad, KEY)


def test_errors_hierarchy():
    assert issubclass(DecryptError, ModelInvalidError)
    with pytest.raises(ValueError):
        decrypt(b"garbage", KEY)
    with pytest.raises(ValueError):
        decrypt(encrypt(b"abc", KEY), OTHER_KEY)


def test_rekey():
    data = payload(700)
    blob = encrypt(data, KEY, chunk_size=CHUNK)
    new = rekey(blob, KEY, OTHER_KEY)
    assert isinstance(new, bytes)
    assert decrypt(new, OTHER_KEY) == data
    assert envelope_info(new).chunk_size == CHUNK
    with pytest.raises(KeyInvalidError):
        decrypt(new, KEY)
    with pytest.raises(KeyInvalidError):
        rekey(blob, OTHER_KEY, KEY)
    # to and from a passphrase
    p = rekey(new, OTHER_KEY, fast_pass())
    assert envelope_info(p).key_kind == "passphrase"
    assert decrypt(p, fast_pass()) == data
    back = rekey(p, fast_pass(), KEY)
    assert decrypt(back, KEY) == data


def test_rekey_device_binding():
    data = payload(300)
    bound = encrypt(data, KEY, bind_device=True, device_id=b"A", chunk_size=CHUNK)
    kept = rekey(bound, KEY, OTHER_KEY, device_id=b"A")
    assert envelope_info(kept).device_bound
    assert decrypt(kept, OTHER_KEY, device_id=b"A") == data
    with pytest.raises(KeyInvalidError, match="another device"):
        decrypt(kept, OTHER_KEY, device_id=b"B")
    unbound = rekey(bound, KEY, OTHER_KEY, bind_device=False, device_id=b"A")
    assert not envelope_info(unbound).device_bound
    assert decrypt(unbound, OTHER_KEY) == data
    rebound = rekey(unbound, OTHER_KEY, KEY, bind_device=True, device_id=b"C")
    assert decrypt(rebound, KEY, device_id=b"C") == data
    with pytest.raises(KeyInvalidError):
        rekey(bound, KEY, OTHER_KEY, device_id=b"B")


def test_chunk_size_validation():
    for bad in (0, 15, 2**30 + 1, -1, 1.5, True, "64"):
        with pytest.raises(InvalidParamError):
            encrypt(b"abc", KEY, chunk_size=bad)
    assert decrypt(encrypt(b"abc" * 10, KEY, chunk_size=16), KEY) == b"abc" * 10


def test_round_trip_without_the_into_methods_of_older_cryptography(monkeypatch):
    """cryptography < 44 (Debian 13 ships 43) has no AESGCM.encrypt_into/decrypt_into."""
    from cryptography.hazmat.primitives.ciphers import aead as aead_module

    class OldAESGCM:
        def __init__(self, key):
            self._inner = aead_module.AESGCM(key)

        def encrypt(self, nonce, data, aad):
            return self._inner.encrypt(nonce, data, aad)

        def decrypt(self, nonce, data, aad):
            return self._inner.decrypt(nonce, data, aad)

    from rknnlite.model import envelope

    key = envelope.generate_key()
    payload = bytes(range(256)) * 5000
    modern = envelope.encrypt(payload, key, chunk_size=4096)
    monkeypatch.setattr(envelope, "AESGCM", OldAESGCM)
    old = envelope.encrypt(payload, key, chunk_size=4096)
    assert bytes(envelope.decrypt(modern, key)) == payload
    assert bytes(envelope.decrypt(old, key)) == payload
