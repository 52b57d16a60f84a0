"""iFacialMocap sink: every frame as the iFacialMocap app's UDP text datagram (bridge/formats/ifacialmocap.py), for
the avatar apps that take it (VMagicMirror, VRCFaceTracking for VRChat, VNyan, Warudo, VSeeFace). Those apps
listen on port 49983 for the phone; point them at this machine as the phone's address."""
from __future__ import annotations

from bridge.formats.ifacialmocap import DEFAULT_PORT, encode_ifm
from bridge.frame import FaceFrame
from bridge.sinks.udp import UdpSink


class IFacialMocapSink(UdpSink):
    """Streams FaceFrames as iFacialMocap text over UDP (default port 49983)."""

    name = "ifacialmocap"
    default_port = DEFAULT_PORT
    address_label = "iFacialMocap address"
    receiver_hint = "start the avatar app's iFacialMocap receiver or check the port"

    def __init__(self, address: str = f"127.0.0.1:{DEFAULT_PORT}") -> None:
        super().__init__(address)

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        return [encode_ifm(frame)]
