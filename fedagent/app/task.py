"""Local training of the lip-sync adapter: only adapter.A and adapter.B move; the shipped base stays frozen.

The base network (log-mel -> GRU -> hidden h -> head) is run once per window with the ONNX model cut open at the
adapter, giving every 10 ms frame its hidden vector h (128) and the frozen head's logits z0 (34). The adapted
logits are z = z0 + (h @ A) @ B, so training is a small numpy problem (no torch on the device):

    loss = mean over trusted frames and taught channels of w_c (clip(z_mouth, 0, 1) - teacher)^2
         + viseme_kl * KL(visemes of the starting adapter || visemes now)     (no viseme teacher: keep them)
         + proximal * |theta - theta_start|^2                                  (stay near the global adapter)

with Adam, the clip's gradient passed straight through, and early stopping on a held-out slice of the device's
own windows (every `holdout_every`-th window). `fine_tune` returns the best adapter on that slice and the slice's
error before and after, which stays on the device.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bridge.audio.features import LOG_FLOOR, N_MELS
from bridge.audio.learn_store import LearnWindow
from bridge.audio.lipsync import load_adapter
from bridge.audio.visemes import MOUTH_CHANNELS
from bridge.errors import FaceBridgeError
from bridge.frame import VISEME_NAMES
from bridge.models.registry import default_registry
from fedagent.app.project import RUN_CONFIG

PERSONAL_MAX_EPOCHS, PERSONAL_PATIENCE = 40, 4  # a device's own fine-tune (TrainConfig.personal)

log = logging.getLogger(__name__)

ADAPTER_NAMES = ("adapter.A", "adapter.B")
N_VIS, N_MOUTH = len(VISEME_NAMES), len(MOUTH_CHANNELS)
JAW = MOUTH_CHANNELS.index("jawOpen")

Adapter = dict  # {"adapter.A": (128, 8), "adapter.B": (8, 34)} float32


def shipped_base() -> tuple[Path, dict]:
    """(verified path, manifest) of the shipped lip-sync model, through the model registry. Federated adapters
    are trained for the shipped base, whatever release a device has installed, so server and devices agree."""
    model = default_registry().shipped("lipsync")
    return default_registry().shipped_path("lipsync"), model.entry


def default_adapter() -> Adapter:
    """The adapter shipped with the model (bridge/audio/lipsync_adapter_default.npz, hash checked)."""
    return load_adapter(default_registry().default_adapter_path("lipsync"))


def adapter_to_list(adapter: Adapter) -> list[np.ndarray]:
    return [np.asarray(adapter[n], np.float32) for n in ADAPTER_NAMES]


def adapter_from_list(arrays: list[np.ndarray]) -> Adapter:
    expected = {k: tuple(v) for k, v in shipped_base()[1]["adapter_initializers"].items()}
    if len(arrays) != len(ADAPTER_NAMES):
        raise FaceBridgeError(f"adapter update has {len(arrays)} tensors, expected {len(ADAPTER_NAMES)}",
                              "the server and this device run different fedagent versions")
    out = {}
    for name, arr in zip(ADAPTER_NAMES, arrays):
        arr = np.asarray(arr, np.float32)
        if arr.shape != expected[name]:
            raise FaceBridgeError(f"adapter tensor {name} has shape {arr.shape}, expected {expected[name]}",
                                  "the server and this device run different lip-sync model versions")
        out[name] = arr
    return out


class Trunk:
    """The shipped lip-sync model with two more outputs: the adapter's input h and the frozen head's logits."""

    def __init__(self, threads: int = 1):
        try:
            # optional extra: onnx (fed, tools), about 1.1 s to import
            import onnx
            from onnx import TensorProto, helper
        except ImportError:
            raise FaceBridgeError("the onnx package is needed to train the adapter",
                                  "pip install 'facebridge[fed]'") from None
        # with onnx above: only training the adapter opens a session
        import onnxruntime as ort

        path, self.manifest = shipped_base()
        self.lookahead = int(self.manifest["lookahead_frames"])
        self.state_shape = tuple(self.manifest["inputs"]["state"])
        model = onnx.load(str(path))
        nodes = model.graph.node
        a_mul = next(n for n in nodes if n.op_type == "MatMul" and "adapter.A" in n.input)
        b_mul = next(n for n in nodes if n.op_type == "MatMul" and "adapter.B" in n.input)
        add = next(n for n in nodes if n.op_type == "Add" and b_mul.output[0] in n.input)
        self._h = next(i for i in a_mul.input if i != "adapter.A")
        self._z0 = next(i for i in add.input if i != b_mul.output[0])
        for name in (self._h, self._z0):
            model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(model.SerializeToString(), sess_options=opts,
                                             providers=["CPUExecutionProvider"])

    def features(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T, 40) log-mel from a zero state -> h (T, 128), z0 (T, 34); row t describes frame t."""
        pad = np.full((self.lookahead, N_MELS), np.log(LOG_FLOOR), np.float32)
        feeds = {"mel": np.concatenate([mel.astype(np.float32), pad])[None],
                 "state": np.zeros(self.state_shape, np.float32)}
        h, z0 = self._session.run([self._h, self._z0], feeds)
        return h[0, self.lookahead:], z0[0, self.lookahead:]


@dataclass
class Frames:
    """Training rows, one per 10 ms frame: the frozen base's outputs and the teacher."""

    h: np.ndarray  # (N, 128)
    z0: np.ndarray  # (N, 34) frozen head logits (visemes then mouth)
    teacher: np.ndarray  # (N, 19) mouth weights
    mask: np.ndarray  # (N, 19) 0..1: trust of the frame x whether its teacher covers the channel

    def __len__(self) -> int:
        return len(self.h)

    @staticmethod
    def concat(parts: list[Frames]) -> Frames:
        if not parts:
            return Frames(np.zeros((0, 128), np.float32), np.zeros((0, N_VIS + N_MOUTH), np.float32),
                          np.zeros((0, N_MOUTH), np.float32), np.zeros((0, N_MOUTH), np.float32))
        return Frames(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("h", "z0", "teacher", "mask")))


def frames_from_windows(trunk: Trunk, windows: list[LearnWindow]) -> Frames:
    parts = []
    for w in windows:
        h, z0 = trunk.features(w.mel)
        taught = np.array([c in w.channels for c in MOUTH_CHANNELS], np.float32)
        parts.append(Frames(h, z0, w.mouth.astype(np.float32), w.trust[:, None].astype(np.float32) * taught))
    return Frames.concat(parts)


def split_windows(windows: list[LearnWindow], holdout_every: int = 5) -> tuple[list, list]:
    """(train, held-out): every `holdout_every`-th window (by time) is held out, at least one each."""
    if len(windows) < 2:
        raise FaceBridgeError(f"this device has {len(windows)} learning window(s); at least 2 are needed",
                              "record more with `facebridge run --audio mic --learn` (or check the --store path)")
    held = [w for i, w in enumerate(windows) if i % holdout_every == holdout_every - 1] or [windows[-1]]
    train = [w for w in windows if all(w is not x for x in held)]
    return train, held


# -- the model on precomputed frames ------------------------------------------------------------------------


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def predict(adapter: Adapter, frames: Frames) -> tuple[np.ndarray, np.ndarray]:
    """Viseme probabilities (N, 15) and mouth weights (N, 19), exactly as the ONNX model computes them."""
    z = frames.z0 + (frames.h @ adapter["adapter.A"]) @ adapter["adapter.B"]
    return _softmax(z[:, :N_VIS]), np.clip(z[:, N_VIS:], 0.0, 1.0)


def mouth_error(adapter: Adapter, frames: Frames) -> float:
    """Mean absolute mouth-weight error over trusted frames and taught channels (the figure reported)."""
    if len(frames) == 0:
        return float("nan")
    _, mouth = predict(adapter, frames)
    return float((np.abs(mouth - frames.teacher) * frames.mask).sum() / max(frames.mask.sum(), 1e-9))


def _round_default(key: str):
    return RUN_CONFIG[key][0]


@dataclass
class TrainConfig:
    """Local training settings; the server may send any of them in the round's config. The defaults are a
    round's, from the one table of run settings (fedagent/app/project.py RUN_CONFIG); `personal()` is the longer
    fine-tune a device keeps for itself."""

    lr: float = _round_default("lr")
    max_epochs: int = _round_default("max-epochs")
    patience: int = _round_default("patience")
    batch: int = _round_default("batch")  # frames per step
    viseme_kl: float = _round_default("viseme-kl")
    proximal: float = _round_default("proximal")
    jaw_weight: float = _round_default("jaw-weight")
    seed: int = 0

    @classmethod
    def personal(cls) -> TrainConfig:
        """Personalisation from the global adapter on the device's own data: more epochs, more patience (no
        round deadline to meet)."""
        return cls(max_epochs=PERSONAL_MAX_EPOCHS, patience=PERSONAL_PATIENCE)

    @classmethod
    def from_config(cls, config: dict) -> TrainConfig:
        cfg = cls()
        for key in cfg.__dataclass_fields__:
            wire = key.replace("_", "-")
            if wire in config:
                setattr(cfg, key, type(getattr(cfg, key))(config[wire]))
        return cfg


@dataclass
class TrainResult:
    adapter: Adapter
    error_before: float  # held-out mouth MAE of the starting adapter (stays on the device)
    error_after: float  # held-out mouth MAE of the returned adapter
    epochs: int
    history: list[float] = field(default_factory=list)  # held-out error after each epoch


def _grads(theta: list[np.ndarray], frames: Frames, idx: np.ndarray, start_vis: np.ndarray,
           theta0: list[np.ndarray], cfg: TrainConfig, weight: np.ndarray) -> list[np.ndarray]:
    a, b = theta
    h, mask = frames.h[idx], frames.mask[idx] * weight
    u = h @ a
    z = frames.z0[idx] + u @ b
    g = np.zeros_like(z)
    denom = max(float(mask.sum()), 1e-9)
    g[:, N_VIS:] = 2.0 * (np.clip(z[:, N_VIS:], 0, 1) - frames.teacher[idx]) * mask / denom  # straight-through
    g[:, :N_VIS] = cfg.viseme_kl * (_softmax(z[:, :N_VIS]) - start_vis[idx]) / len(idx)
    grad_b = u.T @ g + 2 * cfg.proximal * (b - theta0[1])
    grad_a = h.T @ (g @ b.T) + 2 * cfg.proximal * (a - theta0[0])
    return [grad_a, grad_b]


def fine_tune(start: Adapter, train: Frames, held_out: Frames, cfg: TrainConfig | None = None) -> TrainResult:
    """Adam from `start` on `train`; the adapter with the lowest held-out error is returned (early stopping)."""
    cfg = cfg or TrainConfig.personal()
    if len(train) == 0 or len(held_out) == 0:
        raise FaceBridgeError("no trusted training frames on this device", "record more with --learn")
    rng = np.random.default_rng(cfg.seed)
    theta0 = [start[n].astype(np.float32) for n in ADAPTER_NAMES]
    theta = [t.copy() for t in theta0]
    start_vis, _ = predict(start, train)
    weight = np.ones(N_MOUTH, np.float32)
    weight[JAW] = cfg.jaw_weight
    m = [np.zeros_like(t) for t in theta]
    v = [np.zeros_like(t) for t in theta]
    step = 0
    best = {n: start[n].copy() for n in ADAPTER_NAMES}
    before = best_err = mouth_error(start, held_out)
    history, stale, epochs = [], 0, 0
    for epoch in range(1, cfg.max_epochs + 1):
        epochs = epoch
        order = rng.permutation(len(train))
        for lo in range(0, len(order), cfg.batch):
            idx = order[lo:lo + cfg.batch]
            grads = _grads(theta, train, idx, start_vis, theta0, cfg, weight)
            step += 1
            for i, g in enumerate(grads):
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                theta[i] -= cfg.lr * (m[i] / (1 - 0.9 ** step)) / (np.sqrt(v[i] / (1 - 0.999 ** step)) + 1e-8)
        current = dict(zip(ADAPTER_NAMES, (t.astype(np.float32) for t in theta)))
        err = mouth_error(current, held_out)
        history.append(round(err, 6))
        if not np.isfinite(err):
            break
        if err < best_err - 1e-6:
            best, best_err, stale = current, err, 0
        else:
            stale += 1
            if stale >= cfg.patience:
                break
    return TrainResult(best, before, best_err, epochs, history)


def device_frames(trunk: Trunk, windows: list[LearnWindow], holdout_every: int = 5) -> tuple[Frames, Frames]:
    """(train, held-out) Frames of one device's windows."""
    train_w, held_w = split_windows(windows, holdout_every)
    return frames_from_windows(trunk, train_w), frames_from_windows(trunk, held_w)
