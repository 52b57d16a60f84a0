"""Train the streaming lip-sync model and export it to ONNX (CPU, one thread, seeded, a few minutes).

    python tools/gen_lipsync_data.py --out build/lipsync      # data first (espeak-ng, offline)
    python tools/label_real_speech.py --out build/lipsync      # recorded speech, labelled by forced alignment
    python tools/train_lipsync.py --data build/lipsync          # -> bridge/audio/lipsync.onnx + manifest

Model: per-channel normalised log-mel (40 bands, 10 ms hop) -> Linear+ReLU -> 2-layer GRU (causal, explicit
state in/out) -> Linear+ReLU -> output layer. The output layer is the frozen base head plus a low-rank adapter,
logits = head(h) + (h @ adapter.A) @ adapter.B, whose two matrices are separate named ONNX initializers so a
federated update can replace them (ORT add_initializer, TensorRT refit) without touching the base.
The network outputs frame t - LOOKAHEAD when it has seen frame t: that delay is its lookahead.
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lipsync_norm import MAX_FRAMES, RunningNorm  # noqa: E402

from bridge.audio import features  # noqa: E402
from bridge.audio.lipsync import save_adapter  # noqa: E402
from bridge.audio.visemes import MOUTH_CHANNELS  # noqa: E402
from bridge.bench.lipsync import lipsync_metrics  # noqa: E402
from bridge.frame import VISEME_NAMES  # noqa: E402
from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402
from bridge.models import sha256_file  # noqa: E402

LOOKAHEAD = 4  # frames (40 ms) + half a 25 ms window = 52.5 ms of audio after the instant described
HIDDEN = 128
LAYERS = 2
RANK = 8
N_VIS, N_MOUTH = len(VISEME_NAMES), len(MOUTH_CHANNELS)
ADAPTER_NAMES = ("adapter.A", "adapter.B")
OUT_DIR = ROOT / "bridge" / "audio"


class Adapter(nn.Module):
    def __init__(self, hidden: int, rank: int, outputs: int):
        super().__init__()
        self.A = nn.Parameter(torch.randn(hidden, rank) / hidden ** 0.5)
        self.B = nn.Parameter(torch.zeros(rank, outputs))  # starts as a no-op, as in LoRA

    def forward(self, h):
        return (h @ self.A) @ self.B


class LipSyncNet(nn.Module):
    """With `norm_tau` (frames), a causal running normalisation (tools/lipsync_norm.py) comes first; its statistics
    ride in one more row of the recurrent state (state_rows = LAYERS + 1)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, norm_tau: float | None = None):
        super().__init__()
        self.norm = RunningNorm(mean, std, norm_tau) if norm_tau else None
        self.norm_tau = norm_tau
        self.state_rows = LAYERS + (1 if norm_tau else 0)
        self.register_buffer("mel_mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("mel_scale", torch.tensor(1.0 / std, dtype=torch.float32))
        self.inp = nn.Linear(features.N_MELS, HIDDEN)
        self.gru = nn.GRU(HIDDEN, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.mid = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, N_VIS + N_MOUTH)
        self.adapter = Adapter(HIDDEN, RANK, N_VIS + N_MOUTH)

    def forward(self, mel, state):
        if self.norm is not None:
            mel, row = self.norm(mel, state[LAYERS])
            state = state[:LAYERS]
        x = torch.relu(self.inp((mel - self.mel_mean) * self.mel_scale))
        y, state_out = self.gru(x, state)
        h = torch.relu(self.mid(y))
        out = self.head(h) + self.adapter(h)
        if self.norm is not None:
            state_out = torch.cat([state_out, row[None]], dim=0)
        return out[..., :N_VIS], out[..., N_VIS:], state_out


class ExportWrapper(nn.Module):
    """ONNX interface: probabilities and 0..1 weights instead of logits."""

    def __init__(self, net: LipSyncNet):
        super().__init__()
        self.net = net

    def forward(self, mel, state):
        vis, mouth, state_out = self.net(mel, state)
        return torch.softmax(vis, dim=-1), torch.clamp(mouth, 0.0, 1.0), state_out


def load_set(data_dir: Path, name: str) -> list[dict]:
    z = np.load(data_dir / f"{name}.npz")
    mel, vis, mouth = z["mel"].astype(np.float32), z["visemes"].astype(np.int64), z["mouth"].astype(np.float32)
    out, start = [], 0
    for n in z["lengths"]:
        out.append({"mel": mel[start:start + n], "visemes": vis[start:start + n], "mouth": mouth[start:start + n]})
        start += n
    return out


BAND_HZ = features.mel_band_edges_hz()[1:-1]  # each mel band's centre frequency


def perturb(u: dict, rng: np.random.Generator) -> dict:
    """Speaker and channel perturbation in the log-mel domain (training only, nothing changes at run time):
    speaking rate (frames resampled 0.8-1.25x, labels by nearest frame), vocal-tract length (the spectrum's
    frequency axis scaled by 0.85-1.18, as VTLP does), and a smooth random microphone EQ of up to +-6 dB."""
    mel, vis, mouth = u["mel"], u["visemes"], u["mouth"]
    rate = float(np.exp(rng.uniform(np.log(0.8), np.log(1.25))))
    pos = np.arange(0, len(mel) - 1, rate)
    lo = pos.astype(int)
    frac = (pos - lo)[:, None].astype(np.float32)
    mel = mel[lo] * (1 - frac) + mel[np.minimum(lo + 1, len(u["mel"]) - 1)] * frac
    near = np.minimum(np.round(pos).astype(int), len(vis) - 1)
    vis, mouth = vis[near], mouth[near]
    alpha = float(np.exp(rng.uniform(np.log(0.85), np.log(1.18))))  # > 1: a shorter vocal tract (formants up)
    src = np.interp(BAND_HZ / alpha, BAND_HZ, np.arange(features.N_MELS))
    i0 = np.clip(src.astype(int), 0, features.N_MELS - 2)
    w = np.clip(src - i0, 0.0, 1.0).astype(np.float32)
    mel = mel[:, i0] * (1 - w) + mel[:, i0 + 1] * w
    bands = np.linspace(0, np.pi, features.N_MELS)
    eq = sum(rng.uniform(-0.7, 0.7) * np.cos(k * bands + rng.uniform(0, np.pi)) for k in (1, 2, 3))  # ln power
    return {"mel": (mel + eq.astype(np.float32)).astype(np.float32), "visemes": vis, "mouth": mouth}


def batches(utts: list[dict], rng: np.random.Generator, batch: int, length: int, pools=(), perturb_share=0.0):
    """Random crops; targets lag the input by LOOKAHEAD frames. `pools`: (utterances, share) pairs: each crop
    comes from such a pool with its share of probability (recorded speech, other voices), else from `utts`.
    `perturb_share` of the crops go through perturb() first."""
    shares = np.cumsum([share for _, share in pools]) if pools else np.zeros(0)
    while True:
        mel = np.zeros((batch, length, features.N_MELS), np.float32)
        vis = np.zeros((batch, length), np.int64)
        mouth = np.zeros((batch, length, N_MOUTH), np.float32)
        for b in range(batch):
            k = int(np.searchsorted(shares, rng.random(), side="right")) if pools else 0
            pool = pools[k][0] if k < len(pools) else utts
            u = pool[rng.integers(len(pool))]
            if perturb_share > 0 and rng.random() < perturb_share:
                u = perturb(u, rng)
            n = len(u["mel"])
            start = int(rng.integers(LOOKAHEAD, max(LOOKAHEAD + 1, n - length)))
            seg = slice(start, min(n, start + length))
            tgt = slice(seg.start - LOOKAHEAD, seg.stop - LOOKAHEAD)
            k = seg.stop - seg.start
            mel[b, :k] = u["mel"][seg] + rng.normal(0, 0.5)  # random level offset (log domain)
            mel[b, k:] = np.log(features.LOG_FLOOR)
            vis[b, :k] = u["visemes"][tgt]
            mouth[b, :k] = u["mouth"][tgt]
        yield torch.from_numpy(mel), torch.from_numpy(vis), torch.from_numpy(mouth)


def load_onnx_weights(net: LipSyncNet, path: Path) -> None:
    """Start from an exported model (fine-tuning): the inverse of export(). The legacy exporter names the
    Linear weights after the MatMuls that use them and stores each GRU layer as ONNX W/R/B with gates (z, r, h);
    torch keeps (r, z, n)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    uses = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in inits:
                uses.setdefault(name, (node.op_type, k))
    matmuls = [n for n in inits if uses.get(n, ("",))[0] == "MatMul" and not n.startswith("adapter.")]
    grus = [n for n in inits if uses.get(n, ("",))[0] == "GRU"]
    order = [HIDDEN, 0, 2 * HIDDEN]  # torch gate blocks (r, z, n) taken from ONNX (z, r, h)
    reorder = lambda a: np.concatenate([a[o:o + HIDDEN] for o in order])  # noqa: E731
    sd = net.state_dict()
    by_shape = {(features.N_MELS, HIDDEN): "inp.weight", (HIDDEN, HIDDEN): "mid.weight",
                (HIDDEN, N_VIS + N_MOUTH): "head.weight"}
    for name in matmuls:
        sd[by_shape[inits[name].shape]] = torch.from_numpy(inits[name].T.copy())
    for layer in range(LAYERS):
        w, r, b = (inits[n] for n in sorted(grus, key=lambda n: int(n.split("_")[-1]))[3 * layer:3 * layer + 3])
        sd[f"gru.weight_ih_l{layer}"] = torch.from_numpy(reorder(w[0]))
        sd[f"gru.weight_hh_l{layer}"] = torch.from_numpy(reorder(r[0]))
        sd[f"gru.bias_ih_l{layer}"] = torch.from_numpy(reorder(b[0, :3 * HIDDEN]))
        sd[f"gru.bias_hh_l{layer}"] = torch.from_numpy(reorder(b[0, 3 * HIDDEN:]))
    for name in ("mel_mean", "mel_scale", "inp.bias", "mid.bias", "head.bias"):
        sd[name] = torch.from_numpy(inits["net." + name].copy())
    for name in [n for n in sd if n.startswith("norm.") and "net." + n in inits]:  # a model that had the norm
        sd[name] = torch.from_numpy(inits["net." + name].copy())
    sd["adapter.A"], sd["adapter.B"] = (torch.from_numpy(inits[n].copy()) for n in ADAPTER_NAMES)
    net.load_state_dict(sd)


def predict(net: LipSyncNet, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Streaming-equivalent prediction for a whole utterance, re-aligned: row t describes frame t."""
    with torch.no_grad():
        padded = np.concatenate([mel, np.full((LOOKAHEAD, mel.shape[1]), np.log(features.LOG_FLOOR), np.float32)])
        state, vis, mouth = torch.zeros(net.state_rows, 1, HIDDEN), [], []
        for start in range(0, len(padded), MAX_FRAMES):  # as bridge/audio/lipsync.py steps it
            v, m, state = net(torch.from_numpy(padded[start:start + MAX_FRAMES])[None], state)
            vis.append(v), mouth.append(m)
        vis, mouth = torch.cat(vis, 1), torch.cat(mouth, 1)
    return (torch.softmax(vis[0, LOOKAHEAD:], -1).numpy(), mouth[0, LOOKAHEAD:].clamp(0, 1).numpy())


def evaluate(net: LipSyncNet, utts: list[dict]) -> dict:
    """Viseme frame accuracy, mouth MAE, per-channel correlation, and what the mouth does in silence."""
    pv, pm, tv, tm = [], [], [], []
    for u in utts:
        vis, mouth = predict(net, u["mel"])
        pv.append(vis.argmax(-1)), pm.append(mouth), tv.append(u["visemes"]), tm.append(u["mouth"])
    return lipsync_metrics(*(np.concatenate(x) for x in (pv, pm, tv, tm)))


def export(net: LipSyncNet, path: Path) -> None:
    import onnx

    wrapper = ExportWrapper(net).eval()
    mel = torch.zeros(1, 7, features.N_MELS)
    state = torch.zeros(net.state_rows, 1, HIDDEN)
    buf = io.BytesIO()
    torch.onnx.export(wrapper, (mel, state), buf, dynamo=False, opset_version=17,
                      input_names=["mel", "state"], output_names=["visemes", "mouth", "state_out"],
                      dynamic_axes={"mel": {1: "frames"}, "visemes": {1: "frames"}, "mouth": {1: "frames"}})
    model = onnx.load_from_string(buf.getvalue())
    names = {init.name for init in model.graph.initializer}
    # the legacy exporter names parameter initializers after the module path
    for want in ADAPTER_NAMES:
        src = "net." + want
        for init in model.graph.initializer:
            if init.name == src:
                init.name = want
        for node in model.graph.node:
            node.input[:] = [want if i == src else i for i in node.input]
    names = {init.name for init in model.graph.initializer}
    missing = [n for n in ADAPTER_NAMES if n not in names]
    if missing:
        raise SystemExit(f"export lost the adapter initializers {missing}; found {sorted(names)}")
    model.producer_name = "facebridge tools/train_lipsync.py"
    onnx.checker.check_model(model)
    atomic_write_bytes(path, model.SerializeToString())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="build/lipsync")
    p.add_argument("--out", default=str(OUT_DIR), help="where lipsync.onnx and its manifest go")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=300, help="frames per training crop")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", help="fine-tune from this exported lipsync.onnx instead of starting afresh")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--real-share", type=float, default=0.3,
                   help="share of training crops from recorded speech (real_train.npz from tools/label_real_speech.py)")
    p.add_argument("--real-sets", default="real_train",
                   help="comma-separated recorded sets in --data that make up the recorded share (e.g. "
                        "real_train,allison_wb_train; tools/label_wideband_speech.py)")
    p.add_argument("--voices-share", type=float, default=0.0,
                   help="share of crops from flite/festival voices (voices_train.npz from tools/gen_voice_data.py)")
    p.add_argument("--norm-tau", type=float, default=None,
                   help="causal running mean/variance normalisation of the log-mel with this time constant (frames)")
    p.add_argument("--perturb", type=float, default=0.0,
                   help="share of crops given rate, vocal-tract-length and EQ perturbation (train_lipsync.perturb)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    data = Path(args.data)
    out = Path(args.out)

    train = load_set(data, "train")
    all_mel = np.concatenate([u["mel"] for u in train])
    mean, std = all_mel.mean(0), all_mel.std(0) + 1e-3
    print(f"train: {len(train)} utterances, {len(all_mel) / 6000:.1f} min", flush=True)
    real_sets = [n for n in args.real_sets.split(",") if n and (data / f"{n}.npz").exists()]
    real = [u for n in real_sets for u in load_set(data, n)] if args.real_share > 0 else []
    if real:
        print(f"recorded speech: {len(real)} utterances, {sum(len(u['mel']) for u in real) / 6000:.1f} min, "
              f"{args.real_share:.0%} of the crops", flush=True)
    voices = load_set(data, "voices_train") if args.voices_share > 0 else []
    if voices:
        print(f"flite/festival voices: {len(voices)} utterances, {sum(len(u['mel']) for u in voices) / 6000:.1f} min, "
              f"{args.voices_share:.0%} of the crops", flush=True)
    pools = [(p, share) for p, share in ((real, args.real_share), (voices, args.voices_share)) if p]
    net = LipSyncNet(mean, std, args.norm_tau)
    if args.init:
        load_onnx_weights(net, Path(args.init))
        init_sha = sha256_file(Path(args.init))  # before export may overwrite it
        print(f"fine-tuning from {args.init}", flush=True)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.1)
    ce = nn.CrossEntropyLoss()
    channel_weight = torch.ones(N_MOUTH)
    channel_weight[MOUTH_CHANNELS.index("jawOpen")] = 3.0
    started = time.time()
    stream = batches(train, rng, args.batch, args.length, pools, args.perturb)
    for step in range(1, args.steps + 1):
        mel, vis, mouth = next(stream)
        logits, pred, _ = net(mel, torch.zeros(net.state_rows, args.batch, HIDDEN))
        loss_vis = ce(logits.reshape(-1, N_VIS), vis.reshape(-1))
        loss_mouth = ((pred - mouth) ** 2 * channel_weight).mean() * 20
        loss = loss_vis + loss_mouth
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps:
            print(f"step {step}/{args.steps}  viseme CE {loss_vis.item():.3f}  mouth {loss_mouth.item():.4f}  "
                  f"({time.time() - started:.0f} s)", flush=True)
    net.eval()
    train_seconds = round(time.time() - started, 1)

    results = {}
    for name in ("eval_lang", "eval_voice", "eval_rate", "eval_all", "real_eval", "synth_same_text"):
        if (data / f"{name}.npz").exists():
            results[name] = evaluate(net, load_set(data, name))
            r = results[name]
            print(f"{name}: viseme acc {r['viseme_accuracy']}  mouth MAE {r['mouth_mae']}  jawOpen r "
                  f"{r['jawOpen_correlation']}  silence jawOpen {r['silence_jawOpen_mean']}", flush=True)

    model_path = out / "lipsync.onnx"
    export(net, model_path)
    adapter = {n: getattr(net.adapter, n.split(".")[1]).detach().numpy().astype(np.float32) for n in ADAPTER_NAMES}
    adapter_path = save_adapter(out / "lipsync_adapter_default.npz", adapter)
    check_onnx(model_path, net)
    manifest = {
        "name": "lipsync",
        "file": model_path.name,
        "sha256": sha256_file(model_path),
        "default_adapter": {"file": adapter_path.name, "sha256": sha256_file(adapter_path)},
        "license": "Apache-2.0 (trained by FaceBridge on speech synthesized offline with espeak-ng"
                   + (", flite and festival" if voices else "") + ", none of whose code or data is shipped; and on "
                   "recorded prompts of Asterisk's core sounds, CC-BY-SA-3.0, (c) Allison Smith, and CC-BY-3.0, "
                   "Carlo Flora and Maxim Topal / ivrvoice.ru, see NOTICE)" if real else
                   "Apache-2.0 (trained by FaceBridge on speech synthesized offline with espeak-ng; no espeak-ng "
                   "code or data is shipped)",
        "source": "tools/gen_lipsync_data.py + tools/train_lipsync.py",
        "inputs": {"mel": ["1", "frames", features.N_MELS], "state": [net.state_rows, 1, HIDDEN]},
        "outputs": {"visemes": ["1", "frames", N_VIS], "mouth": ["1", "frames", N_MOUTH],
                    "state_out": [net.state_rows, 1, HIDDEN]},
        **({"max_frames_per_call": MAX_FRAMES,  # the running normalisation's graph takes at most this many
            "running_norm": {"tau_frames": net.norm_tau, "state_row": LAYERS}} if net.norm is not None else {}),
        "adapter_initializers": {n: list(adapter[n].shape) for n in ADAPTER_NAMES},
        "adapter_formula": "logits = head(h) + (h @ adapter.A) @ adapter.B",
        "visemes": list(VISEME_NAMES),
        "mouth_channels": list(MOUTH_CHANNELS),
        "front_end": {"sample_rate": features.SAMPLE_RATE, "hop": features.HOP, "window": features.WINDOW,
                      "n_fft": features.N_FFT, "n_mels": features.N_MELS, "fmin": features.FMIN,
                      "fmax": features.FMAX, "log_floor": features.LOG_FLOOR},
        "lookahead_frames": LOOKAHEAD,
        "lookahead_ms": LOOKAHEAD * 10 + features.WINDOW / features.SAMPLE_RATE * 1000 / 2,
        "training": {"seed": args.seed, "steps": args.steps, "batch": args.batch, "crop_frames": args.length,
                     "threads": 1, "seconds": train_seconds, "train_utterances": len(train),
                     "init": {"previous_model_sha256": init_sha} if args.init else None,
                     "lr": args.lr,
                     "real_sets": real_sets if real else [],
                     "real_utterances": len(real), "real_share": args.real_share if real else 0.0,
                     "voices_utterances": len(voices), "voices_share": args.voices_share if voices else 0.0,
                     "perturb_share": args.perturb},
        "evaluation": results,
    }
    atomic_write_json(out / "lipsync.json", manifest)
    print(f"wrote {model_path} ({model_path.stat().st_size // 1024} KiB) and {out / 'lipsync.json'}")
    return 0


def check_onnx(path: Path, net: LipSyncNet) -> None:
    """The ONNX file must match torch, and stepping it one frame at a time must match a whole-utterance run."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    mel = rng.normal(-8, 3, (1, 50, features.N_MELS)).astype(np.float32)
    state = np.zeros((net.state_rows, 1, HIDDEN), np.float32)
    vis, mouth, _ = sess.run(None, {"mel": mel, "state": state})
    with torch.no_grad():
        tv, tm, _ = ExportWrapper(net)(torch.from_numpy(mel), torch.from_numpy(state))
    assert np.abs(vis - tv.numpy()).max() < 1e-4 and np.abs(mouth - tm.numpy()).max() < 1e-4
    steps = []
    for t in range(mel.shape[1]):
        v, m, state = sess.run(None, {"mel": mel[:, t:t + 1], "state": state})
        steps.append(m)
    assert np.abs(np.concatenate(steps, axis=1) - mouth).max() < 1e-4


if __name__ == "__main__":
    sys.exit(main())
