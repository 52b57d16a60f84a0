"""A model's contract: the inputs the bridge feeds it and the outputs its consumers read, checked on publish and
on install, so that a model with another model's interface (the iris model published as the emotion model) never
reaches a stream.

The contract is the shipped model's own interface (the file bridge/models/manifest.json and the one-model
manifests pin by sha256, which the stages are written against): every input and output name, its element type,
its rank, each fixed dimension's size, and which dimensions are free. A free dimension (the batch the serving
path stacks streams into, the frames of the lip-sync model) must stay free in a release: a model fixed at one
item passes a one-item smoke test and then breaks a batch. A release's reference tolerances are bounded too
(MAX_TOLERANCE, or `max_tolerance` in the model's manifest entry), so a loose tolerance cannot turn the smoke
test into a formality.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import onnxruntime as ort

from bridge.models.registry import ShippedModel
from bridge.updates import reasons

MAX_TOLERANCE = 1e-2  # atol and rtol of a release's reference, unless its manifest entry says `max_tolerance`


@dataclass(frozen=True)
class Port:
    name: str
    type: str  # ONNX Runtime's element type, e.g. "tensor(float)"
    shape: tuple  # int: a fixed size; None: a free dimension (ONNX symbolic or unknown)

    def describe(self) -> str:
        dims = ", ".join("*" if d is None else str(d) for d in self.shape)
        return f"{self.name} {self.type[7:-1] if self.type.startswith('tensor(') else self.type}[{dims}]"


@dataclass(frozen=True)
class Contract:
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]


def ports(specs) -> tuple[Port, ...]:
    """Ports from ONNX Runtime's NodeArg list (get_inputs() / get_outputs())."""
    return tuple(Port(s.name, s.type, tuple(d if isinstance(d, int) and d >= 0 else None for d in s.shape))
                 for s in specs)


def session_contract(session) -> Contract:
    """The contract an ONNX Runtime InferenceSession offers."""
    return Contract(ports(session.get_inputs()), ports(session.get_outputs()))


@lru_cache(maxsize=16)
def _file_contract(path: str) -> Contract:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return session_contract(ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"]))


def shipped_contract(shipped: ShippedModel) -> Contract:
    """The contract of a shipped model: its ONNX interface. A model shipped in another format takes no whole-model
    release (nothing could check what it would be fed)."""
    if Path(shipped.path).suffix != ".onnx":
        raise reasons.Incompatible(f"{shipped.name} ships as {Path(shipped.path).suffix} with no ONNX contract; it "
                                   "takes no whole-model release", "publish releases for the ONNX models only")
    return _file_contract(str(shipped.path))


def check_contract(model: str, release: Contract, shipped: Contract) -> None:
    """Incompatible unless `release` takes exactly the inputs and gives exactly the outputs of `shipped`."""
    sides = (("inputs", release.inputs, shipped.inputs), ("outputs", release.outputs, shipped.outputs))
    for what, got, want in sides:  # names first: they tell another model's interface from a wrong shape
        if {p.name for p in got} != {p.name for p in want}:
            raise reasons.Incompatible(
                f"the release of {model} has {what} {[p.name for p in got][:6]}, the bridge's {model} has "
                f"{[p.name for p in want][:6]} (another model's interface)",
                f"publish a model with {model}'s inputs and outputs")
    for what, got, want in sides:
        mine = {p.name: p for p in got}
        for port in want:
            other = mine[port.name]
            if other.type != port.type or len(other.shape) != len(port.shape) or any(
                    (a is None) != (b is None) or (b is not None and a != b) for a, b in zip(other.shape, port.shape)):
                free = " (a * dimension must stay free: the bridge batches streams there)" if any(
                    a is not None and b is None for a, b in zip(other.shape, port.shape)) else ""
                raise reasons.Incompatible(f"the release of {model} has {what[:-1]} {other.describe()}, the bridge "
                                           f"needs {port.describe()}{free}",
                                           f"publish a model with {model}'s input and output shapes and types")


def check_tolerance(shipped: ShippedModel, atol: float, rtol: float) -> None:
    """SmokeTestFailed when a release's reference tolerance exceeds the model's bound."""
    bound = float(shipped.entry.get("max_tolerance", MAX_TOLERANCE))
    if atol > bound or rtol > bound:
        raise reasons.SmokeTestFailed(f"the release of {shipped.name} allows its outputs to differ from its reference "
                                      f"by atol {atol:g} + rtol {rtol:g}, more than the bound {bound:g} for this model",
                                      f"publish with tolerances of at most {bound:g}")
