"""RemotePipeline: `facebridge run --remote HOST:PORT` tracks on a `facebridge serve` box instead of this machine.

It stands where FacePipeline stands in the runner: `process(frame)` sends the frame (JPEG) on one long-lived Track
stream and returns the FaceFrame the server sends back, which then goes to the local sinks like any other. One
frame is in flight at a time, so the runner's latest-wins queue in front of it keeps the newest camera frame next
(a laptop without a GPU never builds a backlog); a frame the server dropped, or one that takes longer than
`timeout_s`, is counted as a bad frame and the stream goes on.

One of the kinds of runtime/pipeline_protocol.py's `Pipeline`: one step, no face model and no output guard here (the
server runs the models, describes with its own calibration profiles and announces the versions with each frame).
"""
from __future__ import annotations

import queue
import time

import grpc

from bridge.errors import FaceBridgeError, RunEnded
from bridge.frame import FaceFrame, Frame
from bridge.serving.client import TrackClient, open_channel


class RemoteFrameLost(FaceBridgeError):
    """The server dropped this frame or did not answer in time (counted, the stream goes on)."""


class RemotePipeline:
    def __init__(self, address: str, subject: str = "FaceBridge", token: str | None = None,
                 tls_ca: str | None = None, encoding: str = "jpeg", timeout_s: float = 5.0) -> None:
        self.address = address
        self.encoding = encoding
        self.timeout_s = timeout_s
        self._versions: dict[str, str] = {}

        channel = open_channel(address, tls_ca)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            channel.close()
            raise FaceBridgeError(f"cannot reach facebridge serve at {address}",
                                  "start `facebridge serve` there (beyond 127.0.0.1 with --grpc-token), or fix "
                                  "--remote HOST:PORT") from None
        self._client = TrackClient(address, subject=subject, token=token, channel=channel)
        self._channel = channel
        self.backend_name = f"remote {address}"

    @property
    def model_versions(self) -> dict[str, str]:
        """The versions the server announced with its last frame ({} before the first)."""
        return self._versions

    @property
    def replica(self) -> str:
        return self._client.report.replica

    def process(self, frame: Frame) -> FaceFrame:
        client = self._client
        if client.error is not None:
            raise self._ended(client.error)
        client.send_frame(frame, encoding=self.encoding)
        end = time.perf_counter() + self.timeout_s
        while (left := end - time.perf_counter()) > 0:
            try:
                item = client.results.get(timeout=left)
            except queue.Empty:
                break
            if item is None:  # the stream ended
                client.results.put(None)
                if client.error is not None:
                    raise self._ended(client.error)
                raise RunEnded(f"facebridge serve on {self.address} closed the stream",
                               "is the server still running? start it again and rerun")
            face, _dropped, _replica = item
            if face is None and client.refused and client.refused[-1][0] == frame.seq:
                raise RemoteFrameLost(f"the server refused frame {frame.seq}: {client.refused[-1][1]}",
                                      "the frame is lost; the stream goes on")
            if face is None:
                raise RemoteFrameLost(f"the server dropped frame {frame.seq} (it waited past its deadline)",
                                      "the server is overloaded; add replicas or lower --max-streams")
            if face.seq >= frame.seq:
                self._versions = face.model_versions
                return face
        raise RemoteFrameLost(f"no answer for frame {frame.seq} within {self.timeout_s:.0f} s",
                              f"is facebridge serve on {self.address} overloaded or gone?")

    def track(self, frame: Frame) -> Frame:
        """Nothing is tracked here: the frame is handed on (`overlaps()` is False: the runner runs `process`)."""
        return frame

    def describe(self, frame: Frame) -> FaceFrame:
        """`process` of the frame."""
        return self.process(frame)

    def overlaps(self) -> bool:
        """One frame in flight at a time: nothing to overlap."""
        return False

    def wrap_faces(self, wrap) -> bool:
        """One face: nothing to wrap apart."""
        return False

    def guarded(self) -> bool:
        """False: the server made the frames; one it lost is the runner's bad frame."""
        return False

    def reset_description(self) -> None:
        """Nothing to forget here: the server describes."""

    def run_deferred(self) -> None:
        """Nothing is deferred here."""

    def swappable_models(self) -> list[str]:
        """None here: the server swaps its own models (`facebridge serve --updates`)."""
        return []

    def use_swapper(self, swapper) -> None:
        """Nothing to take: no model runs here."""

    def build_session(self, component: str) -> None:
        """Never asked (no swappable models): None."""
        return None

    def face_models(self) -> None:
        """None: the face models run on the server."""
        return None

    def detector_summary(self, verbose: bool = True) -> str:
        """'': the server detects."""
        return ""

    def face(self, subject: str) -> None:
        """None: the server describes with its own calibration profiles."""
        return None

    def _ended(self, error) -> RunEnded:
        """The stream's gRPC error as the one line that ends the run (a refused token is never retried)."""
        code = error.code()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return RunEnded(f"facebridge serve on {self.address} refused the token ({error.details()})",
                            "pass the server's --grpc-token as --remote-token")
        return RunEnded(f"facebridge serve on {self.address} ended the stream: {code.name}: {error.details()}",
                        "check the server's address, token and --max-streams, then run again")

    def close(self) -> None:
        """End the Track stream and close the channel."""
        self._client.close()
        self._channel.close()
