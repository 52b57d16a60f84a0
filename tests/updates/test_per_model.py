"""One model's refused release never blocks another's: an install of every model takes each on its own, reports
each model's outcome (with its reason), and exits `some-refused` (32) when any was refused; the refused model's
active release keeps serving, and once it is republished it installs too."""
import hashlib

from bridge.models.registry import ModelRegistry
from tests.updates.kit import cli_install, emotion_model


def test_a_refused_lipsync_release_does_not_block_the_emotion_release(publisher, device, server, tmp_path):
    assert publisher.publish(emotion_model(tmp_path / "surprised.onnx"), model="emotion") == 1
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    files["adapter.npz"] = b"PK\x03\x04 signed, but not a readable archive"
    bundle["files"]["adapter.npz"] = {"sha256": hashlib.sha256(files["adapter.npz"]).hexdigest(),
                                      "length": len(files["adapter.npz"])}
    publisher.forge_release(files, bundle)
    code, out = cli_install(server.url, device.state, tmp_path / "home")  # every model this device has
    assert code == 32 and out["status"] == "some-refused", out
    by_model = {r["model"]: r for r in out["results"]}
    assert by_model["emotion"]["status"] == "installed" and by_model["emotion"]["release"] == 1
    assert by_model["lipsync"]["status"] == "refused" and by_model["lipsync"]["release"] == 1
    assert by_model["lipsync"]["refusal"]["reason"] == "malformed"
    assert set(by_model) == {"emotion", "lipsync"}  # models without a release are not listed
    registry = ModelRegistry(device.state)
    assert registry.active("emotion").release == 1
    device.assert_intact(1)

    release = publisher.publish()
    code, out = cli_install(server.url, device.state, tmp_path / "home")
    assert code == 0 and out["status"] == "ok", out
    assert {r["model"]: r["status"] for r in out["results"]} == {"emotion": "up-to-date", "lipsync": "installed"}
    device.assert_intact(release)


def test_a_single_model_refused_is_raised_with_its_own_exit_code(publisher, device, server, tmp_path):
    bundle, files = publisher.release_files()
    bundle["release"] = 2
    bundle["contract"] = 99
    publisher.forge_release(files, bundle)
    code, out = cli_install(server.url, device.state, tmp_path / "home", "--model", "lipsync")
    assert (code, out["reason"]) == (18, "incompatible"), out
