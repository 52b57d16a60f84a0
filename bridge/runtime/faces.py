"""Several faces in one run (`--faces N`): where each face's VMC stream goes (each face's describe step is wrapped
through the pipeline's `wrap_faces`, bridge/multiface.py).

Live Link Face and gRPC carry a subject name in every packet, so one sink serves every face. A VMC receiver
drives one avatar and VMC has no subject, so every face gets its own VMC target: the addresses given to --vmc
(comma-separated, one per face), or, from one address, the same host on consecutive ports (39539, 39540, ...).
"""
from __future__ import annotations

from bridge import ports
from bridge.errors import FaceBridgeError
from bridge.sinks.udp import parse_host_port


def vmc_targets(vmc: str, subjects: list[str]) -> list[tuple[str | None, str]]:
    """(subject, address) per VMC sink: one face sends to `vmc` as given (subject None: every frame)."""
    if len(subjects) == 1:
        return [(None, vmc)]
    addresses = [a.strip() for a in vmc.split(",")]
    if len(addresses) == 1:
        host, port = parse_host_port(addresses[0], ports.port_of(ports.VMC), "VMC address")
        host = f"[{host}]" if ":" in host else host
        addresses = [f"{host}:{port + k}" for k in range(len(subjects))]
    if len(addresses) != len(subjects):
        raise FaceBridgeError(f"--vmc names {len(addresses)} receivers for {len(subjects)} faces",
                              "give one HOST:PORT per face, comma-separated, or one address for consecutive ports")
    return list(zip(subjects, addresses))

