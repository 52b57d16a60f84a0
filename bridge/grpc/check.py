"""`facebridge grpc-check`: look at a running bridge's gRPC stream with the package's own client, the way a
receiver would (no grpcurl needed). It asks GetStatus, subscribes, and reads the header and a few frames, then
says in a few lines what arrived; a bridge that cannot be reached, refuses the token or sends nothing in time is
one line naming the cause and the fix."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bridge.errors import FaceBridgeError
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc


@dataclass
class CheckResult:
    status: dict = field(default_factory=dict)
    headers: list[dict] = field(default_factory=list)
    frames: int = 0
    seconds: float = 0.0
    last: dict = field(default_factory=dict)


def check_stream(address: str, *, token: str | None = None, tls_ca: str | None = None, frames: int = 30,
                 timeout_s: float = 10.0) -> CheckResult:
    if tls_ca:
        try:
            channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(Path(tls_ca).read_bytes()))
        except OSError as e:
            raise FaceBridgeError(f"cannot read --tls-ca {tls_ca} ({e.strerror})", "give the CA's PEM file") from None
    else:
        channel = grpc.insecure_channel(address)
    metadata = [("authorization", f"Bearer {token}")] if token else None
    stub = pb_grpc.FaceBridgeServiceStub(channel)
    result = CheckResult()
    try:
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=timeout_s, metadata=metadata)
        result.status = {"server_version": status.server_version, "state": status.state or "running",
                         "subjects": list(status.subjects), "fps": round(status.fps, 1),
                         "subscribers": status.subscribers, "backends": list(status.backends)}
        started = time.monotonic()
        stream = stub.Subscribe(pb.SubscribeRequest(), timeout=timeout_s, metadata=metadata)
        for message in stream:
            if message.HasField("header"):
                h = message.header
                result.headers.append({"subject": h.subject, "curves": len(h.curve_names),
                                       "frame_rate": round(h.frame_rate, 2),
                                       "models": dict(h.model_versions)})
            else:
                f = message.frame
                result.frames += 1
                tc = f.timecode
                result.last = {"subject": f.subject, "seq": f.seq, "face_found": f.face_found,
                               "curves": len(f.curves), "jawOpen": round(f.curves[17], 3) if len(f.curves) > 17
                               else None, "timecode": f"{tc.frame} +{tc.subframe:.2f} @ {tc.rate_numerator}/"
                               f"{tc.rate_denominator}" if f.HasField("timecode") else ""}
                if result.frames >= frames:
                    stream.cancel()
                    break
        result.seconds = time.monotonic() - started
    except grpc.RpcError as e:
        raise _refused(address, e, timeout_s, result) from None
    finally:
        channel.close()
    return result


def _refused(address: str, e, timeout_s: float, result: CheckResult) -> FaceBridgeError:
    code = e.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return FaceBridgeError(f"nothing answers gRPC on {address} ({e.details()})",
                               "start `facebridge run --grpc HOST:PORT` there, or give its address")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return FaceBridgeError(f"the bridge on {address} refused the token ({e.details()})",
                               "pass the bridge's --grpc-token as --token")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        got = f"{result.frames} frames" if result.status else "no status"
        return FaceBridgeError(f"the bridge on {address} answered too slowly: {got} within {timeout_s:g} s",
                               "is its source running (a face in view, a file not at its end)? try --timeout 30")
    return FaceBridgeError(f"gRPC {code.name} from {address}: {e.details()}", "check the address and the bridge")


def report_lines(address: str, r: CheckResult) -> list[str]:
    s = r.status
    lines = [f"{address}: facebridge {s['server_version'] or '?'}, {s['state']}, subjects "
             f"{', '.join(s['subjects']) or 'none yet'}, {s['fps']} fps, {s['subscribers']} subscribers"]
    for h in r.headers:
        lines.append(f"header: subject {h['subject']}, {h['curves']} curves, {h['frame_rate']:g} fps")
    rate = f" ({r.frames / r.seconds:.1f} a second)" if r.seconds > 0 else ""
    last = r.last
    if last:
        lines.append(f"{r.frames} frames in {r.seconds:.1f} s{rate}; last: subject {last['subject']}, seq "
                     f"{last['seq']}, face {'yes' if last['face_found'] else 'no'}, jawOpen {last['jawOpen']}, "
                     f"timecode {last['timecode'] or '-'}")
    return lines
