"""The default address of every FaceBridge listener and output, in one place. Everything binds or sends to
127.0.0.1 unless the user names another host (docs/ARCHITECTURE.md). Imports nothing of the house."""

LIVE_LINK_FACE = "127.0.0.1:11111"  # Unreal's Live Link Face source (UDP)
VMC = "127.0.0.1:39539"  # a VMC/OSC Marionette (VSeeFace, Warudo, ...)
IFACIALMOCAP = "127.0.0.1:49983"  # an iFacialMocap receiver (VSeeFace, Warudo, ...)
OSC_REMOTE = "127.0.0.1:8000"  # our OSC remote control listener (the Live Link Face app's OSC port)
GRPC = "127.0.0.1:50051"  # our gRPC stream (Unreal plugin, Omniverse)
MONITOR = "127.0.0.1:8910"  # the monitor page, /metrics, /healthz, /readyz
SUPERLINK = "127.0.0.1:9092"  # fedagent's Flower SuperLink (Fleet API)
SUPERLINK_CONTROL = "127.0.0.1:9093"  # its Control API (flwr run/list/stop, key registration): loopback only


def port_of(address: str) -> int:
    """The port of a HOST:PORT default above."""
    return int(address.rpartition(":")[2])
