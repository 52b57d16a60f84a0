"""Reading a release's .npz files (adapter weights, reference inputs and outputs) within fixed bounds.

A signed release is still input from a publisher whose key may be stolen, so everything it makes the device
read or allocate is bounded before it is read or allocated: the archive's size, its central directory (parsed
from the end record before zipfile reads it, so a million empty members never reach memory), the member count
and names, each member's .npy header (read without pickle, at most MAX_HEADER_BYTES), its dtype (plain numbers
and booleans only: no objects, records or nested arrays), its number of dimensions and its byte count, which
must equal what the member holds. np.load is never used. Anything that does not parse is `malformed`; anything
beyond a bound is `too-large`.
"""
from __future__ import annotations

import math
import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from bridge.updates import reasons

MAX_FILE_BYTES = 64 * 1024 * 1024  # the .npz as stored
MAX_NPZ_BYTES = 64 * 1024 * 1024  # uncompressed, all arrays of one .npz together
MAX_MEMBERS = 64
MAX_DIRECTORY_BYTES = 64 * 1024  # the zip central directory
MAX_HEADER_BYTES = 4096  # one .npy header
MAX_NDIM = 8
NUMBER_KINDS = "biuf"  # bool, signed and unsigned integers, floats (no complex, objects, strings, records)
_END_RECORD = struct.Struct("<4s4H2LH")  # zip "end of central directory" record
_END_SIGNATURE = b"PK\x05\x06"


def read_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    """The arrays of the .npz at `path`, or Malformed / TooLarge naming `what` and the bound."""
    try:
        size = os.stat(path).st_size
        if size > MAX_FILE_BYTES:
            raise reasons.TooLarge(f"{what} is {size} bytes, more than {MAX_FILE_BYTES}")
        with open(path, "rb") as f:
            _check_directory(f, size, what)
            with zipfile.ZipFile(f) as archive:
                infos = _members(archive.infolist(), what)
                return {info.filename[:-4]: _read_member(archive, info, what) for info in infos}
    except reasons.UpdateRefused:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, KeyError, TypeError,
            SyntaxError, RuntimeError, NotImplementedError) as e:
        raise reasons.Malformed(f"{what} is not a readable .npz ({type(e).__name__}: {str(e)[:100]})") from None


def _check_directory(f, size: int, what: str) -> None:
    """Member count and central directory size from the end record, before zipfile parses the directory."""
    tail_len = min(size, _END_RECORD.size + 0xFFFF)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(_END_SIGNATURE)
    if at < 0 or at + _END_RECORD.size > len(tail):
        raise reasons.Malformed(f"{what} is not a zip archive (no end record)")
    _, _, _, _, count, directory_bytes, _, _ = _END_RECORD.unpack_from(tail, at)
    if count > MAX_MEMBERS or directory_bytes > MAX_DIRECTORY_BYTES:
        raise reasons.TooLarge(f"{what} declares {count} members in a {directory_bytes}-byte directory, more than "
                               f"{MAX_MEMBERS} members or {MAX_DIRECTORY_BYTES} bytes")


def _members(infos: list[zipfile.ZipInfo], what: str) -> list[zipfile.ZipInfo]:
    if len(infos) > MAX_MEMBERS:
        raise reasons.TooLarge(f"{what} holds {len(infos)} members, more than {MAX_MEMBERS}")
    names = [info.filename for info in infos]
    if len(set(names)) != len(names) or any(not n.endswith(".npy") or "/" in n or len(n) > 132 for n in names):
        raise reasons.Malformed(f"{what} holds entries that are not distinct plain arrays ({names[:3]})")
    total = sum(info.file_size for info in infos)
    if total > MAX_NPZ_BYTES:
        raise reasons.TooLarge(f"{what} unpacks to {total} bytes, more than {MAX_NPZ_BYTES}")
    return infos


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, what: str) -> np.ndarray:
    """One .npy member: header first (shape and dtype checked), then exactly the bytes they call for."""
    label = f"{what} member {info.filename}"
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member, max_header_size=MAX_HEADER_BYTES)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member, max_header_size=MAX_HEADER_BYTES)
        else:
            raise reasons.Malformed(f"{label} is .npy format {version}, not 1.0 or 2.0")
        if dtype.kind not in NUMBER_KINDS or dtype.fields is not None or dtype.subdtype is not None \
                or dtype.itemsize > 8:
            raise reasons.Malformed(f"{label} has dtype {str(dtype)[:40]}: only plain numbers are allowed")
        if len(shape) > MAX_NDIM or not all(type(d) is int and d >= 0 for d in shape):
            raise reasons.Malformed(f"{label} has shape {str(shape)[:60]}: at most {MAX_NDIM} dimensions")
        nbytes = math.prod(shape) * dtype.itemsize
        left = info.file_size - member.tell()
        if nbytes != left:
            raise reasons.Malformed(f"{label} declares {nbytes} bytes of data ({list(shape)[:8]}), it holds {left}")
        data = member.read(nbytes)
        if len(data) != nbytes:
            raise reasons.Malformed(f"{label} ends after {len(data)} of {nbytes} bytes")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()
