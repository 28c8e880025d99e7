from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_ADAPTIVE: _ClassVar[Mode]
    MODE_FIXED: _ClassVar[Mode]
    MODE_OFF: _ClassVar[Mode]
MODE_UNSPECIFIED: Mode
MODE_ADAPTIVE: Mode
MODE_FIXED: Mode
MODE_OFF: Mode

class Policy(_message.Message):
    __slots__ = ("mode", "max_len", "min_len", "fixed_len", "frontier_size", "overlap", "request_rate", "clear_max_len", "clear_fixed_len", "prior_weight", "explore", "latency_weight", "uniform_margin", "draft_margin", "lazy_prefill")
    MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    MIN_LEN_FIELD_NUMBER: _ClassVar[int]
    FIXED_LEN_FIELD_NUMBER: _ClassVar[int]
    FRONTIER_SIZE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_RATE_FIELD_NUMBER: _ClassVar[int]
    CLEAR_MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIXED_LEN_FIELD_NUMBER: _ClassVar[int]
    PRIOR_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    EXPLORE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_MARGIN_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MARGIN_FIELD_NUMBER: _ClassVar[int]
    LAZY_PREFILL_FIELD_NUMBER: _ClassVar[int]
    mode: Mode
    max_len: int
    min_len: int
    fixed_len: int
    frontier_size: int
    overlap: bool
    request_rate: float
    clear_max_len: bool
    clear_fixed_len: bool
    prior_weight: float
    explore: float
    latency_weight: float
    uniform_margin: float
    draft_margin: float
    lazy_prefill: bool
    def __init__(self, mode: _Optional[_Union[Mode, str]] = ..., max_len: _Optional[int] = ..., min_len: _Optional[int] = ..., fixed_len: _Optional[int] = ..., frontier_size: _Optional[int] = ..., overlap: _Optional[bool] = ..., request_rate: _Optional[float] = ..., clear_max_len: _Optional[bool] = ..., clear_fixed_len: _Optional[bool] = ..., prior_weight: _Optional[float] = ..., explore: _Optional[float] = ..., latency_weight: _Optional[float] = ..., uniform_margin: _Optional[float] = ..., draft_margin: _Optional[float] = ..., lazy_prefill: _Optional[bool] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("url", "reachable", "version", "rank_versions", "error", "window")
    URL_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RANK_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    url: str
    reachable: bool
    version: int
    rank_versions: _containers.RepeatedScalarFieldContainer[int]
    error: str
    window: Span
    def __init__(self, url: _Optional[str] = ..., reachable: _Optional[bool] = ..., version: _Optional[int] = ..., rank_versions: _Optional[_Iterable[int]] = ..., error: _Optional[str] = ..., window: _Optional[_Union[Span, _Mapping]] = ...) -> None: ...

class PolicyReply(_message.Message):
    __slots__ = ("policy", "version", "applied", "replicas")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    version: int
    applied: bool
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ..., version: _Optional[int] = ..., applied: _Optional[bool] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ...) -> None: ...

class PhaseShares(_message.Message):
    __slots__ = ("draft", "verify", "draft_extend", "prefill", "overlap", "idle", "schedule")
    DRAFT_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    DRAFT_EXTEND_FIELD_NUMBER: _ClassVar[int]
    PREFILL_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    draft: float
    verify: float
    draft_extend: float
    prefill: float
    overlap: float
    idle: float
    schedule: float
    def __init__(self, draft: _Optional[float] = ..., verify: _Optional[float] = ..., draft_extend: _Optional[float] = ..., prefill: _Optional[float] = ..., overlap: _Optional[float] = ..., idle: _Optional[float] = ..., schedule: _Optional[float] = ...) -> None: ...

class TokenCounts(_message.Message):
    __slots__ = ("proposed", "verified", "accepted", "pruned", "committed", "drafted", "draft_skipped")
    PROPOSED_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    PRUNED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    DRAFTED_FIELD_NUMBER: _ClassVar[int]
    DRAFT_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    proposed: int
    verified: int
    accepted: int
    pruned: int
    committed: int
    drafted: int
    draft_skipped: int
    def __init__(self, proposed: _Optional[int] = ..., verified: _Optional[int] = ..., accepted: _Optional[int] = ..., pruned: _Optional[int] = ..., committed: _Optional[int] = ..., drafted: _Optional[int] = ..., draft_skipped: _Optional[int] = ...) -> None: ...

class Span(_message.Message):
    __slots__ = ("seconds", "shares", "tokens", "steps", "mean_batch_size", "acceptance_by_position", "length_histogram", "committed_tokens_per_s")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    MEAN_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_BY_POSITION_FIELD_NUMBER: _ClassVar[int]
    LENGTH_HISTOGRAM_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    shares: PhaseShares
    tokens: TokenCounts
    steps: int
    mean_batch_size: float
    acceptance_by_position: _containers.RepeatedScalarFieldContainer[float]
    length_histogram: _containers.RepeatedScalarFieldContainer[int]
    committed_tokens_per_s: float
    def __init__(self, seconds: _Optional[float] = ..., shares: _Optional[_Union[PhaseShares, _Mapping]] = ..., tokens: _Optional[_Union[TokenCounts, _Mapping]] = ..., steps: _Optional[int] = ..., mean_batch_size: _Optional[float] = ..., acceptance_by_position: _Optional[_Iterable[float]] = ..., length_histogram: _Optional[_Iterable[int]] = ..., committed_tokens_per_s: _Optional[float] = ...) -> None: ...

class PolicyModel(_message.Message):
    __slots__ = ("verify_coef", "draft_coef", "verify_mape", "draft_mape", "accept_by_position")
    VERIFY_COEF_FIELD_NUMBER: _ClassVar[int]
    DRAFT_COEF_FIELD_NUMBER: _ClassVar[int]
    VERIFY_MAPE_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MAPE_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_BY_POSITION_FIELD_NUMBER: _ClassVar[int]
    verify_coef: _containers.RepeatedScalarFieldContainer[float]
    draft_coef: _containers.RepeatedScalarFieldContainer[float]
    verify_mape: float
    draft_mape: float
    accept_by_position: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, verify_coef: _Optional[_Iterable[float]] = ..., draft_coef: _Optional[_Iterable[float]] = ..., verify_mape: _Optional[float] = ..., draft_mape: _Optional[float] = ..., accept_by_position: _Optional[_Iterable[float]] = ...) -> None: ...

class Telemetry(_message.Message):
    __slots__ = ("timestamp", "policy_version", "policy", "window", "total", "window_seconds", "verify_path", "draft_path", "ranks", "model", "replicas")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_PATH_FIELD_NUMBER: _ClassVar[int]
    DRAFT_PATH_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    timestamp: float
    policy_version: int
    policy: Policy
    window: Span
    total: Span
    window_seconds: float
    verify_path: str
    draft_path: str
    ranks: int
    model: PolicyModel
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    def __init__(self, timestamp: _Optional[float] = ..., policy_version: _Optional[int] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., window: _Optional[_Union[Span, _Mapping]] = ..., total: _Optional[_Union[Span, _Mapping]] = ..., window_seconds: _Optional[float] = ..., verify_path: _Optional[str] = ..., draft_path: _Optional[str] = ..., ranks: _Optional[int] = ..., model: _Optional[_Union[PolicyModel, _Mapping]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ...) -> None: ...

class GetTelemetryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchTelemetryRequest(_message.Message):
    __slots__ = ("interval_seconds", "count")
    INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    interval_seconds: float
    count: int
    def __init__(self, interval_seconds: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...
