"""The smoke test is no longer self-attested. A model with another model's interface (the iris model published as
the emotion model, or as face_landmark), a model fixed at one item where the bridge batches, reference outputs
holding NaN, and tolerances so loose that unrelated weights pass are refused by the publisher and, when a thief
signs them by hand, by the device (the real CLI in a process of its own); the active release keeps serving."""
import hashlib
import io
import shutil

import numpy as np
import pytest

from bridge.models.registry import ModelRegistry, default_registry
from bridge.updates import install as installer
from bridge.updates.contract import check_contract, shipped_contract
from bridge.updates.reasons import Incompatible
from fedagent.publisher.publish import PublishError
from tests.updates.kit import cli_install, emotion_model, fedagent
from tests.updates.test_hostile_metadata import recovers


def _entry(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


def _self_attested(model_path) -> bytes:
    """reference.npz the model's own way: seeded inputs for its own interface, and its own outputs on them."""
    from bridge.updates.smoke import ReleaseSession, reference_inputs

    session = ReleaseSession(model_path)
    inputs = reference_inputs(session)
    arrays = {f"input.{k}": v for k, v in inputs.items()}
    arrays |= {f"output.{k}": v for k, v in session.run(inputs).items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _forge_model_release(publisher, model: str, onnx: bytes, reference: bytes, release: int = 1, tol: float = 1e-3):
    files = {"model.onnx": onnx, "reference.npz": reference}
    bundle = {"schema": 1, "model": model, "kind": "model", "release": release, "contract": 1, "base_sha256": None,
              "hardware": ["any"], "tensorrt_major": None, "files": {n: _entry(b) for n, b in files.items()},
              "reference": {"file": "reference.npz", "atol": tol, "rtol": tol}, "published_utc": "", "notes": ""}
    publisher.forge_release(files, bundle, model=model)


@pytest.mark.parametrize("model", ["emotion", "face_landmark"])
def test_the_iris_model_published_as_another_model_is_refused_by_the_publisher(publisher, tmp_path, model):
    iris = shutil.copyfile(default_registry().shipped_path("iris_landmark"), tmp_path / f"{model}.onnx")
    proc = fedagent("publish", "--keys", publisher.keys, "--repo", publisher.repo, f"{model}={iris}",
                    home=tmp_path / "home")
    assert proc.returncode == 1 and "another model's interface" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("model", ["emotion", "face_landmark"])
def test_the_iris_model_signed_by_hand_as_another_model_is_incompatible_on_the_device(publisher, device, server,
                                                                                     tmp_path, model):
    iris = default_registry().shipped_path("iris_landmark")
    _forge_model_release(publisher, model, iris.read_bytes(), _self_attested(iris))
    code, out = cli_install(server.url, device.state, tmp_path / "home", "--model", model)
    assert (code, out["reason"]) == (18, "incompatible"), out
    assert "another model's interface" in out["message"]
    assert ModelRegistry(device.state).active(model).release == 0  # the shipped model serves on
    recovers(publisher, device, server)


def test_a_model_fixed_at_one_item_is_refused_by_publisher_and_device(publisher, device, server, tmp_path):
    fixed = emotion_model(tmp_path / "fixed.onnx", fixed_batch=True)
    with pytest.raises(PublishError, match="must stay free"):
        publisher.publish(fixed, model="emotion")
    _forge_model_release(publisher, "emotion", fixed.read_bytes(), _self_attested(fixed))
    with pytest.raises(Incompatible, match=r"input input float\[1, 1, 64, 64\].*needs input float\[\*, 1, 64, 64\]"):
        installer.install(server.url, device.state, models=["emotion"])
    recovers(publisher, device, server)


def test_a_reference_with_nan_outputs_is_refused(publisher, device, server):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    with np.load(io.BytesIO(files["reference.npz"])) as z:
        arrays = {k: z[k] for k in z.files}
    arrays = {k: np.full_like(v, np.nan) if k.startswith("output.") else v for k, v in arrays.items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    files["reference.npz"] = buffer.getvalue()
    bundle["files"]["reference.npz"] = _entry(files["reference.npz"])
    publisher.forge_release(files, bundle)
    error = device.refused(server.url, "smoke-test-failed")
    assert "NaN" in str(error)
    recovers(publisher, device, server)


def test_a_tolerance_loose_enough_for_unrelated_weights_is_refused(publisher, device, server, tmp_path):
    with pytest.raises(PublishError, match="more than the bound"):
        publisher.publish(atol=1.0, rtol=1.0)
    bundle, files = publisher.release_files()
    unrelated = publisher.adapter(seed=99, scale=1.0)
    bundle["release"] = 2
    bundle["reference"] |= {"atol": 1, "rtol": 1}
    files["adapter.npz"] = unrelated.read_bytes()
    bundle["files"]["adapter.npz"] = _entry(files["adapter.npz"])
    publisher.forge_release(files, bundle)
    code, out = cli_install(server.url, device.state, tmp_path / "home")
    assert (code, out["reason"]) == (19, "smoke-test-failed"), out
    assert "more than the bound" in out["message"]
    recovers(publisher, device, server)


def test_the_manifests_declare_the_interface_the_shipped_files_have():
    """The contract read from each shipped ONNX file is what bridge/models/manifest.json declares for it."""
    registry = default_registry()
    for name, shipped in registry.shipped_models().items():
        declared = shipped.entry.get("inputs")
        if not isinstance(declared, list) or not str(shipped.path).endswith(".onnx"):
            continue
        contract = shipped_contract(shipped)
        for ports, listed in ((contract.inputs, shipped.entry["inputs"]), (contract.outputs, shipped.entry["outputs"])):
            assert [p.name for p in ports] == [d["name"] for d in listed], name
            for port, d in zip(ports, listed):
                assert [None if isinstance(x, str) else x for x in d["shape"]] == list(port.shape), (name, port)
        check_contract(name, contract, contract)


def _scaled_emotion(path, factor: float):
    """The shipped emotion model with its probabilities multiplied by `factor`: the right interface, and outputs
    that are no probabilities (its own seeded reference still matches itself)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(default_registry().shipped_path("emotion")))
    out = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [f"{out}.raw" if o == out else o for o in node.output]
    model.graph.initializer.append(numpy_helper.from_array(np.array(factor, np.float32), "scale"))
    model.graph.node.append(helper.make_node("Mul", [f"{out}.raw", "scale"], [out]))
    onnx.save(model, str(path))
    return path


def test_a_model_out_of_range_on_the_bridges_own_inputs_is_refused(publisher, device, server, tmp_path):
    """Its own reference matches itself; on real face crops its 'probabilities' reach 5: refused."""
    scaled = _scaled_emotion(tmp_path / "scaled.onnx", 5.0)
    with pytest.raises(PublishError, match=r"emotion_probs in \[.*on the bridge's own input"):
        publisher.publish(scaled, model="emotion")
    _forge_model_release(publisher, "emotion", scaled.read_bytes(), _self_attested(scaled))
    code, out = cli_install(server.url, device.state, tmp_path / "home", "--model", "emotion")
    assert (code, out["reason"]) == (19, "smoke-test-failed"), out
    assert "outside the [0, 1] its consumers accept" in out["message"]
    recovers(publisher, device, server)


def test_every_shipped_model_passes_the_bridges_own_inputs():
    from bridge.updates.bridge_inputs import check_on_bridge_inputs, index
    from bridge.updates.smoke import ReleaseSession

    registry = default_registry()
    assert set(index()["models"]) >= {"face_landmark", "iris_landmark", "emotion", "lipsync", "regressor"}
    for model in index()["models"]:
        assert check_on_bridge_inputs(model, ReleaseSession(registry.shipped_path(model))) >= 1, model


def test_the_reference_inputs_tool_rebuilds_the_same_ranges_and_checks_the_shipped_models():
    import subprocess
    import sys

    from tests.helpers import ROOT
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "make_reference_inputs.py"), "--check"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
