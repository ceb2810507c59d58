from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Frames(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[Frame]
    def __init__(self, frames: _Optional[_Iterable[_Union[Frame, _Mapping[str, object]]]] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("id", "call", "step", "accept", "reject", "outcome", "room", "chunk", "started")
    ID_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ROOM_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    id: int
    call: Call
    step: Step
    accept: Accept
    reject: Reject
    outcome: Outcome
    room: Room
    chunk: Chunk
    started: Started
    def __init__(self, id: _Optional[int] = ..., call: _Optional[_Union[Call, _Mapping[str, object]]] = ..., step: _Optional[_Union[Step, _Mapping[str, object]]] = ..., accept: _Optional[_Union[Accept, _Mapping[str, object]]] = ..., reject: _Optional[_Union[Reject, _Mapping[str, object]]] = ..., outcome: _Optional[_Union[Outcome, _Mapping[str, object]]] = ..., room: _Optional[_Union[Room, _Mapping[str, object]]] = ..., chunk: _Optional[_Union[Chunk, _Mapping[str, object]]] = ..., started: _Optional[_Union[Started, _Mapping[str, object]]] = ...) -> None: ...

class Routine(_message.Message):
    __slots__ = ("digest", "blob", "name", "generator", "plain")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_FIELD_NUMBER: _ClassVar[int]
    PLAIN_FIELD_NUMBER: _ClassVar[int]
    digest: bytes
    blob: bytes
    name: str
    generator: bool
    plain: bool
    def __init__(self, digest: _Optional[bytes] = ..., blob: _Optional[bytes] = ..., name: _Optional[str] = ..., generator: bool = ..., plain: bool = ...) -> None: ...

class Call(_message.Message):
    __slots__ = ("routine", "args", "parent", "timeout", "limits", "traceparent", "no_prefetch", "interpreter", "build", "start_by")
    ROUTINE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    NO_PREFETCH_FIELD_NUMBER: _ClassVar[int]
    INTERPRETER_FIELD_NUMBER: _ClassVar[int]
    BUILD_FIELD_NUMBER: _ClassVar[int]
    START_BY_FIELD_NUMBER: _ClassVar[int]
    routine: Routine
    args: bytes
    parent: int
    timeout: float
    limits: Limits
    traceparent: str
    no_prefetch: bool
    interpreter: str
    build: str
    start_by: float
    def __init__(self, routine: _Optional[_Union[Routine, _Mapping[str, object]]] = ..., args: _Optional[bytes] = ..., parent: _Optional[int] = ..., timeout: _Optional[float] = ..., limits: _Optional[_Union[Limits, _Mapping[str, object]]] = ..., traceparent: _Optional[str] = ..., no_prefetch: bool = ..., interpreter: _Optional[str] = ..., build: _Optional[str] = ..., start_by: _Optional[float] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("queue", "key", "workflow", "concurrency", "total", "halt_on_error")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    HALT_ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    queue: str
    key: str
    workflow: str
    concurrency: int
    total: int
    halt_on_error: bool
    def __init__(self, queue: _Optional[str] = ..., key: _Optional[str] = ..., workflow: _Optional[str] = ..., concurrency: _Optional[int] = ..., total: _Optional[int] = ..., halt_on_error: bool = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("kind", "value")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NEXT: _ClassVar[Step.Kind]
        SEND: _ClassVar[Step.Kind]
        THROW: _ClassVar[Step.Kind]
        CLOSE: _ClassVar[Step.Kind]
        CANCEL: _ClassVar[Step.Kind]
        HAND_BACK: _ClassVar[Step.Kind]
    NEXT: Step.Kind
    SEND: Step.Kind
    THROW: Step.Kind
    CLOSE: Step.Kind
    CANCEL: Step.Kind
    HAND_BACK: Step.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    kind: Step.Kind
    value: bytes
    def __init__(self, kind: _Optional[_Union[Step.Kind, str]] = ..., value: _Optional[bytes] = ...) -> None: ...

class Accept(_message.Message):
    __slots__ = ("queued",)
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    queued: bool
    def __init__(self, queued: bool = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Room(_message.Message):
    __slots__ = ("in_flight", "capacity", "memory_fraction", "loop_lag_seconds")
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FRACTION_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    in_flight: int
    capacity: int
    memory_fraction: float
    loop_lag_seconds: float
    def __init__(self, in_flight: _Optional[int] = ..., capacity: _Optional[int] = ..., memory_fraction: _Optional[float] = ..., loop_lag_seconds: _Optional[float] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("token", "size", "offset", "data", "last")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    token: int
    size: int
    offset: int
    data: bytes
    last: bool
    def __init__(self, token: _Optional[int] = ..., size: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last: bool = ...) -> None: ...

class Reject(_message.Message):
    __slots__ = ("code", "message", "in_flight", "capacity")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    in_flight: int
    capacity: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., in_flight: _Optional[int] = ..., capacity: _Optional[int] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("kind", "value", "traceback", "interpreter")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        RETURN: _ClassVar[Outcome.Kind]
        YIELD: _ClassVar[Outcome.Kind]
        RAISE: _ClassVar[Outcome.Kind]
        STOP: _ClassVar[Outcome.Kind]
        CANCELLED: _ClassVar[Outcome.Kind]
    RETURN: Outcome.Kind
    YIELD: Outcome.Kind
    RAISE: Outcome.Kind
    STOP: Outcome.Kind
    CANCELLED: Outcome.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    INTERPRETER_FIELD_NUMBER: _ClassVar[int]
    kind: Outcome.Kind
    value: bytes
    traceback: str
    interpreter: str
    def __init__(self, kind: _Optional[_Union[Outcome.Kind, str]] = ..., value: _Optional[bytes] = ..., traceback: _Optional[str] = ..., interpreter: _Optional[str] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("grace",)
    GRACE_FIELD_NUMBER: _ClassVar[int]
    grace: float
    def __init__(self, grace: _Optional[float] = ...) -> None: ...

class StateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerState(_message.Message):
    __slots__ = ("uid", "pid", "in_flight", "idle_seconds", "capacity", "accepting", "uptime_seconds", "version", "waiting", "memory_bytes", "memory_fraction", "loop_lag_seconds", "latency_p99_seconds", "interpreter", "build")
    UID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ACCEPTING_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FRACTION_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P99_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INTERPRETER_FIELD_NUMBER: _ClassVar[int]
    BUILD_FIELD_NUMBER: _ClassVar[int]
    uid: str
    pid: int
    in_flight: int
    idle_seconds: float
    capacity: int
    accepting: bool
    uptime_seconds: float
    version: str
    waiting: int
    memory_bytes: int
    memory_fraction: float
    loop_lag_seconds: float
    latency_p99_seconds: float
    interpreter: str
    build: str
    def __init__(self, uid: _Optional[str] = ..., pid: _Optional[int] = ..., in_flight: _Optional[int] = ..., idle_seconds: _Optional[float] = ..., capacity: _Optional[int] = ..., accepting: bool = ..., uptime_seconds: _Optional[float] = ..., version: _Optional[str] = ..., waiting: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., memory_fraction: _Optional[float] = ..., loop_lag_seconds: _Optional[float] = ..., latency_p99_seconds: _Optional[float] = ..., interpreter: _Optional[str] = ..., build: _Optional[str] = ...) -> None: ...
