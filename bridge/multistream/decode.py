"""Images from the wire to the batched service's input (uint8 RGB, HxWx3), decoded where it pays.

JPEG goes to nvJPEG (torchvision.io.decode_jpeg on the service's GPU) when the service runs on a CUDA device: the
decoded frame is already where the tracker reads it, and the host does no pixel work at all (a 480x360 JPEG is
about 1.5 ms of CPU in OpenCV; at 30,000 frames a second that is 45 cores). Elsewhere OpenCV decodes on the CPU.
`library="nvimgcodec"` decodes with nvImageCodec instead (`facebridge serve --jpeg-decoder nvimgcodec`): a decoder
a thread, on that thread's own high-priority stream (torchvision's one decoder a process decodes on a stream of its
own at normal priority, behind the passes' kernels), an image it cannot decode refused alone.
Raw frames (loopback clients only) are wrapped without a copy. An image is sized from its header before any pixel
work (`measure`): a raw image's declared size must match its bytes, a JPEG's start-of-frame must be there and end
with its end-of-image marker (a truncated file), both within MIN_SIDE..MAX_PIXELS. Every refusal is a `BadImage`
with a message for the client naming the fix.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import cv2
import numpy as np

from bridge.errors import FaceBridgeError

log = logging.getLogger(__name__)

JPEG, RAW_RGB, RAW_BGR = 1, 2, 3  # facebridge.v1.ImageFrame.Encoding
MAX_PIXELS = 3840 * 2160
MIN_SIDE = 32  # the batched service's smallest frame (a face needs pixels)
MAX_SEGMENTS = 64  # JPEG segments read looking for the start of frame


class BadImage(ValueError):
    """An image that cannot be served (its message goes back to the client's log)."""


class WrongSize(BadImage):
    """A JPEG that decodes to another size than its header says (damaged, or made to)."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame marker, without decoding; None if there is none among its first
    MAX_SEGMENTS segments (a camera's JPEG has a handful before it: a crafted one costs no more than that)."""
    i, n = 2, len(data)
    if data[:2] != b"\xff\xd8":
        return None
    for _ in range(MAX_SEGMENTS):
        if i + 9 >= n or data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if length < 2:
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + length
    return None


class ImageDecoder:
    """decode(encoding, data, width, height) -> (frame, (height, width)). device: the service's torch device."""

    def __init__(self, device: str = "cpu", allow_raw: bool = True, gpu_jpeg: bool | None = None,
                 library: str = "torchvision") -> None:
        """library: the GPU's JPEG decoder, torchvision or nvimgcodec (the latter must be installed: a one-line
        FaceBridgeError says how)."""
        self.device = device
        self.allow_raw = allow_raw
        self._torch = self._nvimgcodec = None
        on_gpu = str(device).startswith("cuda")
        if gpu_jpeg is None:
            gpu_jpeg = on_gpu
        if gpu_jpeg and library == "nvimgcodec" and on_gpu:
            try:
                import torch
                from nvidia import nvimgcodec
            except ImportError as e:
                raise FaceBridgeError(f"--jpeg-decoder nvimgcodec: nvImageCodec is not installed ({e})",
                                      "pip install nvidia-nvimgcodec-cu13 (CUDA 13; -cu12 for CUDA 12), or leave "
                                      "--jpeg-decoder out") from None
            self._torch, self._nvimgcodec = torch, nvimgcodec
            self._nv_params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=nvimgcodec.SRGB)
        elif gpu_jpeg:
            try:
                # optional extra: torch (gpu), about 1.5 s to import
                import torch
                from torchvision.io import decode_jpeg

                self._torch, self._decode_jpeg = torch, decode_jpeg
            except ImportError as e:
                log.warning("nvJPEG is not available (%s); JPEG is decoded on the CPU", e)
                gpu_jpeg = False
        self.gpu_jpeg = bool(gpu_jpeg and on_gpu)
        self.name = ("gpu (nvimgcodec)" if self._nvimgcodec is not None else "gpu (nvjpeg)") if self.gpu_jpeg \
            else "cpu (opencv)"
        self._streams = threading.local()  # each decoding thread's own CUDA stream (see _nvjpeg)

    def measure(self, encoding: int, data: bytes, width: int = 0, height: int = 0, raw_ok: bool | None = None
                ) -> tuple[int, int]:
        """(height, width) of an image from its header alone, or BadImage: what can be refused before decoding.
        raw_ok: raw images are allowed for this client (default: the decoder's `allow_raw`)."""
        if encoding == JPEG:
            size = _jpeg_size(data)
            if size is None:
                raise BadImage(f"not a baseline JPEG ({len(data)} bytes); send camera frames encoded as JPEG")
            w, h = size
            _check_size(w, h, "a JPEG")
            if (width and width != w) or (height and height != h):
                raise BadImage(f"the JPEG is {w}x{h} but the message says {width}x{height}; send the image's own "
                               "size or 0")
            if not data.endswith(b"\xff\xd9") and data.rstrip(b"\0")[-2:] != b"\xff\xd9":  # padding: a copy
                raise BadImage(f"the JPEG of {len(data)} bytes is truncated (no end-of-image marker); send whole "
                               "frames")
            return h, w
        if encoding in (RAW_RGB, RAW_BGR):
            if not (self.allow_raw if raw_ok is None else raw_ok):
                raise BadImage("raw images are accepted only from a client on loopback; send JPEG")
            _check_size(width, height, "a raw image")
            if len(data) != width * height * 3:
                raise BadImage(f"a raw image of {width}x{height} needs {width * height * 3} bytes, got {len(data)}; "
                               "send width x height x 3 bytes")
            return height, width
        raise BadImage(f"unknown image encoding {encoding}; send JPEG (1), RAW_RGB (2) or RAW_BGR (3)")

    def decode(self, encoding: int, data: bytes, width: int = 0, height: int = 0, raw_ok: bool | None = None):
        return self.decode_measured(encoding, data, self.measure(encoding, data, width, height, raw_ok))

    def decode_measured(self, encoding: int, data: bytes, hw: tuple[int, int]):
        """decode of an image `measure` already took (its (height, width) hw): no header read again."""
        h, w = hw
        if encoding in (RAW_RGB, RAW_BGR):
            frame = np.frombuffer(bytearray(data), np.uint8).reshape(h, w, 3)  # writable, for torch
            return (frame[..., ::-1] if encoding == RAW_BGR else frame), (h, w)
        return self._jpeg(data, h, w)

    def decode_jpegs(self, datas: list[bytes], sizes: list[tuple[int, int]]) -> list:
        """Many JPEGs already measured (`measure`: (height, width) each) -> each one's (frame, (h, w)), or the
        BadImage it is. On the GPU all in one nvJPEG call (torchvision's decode_jpeg of a list: one batched
        decode, one call's Python overhead); if that call refuses the batch (it gives no partial results), each
        is decoded alone so a bad image costs only itself. On the CPU each alone (OpenCV)."""
        return self.start_jpegs(datas, sizes)()

    def start_jpegs(self, datas: list[bytes], sizes: list[tuple[int, int]]) -> Callable[[], list]:
        """decode_jpegs in two parts: the decode, now, and the function it returns, which makes its result on
        whichever thread calls it. After a batched nvJPEG call that function checks each frame against its
        measured size and views it as (H, W, 3): microseconds a frame that a batch's decoding thread, the engine's
        busiest, need not spend (JpegBatches calls it on its finishing thread)."""
        if self._nvimgcodec is not None:
            frames = self._nvimgcodec_batch(datas)
            return lambda: [BadImage("nvImageCodec cannot decode this JPEG") if f is None else _as_measured(f, hw)
                            for f, hw in zip(frames, sizes)]
        if self.gpu_jpeg and len(datas) > 1:
            encoded = [self._host_tensor(d) for d in datas]
            try:
                frames = self._nvjpeg(encoded)
            except RuntimeError:
                frames = None  # one of them is bad: each alone below
            if frames is not None:
                def made(_encoded=encoded) -> list:  # the inputs go with it: freed where it is, not here
                    # (H, W, 3) views of nvJPEG's (3, H, W): the pass's stack makes them contiguous in its own copy
                    return [_as_measured(f.permute(1, 2, 0), hw) for f, hw in zip(frames, sizes)]
                return made
        out = []
        for data, (h, w) in zip(datas, sizes):
            try:
                out.append(self._jpeg(data, h, w))
            except BadImage as e:
                out.append(e)
        return lambda: out

    def _nvjpeg(self, encoded):
        """torchvision's nvJPEG decode (one image, or a list in one batched call) on this thread's own CUDA stream,
        drained first. nvJPEG's hardware engine writes its outputs before the work queued on its stream has run
        (pytorch/vision#9606, meta-pytorch/torchcodec#1634), and the caching allocator hands the decode blocks freed
        on that stream: on the stream the passes use, that was memory a queued pass still read (NaN landmarks for
        dozens of streams at once, H100). Here only decodes run on the stream, and the call returns once its decode
        is done on the GPU (the passes run on other streams and never wait on this one; the JPEG thread waits). The
        stream has the high priority: a decode's few kernels go before those of a pass already queued, instead of
        after them (the passes' frames wait for their decode in any case)."""
        torch, stream = self._torch, self._thread_stream()
        with torch.cuda.stream(stream):
            stream.synchronize()
            frames = self._decode_jpeg(encoded, device=self.device)
            stream.synchronize()
            return frames

    def _thread_stream(self):
        """The calling thread's own high-priority CUDA stream, made on its first decode."""
        stream = getattr(self._streams, "stream", None)
        if stream is None:
            stream = self._streams.stream = self._torch.cuda.Stream(self.device, priority=-1)
        return stream

    def _nvimgcodec_batch(self, datas: list) -> list:
        """nvImageCodec's decode of many JPEGs on this thread's own decoder and high-priority stream: each an
        (H, W, 3) uint8 RGB tensor in PyTorch's memory, allocated and copied on that stream (so the passes' rule for
        the frames they read, record_stream, holds as for torchvision's), or None where it failed. Returns once the
        copies are done: nvImageCodec's own images are freed after."""
        torch, nv = self._torch, self._nvimgcodec
        local, stream, codes = self._streams, self._thread_stream(), []
        if getattr(local, "nv", None) is None:
            local.nv = nv.Decoder(options=":num_cuda_streams=1")
        for d in datas:  # a code stream reads its JPEG's header: one that refuses it costs only its own image
            try:
                codes.append(nv.CodeStream(np.frombuffer(d, np.uint8) if isinstance(d, (bytes, bytearray)) else d))
            except Exception:  # noqa: BLE001 - nvImageCodec's own error types
                codes.append(None)
        at = [i for i, c in enumerate(codes) if c is not None]
        frames: list = [None] * len(datas)
        with torch.cuda.stream(stream):
            try:
                images = local.nv.decode([codes[i] for i in at], params=self._nv_params,
                                         cuda_stream=stream.cuda_stream) if at else []
            except Exception:  # noqa: BLE001 - the batch refused: each alone, so a bad image costs only itself
                images = [self._nv_one(local.nv, codes[i], stream) for i in at] if len(at) > 1 else [None] * len(at)
            for i, image in zip(at, images):
                if image is not None:
                    frames[i] = torch.as_tensor(image, device=self.device).clone()
            stream.synchronize()
        return frames

    def _nv_one(self, decoder, code, stream):
        try:
            return decoder.decode([code], params=self._nv_params, cuda_stream=stream.cuda_stream)[0]
        except Exception:  # noqa: BLE001 - as in _nvimgcodec_batch
            return None

    def encoded(self, data):
        """A JPEG's bytes as decode_jpegs and start_jpegs take them fastest: for nvJPEG already the uint8 tensor it
        reads (`_host_tensor`), so the thread that calls this, not the decoding one, makes it (the engine's readers
        of its front ends: 5% of its decoding thread's samples were this, H100); as they are on the CPU and for
        nvImageCodec (it reads the array)."""
        return self._host_tensor(data) if self.gpu_jpeg and self._nvimgcodec is None else data

    def _host_tensor(self, data):
        """The encoded bytes as a uint8 tensor for nvJPEG: a numpy array (an engine ring slot, multistream/rings.py) as
        it lies, without a copy; bytes copied once (torch needs a writable buffer); a tensor (`encoded`) as it is."""
        torch = self._torch
        if isinstance(data, torch.Tensor):
            return data
        if isinstance(data, np.ndarray):
            return torch.from_numpy(data)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def _jpeg(self, data: bytes, h: int, w: int):
        if self._nvimgcodec is not None:  # a batch of one: the same checks as start_jpegs' batches
            return _or_raise(self.start_jpegs([data], [(h, w)])()[0])
        if self.gpu_jpeg:
            raw = self._host_tensor(data)
            try:
                frame = self._nvjpeg(raw)  # (3, H, W) uint8 RGB on the GPU
            except RuntimeError as e:
                raise BadImage(f"nvJPEG cannot decode this JPEG ({str(e).splitlines()[0][:120]})") from None
            frame, _ = _or_raise(_as_measured(frame.permute(1, 2, 0), (h, w)))
            return frame.contiguous(), (h, w)

        frame = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if frame is None:
            raise BadImage(f"the JPEG of {len(data)} bytes does not decode")
        _or_raise(_as_measured(frame, (h, w)))
        return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB), (h, w)


def _as_measured(frame, hw: tuple[int, int]):
    """(frame, hw) for a decoded (H, W, 3) frame of the size its header said, else the BadImage it is."""
    if tuple(frame.shape[:2]) == hw:
        return frame, hw
    return WrongSize(f"the JPEG decodes to {frame.shape[1]}x{frame.shape[0]}, not {hw[1]}x{hw[0]}")


def _or_raise(decoded):
    """A batch's result for one image, (frame, hw), for a caller of one image: its BadImage raised."""
    if isinstance(decoded, BadImage):
        raise decoded
    return decoded


def _check_size(width: int, height: int, what: str) -> None:
    if min(width, height) < MIN_SIDE or width * height > MAX_PIXELS:
        raise BadImage(f"{what} of {width}x{height} is outside {MIN_SIDE}x{MIN_SIDE}..{MAX_PIXELS} pixels; send "
                       "camera frames of a usual size (e.g. 640x480)")
