"""The comparison of two run directories, before and after, as a typed record: compare.json is written from it.

Its field names are compare.json's keys (docs/architecture.md, "compare.json"); keys are added, never renamed or given
another meaning. The record is named `BeforeAfter`, not `Comparison`: verdictrecord.Comparison is one level against
its reference level inside one batch, and one name keeps one meaning.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Batch:
    """One of the two run directories as compared: what it is, and how its own verdict judged it."""

    label: str  # "before" (RUN_A) or "after" (RUN_B)
    run_dir: str
    experiment: str
    created_at: str | None
    kit_version: str | None
    server_kind: str
    imported: bool
    simulated: bool
    search: bool
    runs: int  # the runs it planned (warm-ups apart)
    valid_runs: int  # of those, the observations of the server
    controlled: bool  # its own verdict: no confound among its runs
    conclusive: bool
    confounds: int
    outcome_factors: list[str]
    headline: str
    failure_mode_factors: list[str] = field(default_factory=list)  # change only how the launch fails (issue 63)


@dataclass(frozen=True)
class Question:
    """Whether the two ask the same question: the same factors with the same levels (and, for threshold searches,
    the same searched flag) on the same server kind. `differences` says what differs where they do not; `notes` what
    differs in the design without changing the question (the question's text, the baseline, a search's range)."""

    same: bool
    factors: dict[str, list[str]]  # before's factors and levels
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Difference:
    """Something outside the factors that differs between the runs of the two, found by the confound rules of one
    batch (verdicts/confounds.py) over the runs of both, or in the resolved params (experiment.yaml). Runs are named
    `before:<run id>` / `after:<run id>`, and all of one side's runs as `all N runs before`."""

    kind: str  # a confound's kind (host, versions, modified files, environment, gpu, log, server argument, declared), or params
    what: str  # the fact that differs, as the rule names it ("server version (from the server log)")
    detail: str
    before_runs: list[str]  # the runs it touches, as the rule counts them (every value but the first one's)
    after_runs: list[str]
    within: list[str] = field(default_factory=list)  # the sides whose own runs differ in it too ("before", "after")


@dataclass(frozen=True)
class VariantOutcome:
    """One variant's launch outcome before and after: valid runs, ready runs, their failure reasons, and Fisher's
    exact test (two-sided) of the ready/not-ready counts."""

    variant: str
    levels: dict[str, str]
    before_ready: int
    before_valid: int
    after_ready: int
    after_valid: int
    p_value: float | None  # None when a side has no valid run
    significant: bool | None
    changed: bool | None  # the share of ready runs differs; None when a side has no valid run
    before_reasons: list[str] = field(default_factory=list)
    after_reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Shift:
    """One variant's metric before and after (KV tokens, peak memory, the break-even): each side's values, the
    difference of the means (after − before) and its 95 % interval. `interval`: `welch` (Welch's t interval of the
    difference of two independent means, scipy.stats.ttest_ind with equal_var=False), `no spread` (every run of
    each side gave one value: the difference is exact), or `none` (a side has fewer than two values)."""

    variant: str
    metric: str
    unit: str
    before_n: int
    after_n: int
    before_mean: float | None
    after_mean: float | None
    before_sd: float | None
    after_sd: float | None
    diff: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    interval: str
    before_values: list[float] = field(default_factory=list)
    after_values: list[float] = field(default_factory=list)
    not_compared: str = ""
    left_out: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ThresholdShift:
    """One stratum of two threshold searches of the same flag: each side's interval (or its state when it has
    none), the shift of the minimum value that starts as the range both intervals allow, and the break-even each
    side's logged numbers predict."""

    stratum: str
    flag: str
    before_state: str | None
    after_state: str | None
    before_interval: list[float] | None
    after_interval: list[float] | None
    shift_low: float | None
    shift_high: float | None
    before_predicted: float | None
    after_predicted: float | None
    summary: str


@dataclass(frozen=True)
class DecisionChange:
    """What one factor did to the launch outcome in each verdict (verdictrecord.STATUSES)."""

    factor: str
    before: str | None
    after: str | None
    changed: bool


@dataclass(frozen=True)
class BeforeAfter:
    """compare.json. `summary` says it in sentences, in the order a reader needs: whether the two ask the same
    question, what differs outside the factors, whether the outcomes changed, the break-even and the thresholds.
    When the question differs (`comparable` false) nothing is compared per variant, and `summary` says why."""

    before: Batch
    after: Batch
    comparable: bool
    question: Question
    differences: list[Difference]
    outcomes: list[VariantOutcome]
    outcomes_unchanged: bool | None  # None: a variant has no valid run on a side (or the question differs)
    decisions: list[DecisionChange]
    shifts: list[Shift]
    break_even: dict | None  # {arg, column, formula} of the server kind's break-even, when its budget gives one
    thresholds: list[ThresholdShift]
    variants_before_only: list[str]
    variants_after_only: list[str]
    summary: list[str]
    warnings: list[str]
    kit_version: str | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)
