"""Train the expression regressor (landmarks -> ARKit-52 weights, head rotation) on synthetic samples from
bridge/expression/basis.npz, export it to bridge/expression/regressor.onnx and write its model contract
bridge/expression/regressor.json.

Deterministic: a fixed seed, one CPU thread, deterministic torch kernels; about 5 minutes on one core.

Two choices from real faces (issue 19, docs/PERFORMANCE.md "Real faces"): the landmarks are rendered with the
lip-corner shapes damped (synth.py, LIP_CORNER_GAIN) while the truth stays, because the real landmark model moves
the mouth corners about half as far as ICT's smile; and the exported graph averages the network with its own
mirror image (features.mirror_map, Left/Right outputs swapped, yaw and roll negated), so it reads a symmetric face
symmetrically. The network inside (and its initializer names) is unchanged.

    python tools/train_expression_regressor.py [--steps 4000] [--batch 256] [--seed 0] [--out-dir DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bridge.expression.features import FEATURE_LAYOUT, NUM_FEATURES, features_batch, mirror_map  # noqa: E402
from bridge.expression.model import MODEL_ID, VISUAL, load_model  # noqa: E402
from bridge.expression.synth import synthetic_batch  # noqa: E402
from bridge.frame import ARKIT_NAMES  # noqa: E402
from bridge.fsutil import atomic_write_bytes, atomic_write_json  # noqa: E402

OUT_DIR = ROOT / "bridge" / "expression"
ROT_SCALE = 45.0  # degrees -> network units
LIP_CORNER_GAIN = (0.5, 1.0)  # landmarks show the lip-corner shapes at this fraction of their weight (synth.py)


class Regressor(nn.Module):
    """Standardise -> MLP -> (blendshapes in [0,1] with tongueOut = 0, head rotation degrees).

    Identity is not an output: one frame of 2D landmarks says little about it, so the stage estimates it over
    many frames by least squares (bridge/expression/identity.py, identity_refresh)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, hidden: int = 256):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("inv_std", torch.tensor(1.0 / std, dtype=torch.float32))
        self.body = nn.Sequential(
            nn.Linear(NUM_FEATURES, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
        )
        self.weights = nn.Linear(hidden, len(VISUAL))
        self.rotation = nn.Linear(hidden, 3)
        self.register_buffer("scatter", torch.eye(52)[VISUAL])  # 51 visual -> 52 (tongueOut stays 0)

    def _single(self, features: torch.Tensor):
        h = self.body((features - self.mean) * self.inv_std)
        blendshapes = torch.sigmoid(self.weights(h)) @ self.scatter
        return blendshapes, self.rotation(h) * ROT_SCALE

    def forward(self, features: torch.Tensor):
        if not hasattr(self, "mirror_index"):
            return self._single(features)
        # two passes of the same weights rather than one on a concatenated batch: the exported graph has no
        # Shape/Slice, only Gathers on constant indices, which the serving torch path converts too
        w, rot = self._single(features)
        w_m, rot_m = self._single(features.index_select(1, self.mirror_index) * self.mirror_sign)
        return 0.5 * (w + w_m.index_select(1, self.swap)), 0.5 * (rot + rot_m * self.rotation_sign)

    def mirror_average(self) -> None:
        """From now on, the mean of the network on the face and on its mirror image (outputs mirrored back): the
        exported model. Adds constants only; the weights and their names stay."""
        index, sign = mirror_map()
        swap = [ARKIT_NAMES.index(n.replace("Left", "#").replace("Right", "Left").replace("#", "Right"))
                for n in ARKIT_NAMES]
        self.register_buffer("mirror_index", torch.tensor(index, dtype=torch.int64))
        self.register_buffer("mirror_sign", torch.tensor(sign, dtype=torch.float32))
        self.register_buffer("swap", torch.tensor(swap, dtype=torch.int64))
        self.register_buffer("rotation_sign", torch.tensor([-1.0, 1.0, -1.0]))  # yaw and roll change sign


def make_batch(model, rng, n, lip_corner_gain=LIP_CORNER_GAIN):
    b = synthetic_batch(model, rng, n, lip_corner_gain=lip_corner_gain)
    x = features_batch(b.landmarks[..., :2].astype(np.float64), b.iris.astype(np.float64), b.iris_present,
                       b.image_size[:, 0].astype(np.float64), b.image_size / 2.0)  # focal assumed = width
    return torch.from_numpy(x), torch.from_numpy(b.weights), torch.from_numpy(b.head_rotation)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--loss", choices=("mse", "mixed"), default="mse")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--from-onnx", type=Path, metavar="REGRESSOR.onnx",
                    help="no training: read the weights of an exported model and export them again (same function)")
    args = ap.parse_args()
    if args.from_onnx:
        return reexport(args)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(args.seed)
    model = load_model()

    stats_x = make_batch(model, rng, 4096)[0].numpy()
    net = Regressor(stats_x.mean(0), stats_x.std(0) + 1e-3, args.hidden)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    val = make_batch(model, np.random.default_rng(10_000 + args.seed), 2048, lip_corner_gain=None)
    started = time.time()
    for step in range(1, args.steps + 1):
        x, w, rot = make_batch(model, rng, args.batch)
        pw, prot = net(x)
        # squared error: the posterior mean (an L1 term would pull the many near-zero weights to exactly zero)
        err_w = ((pw - w) ** 2).mean() * 10
        if args.loss == "mixed":
            err_w = err_w + (pw - w).abs().mean()
        loss = err_w + (((prot - rot) / ROT_SCALE) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 250 == 0 or step == args.steps:
            with torch.no_grad():
                vw, vrot = net(val[0])
                mae = (vw - val[1]).abs()[:, VISUAL].mean().item()
                yaw = (vrot[:, 0] - val[2][:, 0]).abs().median().item()
                pitch = (vrot[:, 1] - val[2][:, 1]).abs().median().item()
            print(f"step {step}/{args.steps}  loss {loss.item():.4f}  val MAE {mae:.4f}  yaw {yaw:.2f} deg  "
                  f"pitch {pitch:.2f} deg  ({time.time() - started:.0f} s)", flush=True)

    export(net, args)


def reexport(args) -> None:
    """The weights of an exported model (its initializers carry the torch names) exported again."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(args.from_onnx)).graph
    inits = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in graph.initializer}
    net = Regressor(np.zeros(NUM_FEATURES, np.float32), np.ones(NUM_FEATURES, np.float32), args.hidden)
    state = net.state_dict()
    net.load_state_dict({k: inits[k] for k in state})
    export(net, args)


def export(net: Regressor, args) -> None:
    net.eval()
    net.mirror_average()
    onnx_path = args.out_dir / "regressor.onnx"
    tmp = onnx_path.with_suffix(".tmp.onnx")
    dummy = torch.zeros(1, NUM_FEATURES)
    torch.onnx.export(net, (dummy,), str(tmp), input_names=["features"],
                      output_names=["blendshapes", "head_rotation"],
                      dynamic_axes={"features": {0: "n"}, "blendshapes": {0: "n"}, "head_rotation": {0: "n"}},
                      opset_version=17, dynamo=False)
    data = tmp.read_bytes()
    tmp.unlink()
    atomic_write_bytes(onnx_path, data)
    manifest = {
        "format": "facebridge-expression-model/1",
        "file": onnx_path.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "model_id": MODEL_ID,
        "source": "trained by tools/train_expression_regressor.py on synthetic samples of bridge/expression/"
                  "basis.npz (ICT-FaceKit Light, MIT, (c) 2020 USC ICT; MediaPipe canonical mesh, Apache-2.0)",
        "training": {"seed": args.seed, "steps": args.steps, "batch": args.batch, "hidden": args.hidden,
                     "lr": args.lr, "loss": args.loss, "lip_corner_gain": list(LIP_CORNER_GAIN),
                     "mirror_averaged": True},
        "license": "Apache-2.0 (this project); derived from MIT and Apache-2.0 sources, see NOTICE",
        "input": {"name": "features", "layout": FEATURE_LAYOUT, "shape": ["n", NUM_FEATURES], "dtype": "float32",
                  "focal": "image width unless known"},
        "outputs": {
            "blendshapes": {"name": "blendshapes", "shape": ["n", 52], "names": list(ARKIT_NAMES),
                            "range": [0, 1]},
            "head_rotation": {"name": "head_rotation", "shape": ["n", 3], "units": "yaw, pitch, roll degrees"},
        },
    }
    atomic_write_json(args.out_dir / "regressor.json", manifest)
    print(f"wrote {onnx_path} ({len(data) / 1e6:.2f} MB) and regressor.json")


if __name__ == "__main__":
    main()
