from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubscribeRequest(_message.Message):
    __slots__ = ("subjects", "max_frame_rate")
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAME_RATE_FIELD_NUMBER: _ClassVar[int]
    subjects: _containers.RepeatedScalarFieldContainer[str]
    max_frame_rate: float
    def __init__(self, subjects: _Optional[_Iterable[str]] = ..., max_frame_rate: _Optional[float] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("header", "frame")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    header: StreamHeader
    frame: Frame
    def __init__(self, header: _Optional[_Union[StreamHeader, _Mapping]] = ..., frame: _Optional[_Union[Frame, _Mapping]] = ...) -> None: ...

class StreamHeader(_message.Message):
    __slots__ = ("subject", "layout_id", "curve_names", "emotion_names", "viseme_names", "parameters", "model_versions", "frame_rate")
    class ModelVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_ID_FIELD_NUMBER: _ClassVar[int]
    CURVE_NAMES_FIELD_NUMBER: _ClassVar[int]
    EMOTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    VISEME_NAMES_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    FRAME_RATE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    layout_id: int
    curve_names: _containers.RepeatedScalarFieldContainer[str]
    emotion_names: _containers.RepeatedScalarFieldContainer[str]
    viseme_names: _containers.RepeatedScalarFieldContainer[str]
    parameters: ParameterLayout
    model_versions: _containers.ScalarMap[str, str]
    frame_rate: float
    def __init__(self, subject: _Optional[str] = ..., layout_id: _Optional[int] = ..., curve_names: _Optional[_Iterable[str]] = ..., emotion_names: _Optional[_Iterable[str]] = ..., viseme_names: _Optional[_Iterable[str]] = ..., parameters: _Optional[_Union[ParameterLayout, _Mapping]] = ..., model_versions: _Optional[_Mapping[str, str]] = ..., frame_rate: _Optional[float] = ...) -> None: ...

class ParameterLayout(_message.Message):
    __slots__ = ("model_id", "blocks")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    blocks: _containers.RepeatedCompositeFieldContainer[ParameterBlock]
    def __init__(self, model_id: _Optional[str] = ..., blocks: _Optional[_Iterable[_Union[ParameterBlock, _Mapping]]] = ...) -> None: ...

class ParameterBlock(_message.Message):
    __slots__ = ("name", "size", "unit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    unit: str
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., unit: _Optional[str] = ...) -> None: ...

class Timecode(_message.Message):
    __slots__ = ("frame", "subframe", "rate_numerator", "rate_denominator")
    FRAME_FIELD_NUMBER: _ClassVar[int]
    SUBFRAME_FIELD_NUMBER: _ClassVar[int]
    RATE_NUMERATOR_FIELD_NUMBER: _ClassVar[int]
    RATE_DENOMINATOR_FIELD_NUMBER: _ClassVar[int]
    frame: int
    subframe: float
    rate_numerator: int
    rate_denominator: int
    def __init__(self, frame: _Optional[int] = ..., subframe: _Optional[float] = ..., rate_numerator: _Optional[int] = ..., rate_denominator: _Optional[int] = ...) -> None: ...

class Vector3(_message.Message):
    __slots__ = ("x", "y", "z")
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    Z_FIELD_NUMBER: _ClassVar[int]
    x: float
    y: float
    z: float
    def __init__(self, x: _Optional[float] = ..., y: _Optional[float] = ..., z: _Optional[float] = ...) -> None: ...

class HeadPose(_message.Message):
    __slots__ = ("yaw_deg", "pitch_deg", "roll_deg", "translation_cm")
    YAW_DEG_FIELD_NUMBER: _ClassVar[int]
    PITCH_DEG_FIELD_NUMBER: _ClassVar[int]
    ROLL_DEG_FIELD_NUMBER: _ClassVar[int]
    TRANSLATION_CM_FIELD_NUMBER: _ClassVar[int]
    yaw_deg: float
    pitch_deg: float
    roll_deg: float
    translation_cm: Vector3
    def __init__(self, yaw_deg: _Optional[float] = ..., pitch_deg: _Optional[float] = ..., roll_deg: _Optional[float] = ..., translation_cm: _Optional[_Union[Vector3, _Mapping]] = ...) -> None: ...

class EyeGaze(_message.Message):
    __slots__ = ("yaw_deg", "pitch_deg")
    YAW_DEG_FIELD_NUMBER: _ClassVar[int]
    PITCH_DEG_FIELD_NUMBER: _ClassVar[int]
    yaw_deg: float
    pitch_deg: float
    def __init__(self, yaw_deg: _Optional[float] = ..., pitch_deg: _Optional[float] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("subject", "layout_id", "seq", "capture_time", "source_time", "timecode", "face_found", "curves", "head", "eye_left", "eye_right", "emotions", "visemes", "parameters", "confidence", "region_confidence", "latencies_ms", "dropped_frames", "send_time")
    class RegionConfidenceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class LatenciesMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TIME_FIELD_NUMBER: _ClassVar[int]
    TIMECODE_FIELD_NUMBER: _ClassVar[int]
    FACE_FOUND_FIELD_NUMBER: _ClassVar[int]
    CURVES_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    EYE_LEFT_FIELD_NUMBER: _ClassVar[int]
    EYE_RIGHT_FIELD_NUMBER: _ClassVar[int]
    EMOTIONS_FIELD_NUMBER: _ClassVar[int]
    VISEMES_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REGION_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    LATENCIES_MS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FRAMES_FIELD_NUMBER: _ClassVar[int]
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    subject: str
    layout_id: int
    seq: int
    capture_time: float
    source_time: float
    timecode: Timecode
    face_found: bool
    curves: _containers.RepeatedScalarFieldContainer[float]
    head: HeadPose
    eye_left: EyeGaze
    eye_right: EyeGaze
    emotions: _containers.RepeatedScalarFieldContainer[float]
    visemes: _containers.RepeatedScalarFieldContainer[float]
    parameters: _containers.RepeatedScalarFieldContainer[float]
    confidence: float
    region_confidence: _containers.ScalarMap[str, float]
    latencies_ms: _containers.ScalarMap[str, float]
    dropped_frames: int
    send_time: float
    def __init__(self, subject: _Optional[str] = ..., layout_id: _Optional[int] = ..., seq: _Optional[int] = ..., capture_time: _Optional[float] = ..., source_time: _Optional[float] = ..., timecode: _Optional[_Union[Timecode, _Mapping]] = ..., face_found: _Optional[bool] = ..., curves: _Optional[_Iterable[float]] = ..., head: _Optional[_Union[HeadPose, _Mapping]] = ..., eye_left: _Optional[_Union[EyeGaze, _Mapping]] = ..., eye_right: _Optional[_Union[EyeGaze, _Mapping]] = ..., emotions: _Optional[_Iterable[float]] = ..., visemes: _Optional[_Iterable[float]] = ..., parameters: _Optional[_Iterable[float]] = ..., confidence: _Optional[float] = ..., region_confidence: _Optional[_Mapping[str, float]] = ..., latencies_ms: _Optional[_Mapping[str, float]] = ..., dropped_frames: _Optional[int] = ..., send_time: _Optional[float] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("sources", "backends", "model_versions", "fps", "latency_ms_p50", "latency_ms_p99", "subjects", "subscribers", "frames_published", "frames_dropped", "server_version", "state")
    class ModelVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_P50_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_P99_FIELD_NUMBER: _ClassVar[int]
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    FRAMES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedScalarFieldContainer[str]
    backends: _containers.RepeatedScalarFieldContainer[str]
    model_versions: _containers.ScalarMap[str, str]
    fps: float
    latency_ms_p50: float
    latency_ms_p99: float
    subjects: _containers.RepeatedScalarFieldContainer[str]
    subscribers: int
    frames_published: int
    frames_dropped: int
    server_version: str
    state: str
    def __init__(self, sources: _Optional[_Iterable[str]] = ..., backends: _Optional[_Iterable[str]] = ..., model_versions: _Optional[_Mapping[str, str]] = ..., fps: _Optional[float] = ..., latency_ms_p50: _Optional[float] = ..., latency_ms_p99: _Optional[float] = ..., subjects: _Optional[_Iterable[str]] = ..., subscribers: _Optional[int] = ..., frames_published: _Optional[int] = ..., frames_dropped: _Optional[int] = ..., server_version: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class CalibrateRequest(_message.Message):
    __slots__ = ("subject",)
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    subject: str
    def __init__(self, subject: _Optional[str] = ...) -> None: ...

class CalibrateResponse(_message.Message):
    __slots__ = ("ok", "message")
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    message: str
    def __init__(self, ok: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class ListSubjectsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubjectsResponse(_message.Message):
    __slots__ = ("subjects",)
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    subjects: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subjects: _Optional[_Iterable[str]] = ...) -> None: ...

class ImageFrame(_message.Message):
    __slots__ = ("encoding", "data", "width", "height", "seq", "capture_time", "source_time", "media_time", "frame_rate")
    class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ENCODING_UNSPECIFIED: _ClassVar[ImageFrame.Encoding]
        JPEG: _ClassVar[ImageFrame.Encoding]
        RAW_RGB: _ClassVar[ImageFrame.Encoding]
        RAW_BGR: _ClassVar[ImageFrame.Encoding]
    ENCODING_UNSPECIFIED: ImageFrame.Encoding
    JPEG: ImageFrame.Encoding
    RAW_RGB: ImageFrame.Encoding
    RAW_BGR: ImageFrame.Encoding
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TIME_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TIME_FIELD_NUMBER: _ClassVar[int]
    FRAME_RATE_FIELD_NUMBER: _ClassVar[int]
    encoding: ImageFrame.Encoding
    data: bytes
    width: int
    height: int
    seq: int
    capture_time: float
    source_time: float
    media_time: float
    frame_rate: float
    def __init__(self, encoding: _Optional[_Union[ImageFrame.Encoding, str]] = ..., data: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., seq: _Optional[int] = ..., capture_time: _Optional[float] = ..., source_time: _Optional[float] = ..., media_time: _Optional[float] = ..., frame_rate: _Optional[float] = ...) -> None: ...

class TrackRequest(_message.Message):
    __slots__ = ("subject", "image", "deadline_ms")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    subject: str
    image: ImageFrame
    deadline_ms: int
    def __init__(self, subject: _Optional[str] = ..., image: _Optional[_Union[ImageFrame, _Mapping]] = ..., deadline_ms: _Optional[int] = ...) -> None: ...

class TrackManyRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[TrackManyItem]
    def __init__(self, items: _Optional[_Iterable[_Union[TrackManyItem, _Mapping]]] = ...) -> None: ...

class TrackManyItem(_message.Message):
    __slots__ = ("stream_id", "subject", "image", "deadline_ms", "end")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    subject: str
    image: ImageFrame
    deadline_ms: int
    end: bool
    def __init__(self, stream_id: _Optional[int] = ..., subject: _Optional[str] = ..., image: _Optional[_Union[ImageFrame, _Mapping]] = ..., deadline_ms: _Optional[int] = ..., end: _Optional[bool] = ...) -> None: ...

class TrackManyResponse(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[TrackManyReply]
    def __init__(self, replies: _Optional[_Iterable[_Union[TrackManyReply, _Mapping]]] = ...) -> None: ...

class TrackManyReply(_message.Message):
    __slots__ = ("stream_id", "response", "ended")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    response: TrackResponse
    ended: str
    def __init__(self, stream_id: _Optional[int] = ..., response: _Optional[_Union[TrackResponse, _Mapping]] = ..., ended: _Optional[str] = ...) -> None: ...

class ImageRefused(_message.Message):
    __slots__ = ("seq", "reason")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    reason: str
    def __init__(self, seq: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class TrackResponse(_message.Message):
    __slots__ = ("header", "frame", "refused", "received", "stale_dropped", "late_dropped", "bad_frames", "replica", "stream_slot")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    STALE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    LATE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    BAD_FRAMES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    STREAM_SLOT_FIELD_NUMBER: _ClassVar[int]
    header: StreamHeader
    frame: Frame
    refused: ImageRefused
    received: int
    stale_dropped: int
    late_dropped: int
    bad_frames: int
    replica: str
    stream_slot: int
    def __init__(self, header: _Optional[_Union[StreamHeader, _Mapping]] = ..., frame: _Optional[_Union[Frame, _Mapping]] = ..., refused: _Optional[_Union[ImageRefused, _Mapping]] = ..., received: _Optional[int] = ..., stale_dropped: _Optional[int] = ..., late_dropped: _Optional[int] = ..., bad_frames: _Optional[int] = ..., replica: _Optional[str] = ..., stream_slot: _Optional[int] = ...) -> None: ...

class GetServeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServeStatusResponse(_message.Message):
    __slots__ = ("replica", "runners", "streams", "max_streams", "frames_received", "frames_served", "stale_dropped", "late_dropped", "bad_frames", "streams_refused", "passes", "mean_batch", "latency_ms_p50", "latency_ms_p99", "server_version", "decoder", "streams_evicted", "streams_invalid", "model_versions", "release", "gc_collections", "gc_pause_ms_total", "gc_pause_ms_max", "gc_pauses_over_10ms", "thread_cpu_s", "frame_sizes", "max_frame_sizes", "frame_sizes_released", "max_streams_per_peer", "streams_refused_per_peer")
    class ModelVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ThreadCpuSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    RUNNERS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    FRAMES_SERVED_FIELD_NUMBER: _ClassVar[int]
    STALE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    LATE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    BAD_FRAMES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    MEAN_BATCH_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_P50_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_P99_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    DECODER_FIELD_NUMBER: _ClassVar[int]
    STREAMS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    STREAMS_INVALID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    GC_COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    GC_PAUSE_MS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GC_PAUSE_MS_MAX_FIELD_NUMBER: _ClassVar[int]
    GC_PAUSES_OVER_10MS_FIELD_NUMBER: _ClassVar[int]
    THREAD_CPU_S_FIELD_NUMBER: _ClassVar[int]
    FRAME_SIZES_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAME_SIZES_FIELD_NUMBER: _ClassVar[int]
    FRAME_SIZES_RELEASED_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_PER_PEER_FIELD_NUMBER: _ClassVar[int]
    STREAMS_REFUSED_PER_PEER_FIELD_NUMBER: _ClassVar[int]
    replica: str
    runners: str
    streams: int
    max_streams: int
    frames_received: int
    frames_served: int
    stale_dropped: int
    late_dropped: int
    bad_frames: int
    streams_refused: int
    passes: int
    mean_batch: float
    latency_ms_p50: float
    latency_ms_p99: float
    server_version: str
    decoder: str
    streams_evicted: int
    streams_invalid: int
    model_versions: _containers.ScalarMap[str, str]
    release: str
    gc_collections: _containers.RepeatedScalarFieldContainer[int]
    gc_pause_ms_total: float
    gc_pause_ms_max: float
    gc_pauses_over_10ms: int
    thread_cpu_s: _containers.ScalarMap[str, float]
    frame_sizes: _containers.RepeatedScalarFieldContainer[str]
    max_frame_sizes: int
    frame_sizes_released: int
    max_streams_per_peer: int
    streams_refused_per_peer: int
    def __init__(self, replica: _Optional[str] = ..., runners: _Optional[str] = ..., streams: _Optional[int] = ..., max_streams: _Optional[int] = ..., frames_received: _Optional[int] = ..., frames_served: _Optional[int] = ..., stale_dropped: _Optional[int] = ..., late_dropped: _Optional[int] = ..., bad_frames: _Optional[int] = ..., streams_refused: _Optional[int] = ..., passes: _Optional[int] = ..., mean_batch: _Optional[float] = ..., latency_ms_p50: _Optional[float] = ..., latency_ms_p99: _Optional[float] = ..., server_version: _Optional[str] = ..., decoder: _Optional[str] = ..., streams_evicted: _Optional[int] = ..., streams_invalid: _Optional[int] = ..., model_versions: _Optional[_Mapping[str, str]] = ..., release: _Optional[str] = ..., gc_collections: _Optional[_Iterable[int]] = ..., gc_pause_ms_total: _Optional[float] = ..., gc_pause_ms_max: _Optional[float] = ..., gc_pauses_over_10ms: _Optional[int] = ..., thread_cpu_s: _Optional[_Mapping[str, float]] = ..., frame_sizes: _Optional[_Iterable[str]] = ..., max_frame_sizes: _Optional[int] = ..., frame_sizes_released: _Optional[int] = ..., max_streams_per_peer: _Optional[int] = ..., streams_refused_per_peer: _Optional[int] = ...) -> None: ...
