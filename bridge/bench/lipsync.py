"""`facebridge bench lipsync`: accuracy on held-out speech, compute per 10 ms hop, audio-in to weights-out latency.

Held-out data comes from `tools/gen_lipsync_data.py` (espeak-ng, offline): languages, voice variants and
speaking rates never used in training. It is generated into --data when missing (needs espeak-ng).
Accuracy runs the shipped ONNX model exactly as the live stream does (same front end, same state stepping).

Recorded human speech (issue 19): `real_eval` holds recordings never trained on (held-out Asterisk prompts, the
LibriVox audiobook sentences and read card names of pocketsphinx's test data), labelled by forced alignment
(tools/label_real_speech.py, from the files tools/fetch_real_data.py fetches); `synth_same_text` is espeak-ng
reading the same texts, labelled the same way, so the gap between the two is the voice alone. Both are scored when
present (labelled from --real-data into --data when missing), per group as well. The synthetic sets are also scored
against forced-alignment labels of their own audio, beside their exact labels (bench/lipsync_aligned.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bridge.bench.lipsync_scoring import (  # noqa: F401 - REAL_LABELS_VERSION is read from here by the tools
    REAL_LABELS_VERSION,
    labels_current,
    lipsync_metrics,
    predict_utterance,
)
from bridge.errors import FaceBridgeError
from bridge.paths import real_data_dir

EVAL_SETS = ("eval_lang", "eval_voice", "eval_rate", "eval_all")
REPO = Path(__file__).resolve().parents[2]


def add_arguments(p) -> None:
    p.add_argument("--data", default="build/lipsync", help="folder with held-out sets (generated if missing)")
    p.add_argument("--count", type=int, default=100, help="utterances per held-out set when generating")
    p.add_argument("--hops", type=int, default=3000, help="hops timed for the compute figure")
    p.add_argument("--latency-seconds", type=float, default=8.0, help="seconds of speech streamed at real time")
    p.add_argument("--backend", default="onnxruntime")
    p.add_argument("--real-data", default=str(real_data_dir()),
                   help="recorded speech fetched by tools/fetch_real_data.py (labelled into --data when missing; "
                        "default: the user's cache, %(default)s)")


def _ensure_data(data: Path, count: int) -> None:
    missing = [s for s in EVAL_SETS if not (data / f"{s}.npz").exists()]
    if not missing:
        return
    tool = REPO / "tools" / "gen_lipsync_data.py"
    if not tool.exists():
        raise FaceBridgeError(f"held-out lip-sync data is missing in {data}",
                              "run from a source checkout (tools/gen_lipsync_data.py generates it)")
    print(f"generating held-out sets {', '.join(missing)} into {data} ...", flush=True)
    proc = subprocess.run([sys.executable, str(tool), "--out", str(data), "--sets", ",".join(missing),
                           "--count", str(count)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise FaceBridgeError(f"generating held-out speech failed ({proc.stderr.strip().splitlines()[-1:]})",
                              "install espeak-ng: apt-get install espeak-ng libespeak-ng1")


def _utterances(path: Path):
    with np.load(path) as z:
        mel, vis, lengths = z["mel"].astype(np.float32), z["visemes"], z["lengths"]
        mouth = z["mouth"].astype(np.float32)
        audio = [z[k] for k in sorted(z.files) if k.startswith("pcm_")]
    start = 0
    utts = []
    for n in lengths:
        utts.append((mel[start:start + n], vis[start:start + n].astype(np.int64), mouth[start:start + n]))
        start += n
    return utts, audio


def accuracy(model, path: Path, keep=None) -> dict:
    """Scored over the utterances of the set (those whose index `keep` accepts, when given)."""
    pv, pm, tv, tm = [], [], [], []
    utts, _ = _utterances(path)
    for i, (mel, vis, mouth) in enumerate(utts):
        if keep is not None and not keep(i):
            continue
        p_vis, p_mouth = predict_utterance(model, mel)
        pv.append(p_vis), pm.append(p_mouth)
        tv.append(vis), tm.append(mouth)
    return lipsync_metrics(*(np.concatenate(x) for x in (pv, pm, tv, tm)))


def live_path(path: Path, backend: str) -> dict:
    """The stored held-out recordings through the live path (FileSource -> LipSyncStream, VAD gate on),
    scored against their targets: what a receiver actually gets, silence included."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import soundfile as sf

    from bridge.audio.features import SAMPLE_RATE
    from bridge.audio.lipsync import LipSyncStream
    from bridge.audio.sources import FileSource
    from bridge.audio.visemes import MOUTH_ARKIT_INDICES

    utts, audio = _utterances(path)
    pv, pm, tv, tm = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, pcm in enumerate(audio):
            wav = Path(tmp) / f"{i}.wav"
            sf.write(wav, pcm, SAMPLE_RATE, subtype="FLOAT")
            stream = LipSyncStream(backend=backend, history=100000)
            stream.start(FileSource(wav, realtime=False))
            stream._thread.join(60)
            stream.stop()
            results = list(stream.history)
            _, vis, mouth = utts[i]
            pv.append(np.array([r.visemes.argmax() for r in results]))
            pm.append(np.array([r.blendshapes[MOUTH_ARKIT_INDICES] for r in results]))
            tv.append(vis[: len(results)]), tm.append(mouth[: len(results)])
    out = lipsync_metrics(*(np.concatenate(x) for x in (pv, pm, tv, tm)))
    out["utterances"] = len(audio)
    return out


REAL_SETS = ("real_eval", "synth_same_text")
def _ensure_real(data: Path, real: Path) -> bool:
    """Label the recorded speech into `data` when its sets are missing or were labelled by an older labeller, and
    the recordings were fetched."""
    if all((data / f"{s}.npz").exists() and labels_current(data / f"{s}.json") for s in REAL_SETS):
        return True
    tool = REPO / "tools" / "label_real_speech.py"
    present = all((data / f"{s}.npz").exists() for s in REAL_SETS)
    if present and not ((real / "asterisk").is_dir() and tool.exists()):
        print("recorded speech was labelled by an older labeller and its recordings are not here to label it "
              "again: scored as it is (labels_version in the JSON)", flush=True)
        return True
    if present:
        print("recorded speech was labelled by an older labeller: labelling it again", flush=True)
    if not (real / "asterisk").is_dir() or not tool.exists():
        print(f"recorded speech not scored: fetch it with `python tools/fetch_real_data.py` (into {real})", flush=True)
        return False
    print(f"labelling recorded speech from {real} into {data} ...", flush=True)
    proc = subprocess.run([sys.executable, str(tool), "--real", str(real), "--out", str(data)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise FaceBridgeError(f"labelling recorded speech failed ({proc.stderr.strip().splitlines()[-1:]})",
                              "install the tools extra (pocketsphinx) and espeak-ng, then run it again")
    return True


def recorded_speech(model, data: Path) -> dict:
    """Both real-speech sets, whole and per group (asterisk_eval, librivox, cards, june_fr)."""
    out = {}
    for name in REAL_SETS:
        meta = json.loads((data / f"{name}.json").read_text())["utterances"]
        out[name] = accuracy(model, data / f"{name}.npz")
        out[name]["utterances"] = len(meta)
        out[name]["minutes"] = round(out[name]["frames"] / 6000, 2)
        out[name]["labels_version"] = json.loads((data / f"{name}.json").read_text()).get("labels_version", 1)
        out[name]["groups"] = {}
        for group in sorted({m["group"] for m in meta}):
            r = accuracy(model, data / f"{name}.npz", keep=lambda i, g=group: meta[i]["group"] == g)
            out[name]["groups"][group] = {k: r[k] for k in ("frames", "viseme_accuracy", "jawOpen_correlation",
                                                            "jawOpen_mae", "silence_jawOpen_mean")}
        r = out[name]
        print(f"{name}: viseme acc {r['viseme_accuracy']}  jawOpen r {r['jawOpen_correlation']}  "
              f"groups {r['groups']}", flush=True)
    return out


FLITE_TEXT = ("Good morning. Please open the window, and bring me a cup of coffee. Thank you very much. "
              "Papa bought a map.")


def other_synthesizer(backend: str) -> dict | None:
    """Speech from flite's voices (diphone/clustergen, not formant synthesis; the shipped model trains on
    flite's voices too, with other texts: tools/gen_voice_data.py), when the `flite`
    program is installed. No phoneme targets here: the check is that the jaw opens while the VAD hears speech
    and rests otherwise."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.audio.lipsync import LipSyncModel, analyze
    from bridge.audio.sources import load_audio_file

    if not shutil.which("flite"):
        return None
    model = LipSyncModel(backend=backend)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for voice in ("slt", "rms", "awb", "kal16"):
            wav = Path(tmp) / f"{voice}.wav"
            if subprocess.run(["flite", "-voice", voice, "-t", FLITE_TEXT, "-o", str(wav)],
                              capture_output=True).returncode != 0:
                continue
            pcm = np.concatenate([np.zeros(8000, np.float32), load_audio_file(wav), np.zeros(8000, np.float32)])
            res = analyze(pcm, model)
            jaw, speech = res["mouth"][:, 0], res["voice_activity"] > 0.5
            out[voice] = {"jawOpen_mean_speech": round(float(jaw[speech].mean()), 3),
                          "jawOpen_mean_silence_ungated": round(float(jaw[~speech].mean()), 3),
                          "jawOpen_max": round(float(jaw.max()), 3)}
    return out


def compute_per_hop(model, vad, pcm: np.ndarray, hops: int) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.audio import features

    front = features.StreamingLogMel()
    model.reset()
    vad.reset()
    pcm = np.resize(pcm, (hops + 3) * features.HOP)
    model_us, total_us = [], []
    for i in range(hops + 3):
        block = pcm[i * features.HOP:(i + 1) * features.HOP]
        t0 = time.perf_counter()
        vad.push(block)
        t1 = time.perf_counter()
        mel = front.push(block)
        if len(mel):
            model.step(mel)
        t2 = time.perf_counter()
        if len(mel):
            model_us.append((t2 - t1) * 1e6)
            total_us.append((t2 - t0) * 1e6)
    m, t = np.array(model_us), np.array(total_us)
    return {"hops": int(len(m)), "threads": 1,
            "lipsync_us_mean": round(float(m.mean()), 1), "lipsync_us_p99": round(float(np.percentile(m, 99)), 1),
            "with_vad_us_mean": round(float(t.mean()), 1), "with_vad_us_p99": round(float(np.percentile(t, 99)), 1)}


def streaming_latency(pcm: np.ndarray, seconds: float, backend: str) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import soundfile as sf

    from bridge.audio.features import SAMPLE_RATE
    from bridge.audio.lipsync import LipSyncStream
    from bridge.audio.sources import FileSource

    pcm = pcm[: int(seconds * SAMPLE_RATE)]
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        sf.write(wav, pcm, SAMPLE_RATE, subtype="FLOAT")
        stream = LipSyncStream(backend=backend, history=100000)
        source = FileSource(wav, realtime=True)
        stream.start(source)
        stream._thread.join(seconds + 10)
        stream.stop()
    lat = np.array([r.latency_ms for r in stream.history])
    if stream.error or not len(lat):
        raise FaceBridgeError(f"lip-sync stream failed ({stream.error or 'no results'})", "see the log above")
    return {"source": "file at real time, 10 ms chunks", "results": int(len(lat)),
            "latency_ms_p50": round(float(np.percentile(lat, 50)), 1),
            "latency_ms_p99": round(float(np.percentile(lat, 99)), 1), "latency_ms_max": round(float(lat.max()), 1),
            "includes": "lookahead 52.5 ms (4 hops + half window) + chunk buffering + VAD + model compute"}


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.audio.lipsync import LipSyncModel
    from bridge.audio.vad import SileroVad

    data = Path(args.data)
    _ensure_data(data, args.count)
    model = LipSyncModel(backend=args.backend)
    results = {"model": {k: model.manifest[k] for k in ("file", "sha256", "lookahead_ms")}}
    for name in EVAL_SETS:
        results[name] = accuracy(model, data / f"{name}.npz")
        r = results[name]
        print(f"{name}: viseme acc {r['viseme_accuracy']}  mouth MAE {r['mouth_mae']}  "
              f"jawOpen r {r['jawOpen_correlation']}  silence jawOpen {r['silence_jawOpen_mean']}", flush=True)
    results["eval_all_live_path"] = live_path(data / "eval_all.npz", args.backend)
    r = results["eval_all_live_path"]
    print(f"eval_all through the live stream (VAD gate on): jawOpen r {r['jawOpen_correlation']}  "
          f"silence jawOpen mean {r['silence_jawOpen_mean']} p95 {r['silence_jawOpen_p95']}", flush=True)
    if _ensure_real(data, Path(args.real_data)):
        results.update(recorded_speech(model, data))
        results["real_eval_live_path"] = live_path(data / "real_eval.npz", args.backend)
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.bench import lipsync_aligned

    skipped = lipsync_aligned.ensure(data)
    if skipped:
        print(f"synthetic against forced-alignment labels not scored: {skipped}", flush=True)
        results["synthetic_forced_alignment"] = {"skipped": skipped}
    else:
        results["synthetic_forced_alignment"] = lipsync_aligned.score(model, data)
    flite = other_synthesizer(args.backend)
    if flite is not None:
        results["other_synthesizer_flite"] = flite
        print(f"flite voices (jaw while speaking and in pauses): {flite}", flush=True)
    _, audio = _utterances(data / "eval_all.npz")
    if not audio:
        raise FaceBridgeError(f"{data / 'eval_all.npz'} holds no audio", "regenerate it with --keep-audio 4")
    pcm = np.concatenate(audio)
    results["compute_per_hop"] = compute_per_hop(model, SileroVad(args.backend), pcm, args.hops)
    print(f"compute per 10 ms hop: {results['compute_per_hop']}", flush=True)
    results["latency"] = streaming_latency(pcm, args.latency_seconds, args.backend)
    print(f"audio-in to weights-out: {results['latency']}", flush=True)
    return results
