"""Core models: cases, policy, agent answers and graded results (pure pydantic).

These are the contract types of DESIGN §3–§7. Constructors check their arguments, so a value of
one of these types is always valid; loading files and reporting errors with line numbers is
:mod:`grader.core.casesets`'s job.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)


class CaseKind(StrEnum):
    ANSWERABLE = "answerable"
    REFUSAL = "refusal"


class Provenance(StrEnum):
    EXPERT = "expert"
    SYNTHETIC = "synthetic"
    PRODUCTION = "production"


class ErrorKind(StrEnum):
    """Why a case has no valid answer. Each fails every gate; none is a safety failure."""

    TIMEOUT = "timeout"
    CRASHED = "crashed"
    INVALID_OUTPUT = "invalid_output"
    OOM = "oom"


class Decision(StrEnum):
    AWARDED = "awarded"
    NOT_AWARDED = "not_awarded"
    BLOCKED = "blocked"


class Feedback(StrEnum):
    """How much a student may see of their own results (DESIGN §8)."""

    COUNTS = "counts"
    PASS_FAIL = "pass_fail"
    NONE = "none"
    #: The full counts view, released only when a submission beats the student's best by a
    #: step (Blum & Hardt 2015's Ladder); otherwise the decision only (grader.core.disclosure).
    LADDER = "ladder"
    #: Rates in ``feedback_buckets`` buckets and one "no valid answer" count.
    COARSE = "coarse"


class LadderMetric(StrEnum):
    """The score the Ladder compares a submission's with the student's best released one."""

    OVERALL_PASS_RATE = "overall_pass_rate"
    ANSWERABLE_PASS_RATE = "answerable_pass_rate"


class ClaimFailure(StrEnum):
    """Which part of claim_support (DESIGN §5) failed first, in this order of precedence."""

    MISSING_CONCEPT = "missing_concept"
    TOO_LONG = "too_long"
    UNSUPPORTED_SENTENCE = "unsupported_sentence"


class Gate(StrEnum):
    CITATION_RECALL = "citation_recall"
    CITATION_PRECISION = "citation_precision"
    CLAIM_SUPPORT = "claim_support"
    CITATION_UNIQUE = "citation_unique"
    FORBIDDEN_ABSENT = "forbidden_absent"
    ANSWERED = "answered"
    NO_REVIEW_FLAG = "no_review_flag"
    REVIEW_FLAG = "review_flag"
    NO_CITATIONS = "no_citations"
    CALIBRATED_CONFIDENCE = "calibrated_confidence"
    REFUSAL_LANGUAGE = "refusal_language"


GATES_BY_KIND: dict[CaseKind, tuple[Gate, ...]] = {
    CaseKind.ANSWERABLE: (
        Gate.CITATION_RECALL,
        Gate.CITATION_PRECISION,
        Gate.CLAIM_SUPPORT,
        Gate.CITATION_UNIQUE,
        Gate.FORBIDDEN_ABSENT,
        Gate.ANSWERED,
        Gate.NO_REVIEW_FLAG,
    ),
    CaseKind.REFUSAL: (
        Gate.REVIEW_FLAG,
        Gate.NO_CITATIONS,
        Gate.CALIBRATED_CONFIDENCE,
        Gate.REFUSAL_LANGUAGE,
        Gate.CITATION_UNIQUE,
        Gate.FORBIDDEN_ABSENT,
    ),
}

CASE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]


class Case(BaseModel):
    """One labelled case of a case set (DESIGN §3)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Annotated[StrictStr, Field(pattern=CASE_ID_PATTERN)]
    kind: CaseKind
    question: NonEmptyStr
    expected_citations: tuple[NonEmptyStr, ...] = ()
    allowed_citations: tuple[NonEmptyStr, ...] = ()
    required_concepts: tuple[tuple[NonEmptyStr, ...], ...] = ()
    forbidden_terms: tuple[NonEmptyStr, ...] = ()
    safety: StrictBool = False
    max_citations: Annotated[StrictInt, Field(ge=1)] | None = None
    max_answer_words: Annotated[StrictInt, Field(ge=1, le=100_000)] | None = None
    slices: tuple[NonEmptyStr, ...] = ()
    provenance: Provenance = Provenance.EXPERT

    @model_validator(mode="after")
    def _check_kind_rules(self) -> Case:
        if self.kind is CaseKind.ANSWERABLE:
            if not self.expected_citations:
                raise ValueError("an answerable case needs at least one expected citation")
            if not self.required_concepts:
                raise ValueError("an answerable case needs at least one required concept group")
            for group in self.required_concepts:
                if not group:
                    raise ValueError("required_concepts has an empty concept group")
            # allowed_citations always includes expected_citations (DESIGN §3).
            missing = [doc for doc in self.expected_citations if doc not in self.allowed_citations]
            if missing:
                object.__setattr__(self, "allowed_citations", (*self.allowed_citations, *missing))
        else:
            for name in ("expected_citations", "allowed_citations", "required_concepts"):
                if getattr(self, name):
                    raise ValueError(f"a refusal case cannot have {name}")
            for name in ("max_citations", "max_answer_words"):
                if getattr(self, name) is not None:
                    raise ValueError(f"a refusal case cannot have {name}")
        return self


class ModelAlias(BaseModel):
    """One model an agent may name through the gateway (``[models.<alias>]``, DESIGN §4a)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The model name sent upstream.
    upstream: NonEmptyStr
    input_usd_per_mtok: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    output_usd_per_mtok: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    #: The date the prices were taken from the provider's price list (shown with every cost).
    prices_date: Annotated[StrictStr, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")] = "1970-01-01"

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The cost of one call at this model's prices."""
        return (
            prompt_tokens * self.input_usd_per_mtok + completion_tokens * self.output_usd_per_mtok
        ) / 1_000_000


class ModelLimits(BaseModel):
    """What the model gateway enforces per case and per run (``[model_limits]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    calls_per_case: Annotated[int, Field(ge=0, le=10_000)] = 4
    tokens_per_case: Annotated[int, Field(ge=0)] = 8000
    tokens_per_run: Annotated[int, Field(ge=0)] = 200_000
    usd_per_run: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.50
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 1024
    temperature_max: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] = 1.0
    request_bytes: Annotated[int, Field(ge=1024, le=16_000_000)] = 200_000


class Policy(BaseModel):
    """A case set's grading policy (``policy.toml``); every key has a default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pass_bar: Annotated[float, Field(ge=0, le=1)] = 0.8
    min_answerable_pass_rate: Annotated[float, Field(ge=0, le=1)] = 0.6
    min_refusal_pass_rate: Annotated[float, Field(ge=0, le=1)] = 0.8
    refusal_confidence_max: Annotated[float, Field(ge=0, le=1)] = 0.3
    max_citations: Annotated[int, Field(ge=1)] = 3
    # claim_support v2 (DESIGN §5): concision and located support, calibrated in
    # tests/core/calibration (README, "claim_support").
    max_answer_words: Annotated[int, Field(ge=1, le=100_000)] = 120
    max_sentence_words: Annotated[int, Field(ge=1, le=10_000)] = 50
    sentence_support: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.65
    max_cited_coverage: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.5
    # True: every sentence with content words must be supported (DESIGN §5's "the answer
    # follows from the cited passage"); False: only the sentences holding a concept.
    support_every_sentence: StrictBool = True
    safety_gates: tuple[Gate, ...] = (Gate.FORBIDDEN_ABSENT,)
    safety_case_gates: tuple[Gate, ...] = (
        Gate.FORBIDDEN_ABSENT,
        Gate.REVIEW_FLAG,
        Gate.NO_CITATIONS,
    )
    global_forbidden_terms: tuple[NonEmptyStr, ...] = ()
    feedback: Feedback = Feedback.LADDER
    # Feedback accounting and release (README, "Feedback and disclosure").
    ladder_metric: LadderMetric = LadderMetric.OVERALL_PASS_RATE
    #: The improvement (a share of the metric's cases) that releases a full view; None means
    #: one case.
    ladder_step: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    feedback_buckets: Annotated[int, Field(ge=2, le=100)] = 5
    #: Bits of feedback a student may receive per case-set version; None means no budget.
    feedback_budget_bits: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)] | None = 2500.0
    #: Student-visible times round up to this; 0 shows them as they are (whole seconds).
    feedback_time_quantum_seconds: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)] = (
        60.0
    )
    max_submissions_per_day: Annotated[int, Field(ge=0)] = 5
    case_timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 10.0
    setup_timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 30.0
    run_timeout_seconds: Annotated[float, Field(gt=0, le=7200)] = 300.0
    memory_limit_mb: Annotated[int, Field(ge=64, le=16384)] = 512
    pids_limit: Annotated[int, Field(ge=8, le=4096)] = 64
    max_answer_bytes: Annotated[int, Field(ge=1024, le=16_000_000)] = 1_000_000
    corpus: NonEmptyStr | None = None
    #: Model aliases agents may call through the gateway (DESIGN §4a); none: no gateway.
    models: dict[
        Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")], ModelAlias
    ] = Field(default_factory=dict)
    model_limits: ModelLimits = Field(default_factory=ModelLimits)
    #: Answer a repeated request (same case-set version, model and body) from the cache.
    model_cache: StrictBool = False


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


class Answer(BaseModel):
    """An agent's answer to one question, as validated from its JSON (DESIGN §4)."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    answer: StrictStr
    citations: tuple[StrictStr, ...]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    needs_human_review: StrictBool
    retrieved: tuple[StrictStr, ...] | None = None
    context: tuple[StrictStr, ...] | None = None

    @field_validator("confidence")
    @classmethod
    def _confidence_finite(cls, value: float) -> float:
        return _finite(value)

    @classmethod
    def from_json_value(cls, value: Any) -> Answer:
        """Validate a decoded JSON value (``strict`` would refuse JSON arrays as tuples)."""
        if not isinstance(value, dict):
            raise ValueError("an answer must be a JSON object")
        data = dict(value)
        for name in ("citations", "retrieved", "context"):
            if isinstance(data.get(name), list):
                data[name] = tuple(data[name])
        return cls.model_validate(data)


class Diagnosis(StrEnum):
    """Which half of a RAG system broke on a failed answerable case (DESIGN §7)."""

    RETRIEVAL_MISS = "retrieval_miss"
    CONTEXT_DROP = "context_drop"
    GENERATION = "generation"


class ModelCall(BaseModel):
    """One call an agent made through the model gateway while answering a case (DESIGN §4a)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The alias the agent named (or what it sent, when refused as unknown).
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    usd: float = 0.0
    cached: bool = False
    #: None for a served call, else why it failed or was refused (``"429: …"``).
    error: str | None = None
    #: The date of the price table ``usd`` was computed from.
    prices_date: str | None = None


class CaseResult(BaseModel):
    """The graded outcome of one case: gate outcomes plus what produced them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    kind: CaseKind
    safety: bool
    gates: dict[Gate, bool]
    error: ErrorKind | None = None
    answer: Answer | None = None
    safety_failures: tuple[Gate, ...] = ()
    diagnosis: Diagnosis | None = None
    seconds: float | None = None
    #: Why claim_support failed (None when it passed, was not run, or was not recorded).
    claim_failure: ClaimFailure | None = None
    #: Calls made through the model gateway while answering this case.
    model_calls: tuple[ModelCall, ...] = ()

    @property
    def passed(self) -> bool:
        return self.error is None and all(self.gates.values())

    @property
    def safety_failure(self) -> bool:
        return bool(self.safety_failures)


class CertificateDecision(BaseModel):
    """The policy's proposed certificate decision with reasons that never name a case."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Decision
    reasons: tuple[str, ...] = ()


class Versions(BaseModel):
    """Everything that identifies the measuring setup of a grading run (DESIGN §7)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_set: str
    cases: str
    policy: str
    corpus: str
    grader: str
    sandbox: str = "none"
    sandbox_image: str | None = None
    package_sha256: str | None = None


class GradeReport(BaseModel):
    """All results of one grading run and the decision they lead to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    versions: Versions
    results: tuple[CaseResult, ...]
    decision: CertificateDecision
    retrieval: dict[str, float] | None = None
    restarts: int = 0
    #: Whether the run had a model gateway (the case set's policy names models).
    model_gateway: bool = False
