"""A release's own description (the bundle): what TUF leaves to the application, parsed strictly.

The bundle is a signed target of its own (`models/<model>/bundle.json`, hash-pinned by TUF's targets role). It
says which model it is for, its release counter (strictly increasing per model, kept as a floor on the device),
the base model it applies to, the model-contract version, the hardware it was built for, the exact file set
(name, sha256, length) and the reference inputs/outputs for the smoke test. Parsing rejects duplicate keys,
floats where integers belong, integers beyond 2**53, unknown kinds, unknown or missing fields and any file name
that is not a plain name, so two parsers can never read one document differently.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from bridge.updates import reasons

SCHEMA = 1
MAX_BUNDLE_BYTES = 64 * 1024
MAX_INT = 2 ** 53
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MODEL_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
REFERENCE_FILE = "reference.npz"
# kind -> the one main file a release of that kind carries, beside the reference file
KIND_FILES = {"adapter": "adapter.npz", "model": "model.onnx"}
HARDWARE_RE = re.compile(r"any|cpu|cuda|sm[0-9]{2,3}")


@dataclass(frozen=True)
class FileEntry:
    sha256: str  # lowercase hex
    length: int  # bytes


@dataclass(frozen=True)
class Bundle:
    model: str  # registry name, e.g. "lipsync"
    kind: str  # "adapter": weights for the shipped base model's adapter initializers; "model": a whole ONNX file
    release: int  # release counter, >= 1, strictly increasing per model
    contract: int  # model-contract version (inputs, outputs, meaning) the device must speak
    base_sha256: str | None  # sha256 of the shipped model an adapter applies to (None: any, kind "model" only)
    hardware: tuple[str, ...]  # any of these runs it: "any", "cpu", "cuda", "sm89", ...
    tensorrt_major: int | None  # TensorRT major version it was validated with; None: not tied to TensorRT
    files: dict[str, FileEntry] = field(default_factory=dict)  # the exact file set of the release
    atol: float = 1e-3  # smoke test tolerance: |output - reference| <= atol + rtol * |reference|
    rtol: float = 1e-3
    published_utc: str = ""  # ISO-8601 UTC, informational
    notes: str = ""

    @property
    def main_file(self) -> str:
        return KIND_FILES[self.kind]

    def target_path(self, name: str) -> str:
        """TUF target path of one file of this release."""
        return f"models/{self.model}/r{self.release}/{name}"

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "model": self.model, "kind": self.kind, "release": self.release,
                "contract": self.contract, "base_sha256": self.base_sha256, "hardware": list(self.hardware),
                "tensorrt_major": self.tensorrt_major,
                "files": {n: {"sha256": f.sha256, "length": f.length} for n, f in sorted(self.files.items())},
                "reference": {"file": REFERENCE_FILE, "atol": self.atol, "rtol": self.rtol},
                "published_utc": self.published_utc, "notes": self.notes}

    def to_json(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n").encode()


def bundle_target(model: str) -> str:
    """The fixed TUF target path of a model's current bundle (ngclient looks targets up by path)."""
    return f"models/{model}/bundle.json"


def check_name(name: object, what: str = "file name") -> str:
    """`name` if it is a plain file name (no separators, no '..', no leading dot, no NUL), else BadPath."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
        raise reasons.BadPath(f"release {what} {name!r:.80} is not a plain file name")
    return name


def strict_json(data: bytes, what: str):
    """Parse JSON refusing duplicate keys, NaN/Infinity, floats beyond range and integers beyond 2**53."""
    def pairs(items):
        out = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"duplicate key {key!r:.40}")
            out[key] = value
        return out

    def integer(text: str) -> int:
        if len(text.lstrip("-")) > 16 or abs(int(text)) > MAX_INT:
            raise ValueError(f"integer {text[:20]} is out of range")
        return int(text)

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {text[:20]} is out of range")
        return value

    def constant(text: str):
        raise ValueError(f"{text} is not allowed")

    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=pairs, parse_int=integer, parse_float=number,
                          parse_constant=constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise reasons.Malformed(f"{what} is not valid strict JSON ({str(e)[:120]})") from None


def _int(doc: dict, key: str, low: int, what: str) -> int:
    value = doc.get(key)
    if type(value) is not int or not low <= value <= MAX_INT:
        raise reasons.Malformed(f"{what} field {key!r} must be an integer >= {low}, got {value!r:.40}")
    return value


def _str(doc: dict, key: str, what: str, pattern: re.Pattern | None = None, optional: bool = False):
    value = doc.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)) or len(value) > 4096:
        raise reasons.Malformed(f"{what} field {key!r} is not a valid value ({value!r:.40})")
    return value


def _tolerance(doc: dict, key: str) -> float:
    value = doc.get(key)
    if type(value) not in (int, float) or not 0 <= value <= 1:
        raise reasons.Malformed(f"bundle reference field {key!r} must be a number in [0, 1], got {value!r:.40}")
    return float(value)


def parse(data: bytes) -> Bundle:
    """The bundle in `data`, or Malformed / BadPath / FileSetMismatch saying what is wrong."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise reasons.TooLarge(f"release bundle is {len(data)} bytes, more than {MAX_BUNDLE_BYTES}")
    doc = strict_json(data, "release bundle")
    what = "bundle"
    if not isinstance(doc, dict):
        raise reasons.Malformed("release bundle is not a JSON object")
    known = {"schema", "model", "kind", "release", "contract", "base_sha256", "hardware", "tensorrt_major", "files",
             "reference", "published_utc", "notes"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise reasons.Malformed(f"release bundle has unknown fields {unknown[:3]} (schema {doc.get('schema')!r:.20})")
    if doc.get("schema") != SCHEMA or type(doc.get("schema")) is not int:
        raise reasons.Incompatible(f"release bundle schema {doc.get('schema')!r:.20} is not {SCHEMA}",
                                   "update FaceBridge, or publish with a matching fedagent")
    model = _str(doc, "model", what, MODEL_RE)
    kind = _str(doc, "kind", what)
    if kind not in KIND_FILES:
        raise reasons.Malformed(f"release bundle kind {kind!r:.40} is not one of {sorted(KIND_FILES)}")
    base = _str(doc, "base_sha256", what, SHA256_RE, optional=kind == "model")
    hardware = doc.get("hardware")
    if (not isinstance(hardware, list) or not hardware or len(hardware) > 32
            or not all(isinstance(h, str) and HARDWARE_RE.fullmatch(h) for h in hardware)):
        raise reasons.Malformed(f"release bundle field 'hardware' must list targets like 'any', 'cpu', 'sm89', "
                                f"got {hardware!r:.60}")
    trt = doc.get("tensorrt_major")
    if trt is not None and (type(trt) is not int or not 1 <= trt <= 1000):
        raise reasons.Malformed(f"release bundle field 'tensorrt_major' must be null or a version, got {trt!r:.20}")
    files = _files(doc.get("files"))
    expected = {KIND_FILES[kind], REFERENCE_FILE}
    if set(files) != expected:
        extra, missing = sorted(set(files) - expected), sorted(expected - set(files))
        raise reasons.FileSetMismatch(f"a {kind} release must hold exactly {sorted(expected)}"
                                      + (f"; extra {extra}" if extra else "") + (f"; missing {missing}" if missing else ""))
    ref = doc.get("reference")
    if not isinstance(ref, dict) or set(ref) != {"file", "atol", "rtol"} or ref.get("file") != REFERENCE_FILE:
        raise reasons.Malformed(f"release bundle field 'reference' must be {{file: {REFERENCE_FILE}, atol, rtol}}")
    return Bundle(model=model, kind=kind, release=_int(doc, "release", 1, what), contract=_int(doc, "contract", 1, what),
                  base_sha256=base, hardware=tuple(hardware), tensorrt_major=trt, files=files,
                  atol=_tolerance(ref, "atol"), rtol=_tolerance(ref, "rtol"),
                  published_utc=_str(doc, "published_utc", what), notes=_str(doc, "notes", what))


def _files(files: object) -> dict[str, FileEntry]:
    if not isinstance(files, dict) or not files or len(files) > 16:
        raise reasons.Malformed("release bundle field 'files' must map 1 to 16 file names to sha256 and length")
    out = {}
    for name, entry in files.items():
        check_name(name)
        if not isinstance(entry, dict) or set(entry) != {"sha256", "length"}:
            raise reasons.Malformed(f"release file {name} must give exactly sha256 and length")
        out[name] = FileEntry(_str(entry, "sha256", f"file {name}", SHA256_RE), _int(entry, "length", 0, f"file {name}"))
    return out
