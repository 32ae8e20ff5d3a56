"""The table's rows: each figure, its target and how it is read from the results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    figure: str
    target: str
    measured: Callable[[dict[str, Any]], Any]
    """The measured value from the results (raises KeyError when its group did not run)."""
    passes: Callable[[Any], bool]
    show: Callable[[Any], str] = str
    group: str = ""
    """The ``--only`` group that measures it."""
    bounded_by: str = ""
    """What sets the figure (docs/performance.md shows it beside today's value)."""


def _redrive_floor(ops: dict[str, Any]) -> float:
    moved = max(1, int(ops["redrive"]["moved"]))
    return (3 * -(-moved // 10) + 2) / moved


def _at(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def read(results: dict[str, Any]) -> Any:
        value: Any = results
        for key in keys:
            value = value[key]
        return value

    return read


def _limit(
    figure: str,
    keys: tuple[str, ...],
    op: str,
    bound: float | None,
    fmt: str = "{:.2f}",
    *,
    bounded_by: str,
) -> Target:
    """A row whose value must be at most (``<=``) or at least (``>=``) ``bound`` (None: just measured)."""
    if bound is None:
        return Target(figure, "(measured)", _at(*keys), lambda v: True, fmt.format, keys[0], bounded_by)
    passes = (lambda v: v <= bound) if op == "<=" else (lambda v: v >= bound)
    return Target(figure, f"{op} {bound:g}", _at(*keys), passes, fmt.format, keys[0], bounded_by)


PER_MILLION = ("cost", "per_million_runs")
WRITES = "DynamoDB write units a run writes (cost.md, call site by call site); Scheduler's $1.00 next"
TARGETS = (
    _limit(
        "$ per 1M clean runs (all AWS services, no target compute)",
        (*PER_MILLION, "clean", "dollars"),
        "<=",
        4.0,
        bounded_by=WRITES,
    ),
    _limit(
        "$ per 1M clean runs at 173,000 a month (the archive's batches are fixed by time)",
        (*PER_MILLION, "clean_low_volume", "dollars"),
        "<=",
        None,
        bounded_by="the archive's S3 PUTs: one a 5-minute batch however few records it holds",
    ),
    _limit(
        "$ per 1M runs with one retry",
        (*PER_MILLION, "one_retry", "dollars"),
        "<=",
        None,
        bounded_by="a clean run's writes twice, the failure's record in its target's retry budget",
    ),
    _limit(
        "$ per 1M dead-lettered runs with a work order",
        (*PER_MILLION, "dead_letter", "dollars"),
        "<=",
        None,
        bounded_by="three attempts' writes, the dead letter's record, the work order and its events",
    ),
    _limit(
        "storage a million clean runs add, $ per month, every month after, without retention",
        (*PER_MILLION, "clean", "storage", "dollars_per_month"),
        "<=",
        None,
        "{:.2f}",
        bounded_by="a run's item, its index entries and its audit records, deflated, kept for ever",
    ),
    _limit(
        "storage at 1M clean runs a month, $ in the month after a year, without retention",
        (*PER_MILLION, "clean", "storage", "retained", "month_after_a_year_dollars", "without_retention"),
        "<=",
        None,
        "{:.2f}",
        bounded_by="twelve months of runs, every item kept in DynamoDB",
    ),
    _limit(
        "storage at 1M clean runs a month, $ in the month after a year, with retention (90/400 days)",
        (*PER_MILLION, "clean", "storage", "retained", "month_after_a_year_dollars", "with_retention"),
        "<=",
        None,
        "{:.2f}",
        bounded_by="90 days of runs and 400 of runs' records in DynamoDB; a year of archive in S3",
    ),
    _limit(
        "idle month after that year, storage $ (the archive)",
        (*PER_MILLION, "clean", "storage", "retained", "idle_month_after_a_year_dollars"),
        "<=",
        None,
        "{:.3f}",
        bounded_by="a year of audit records, gzip, in S3 (Glacier Instant Retrieval after 30 days)",
    ),
    _limit(
        "idle environment, $ per month",
        ("cost", "idle_monthly", "total"),
        "<=",
        10.0,
        bounded_by="CloudWatch alarms and dashboard, the event source mappings' long polls",
    ),
    _limit(
        "$ per 1M clean runs, tables provisioned at 70 % (model)",
        (*PER_MILLION, "clean", "dollars_provisioned"),
        "<=",
        None,
        bounded_by="the same units priced by the capacity unit-hour at 70 % use",
    ),
    _limit(
        "idle environment, tables provisioned at 1 unit (model), $ per month",
        ("cost", "idle_monthly_provisioned", "total"),
        "<=",
        None,
        bounded_by="one read and one write unit per table and index, and their throttling alarms",
    ),
    _limit(
        "simulate day-100-tasks (28,900 runs), wall s",
        ("day", "seconds", "total_with_load"),
        "<=",
        45,
        "{:.1f}",
        bounded_by="the simulator's CPU time on one core (one process plays every service)",
    ),
    _limit(
        "stress-10k: share started within 60 s, %",
        ("stress", "dispatch_latency", "on_time_pct"),
        ">=",
        100,
        bounded_by="Lambda's scaling of the executor's pollers (modelled in virtual time)",
    ),
    _limit(
        "stress-10k: p99 start delay, s",
        ("stress", "dispatch_latency", "p99_s"),
        "<=",
        25,
        "{:.1f}",
        bounded_by="Lambda's scaling of the executor's pollers (modelled in virtual time)",
    ),
    Target(
        "hostile day: every invariant",
        "held",
        _at("hostile", "invariants_held"),
        bool,
        "held {}".format,
        "hostile",
        "correctness under every fault the local cloud injects: no margin to give",
    ),
    Target(
        "operators racing workstreams: every invariant",
        "held",
        _at("races", "invariants_held"),
        bool,
        "held {}".format,
        "races",
        "correctness of operator actions racing the engine: no margin to give",
    ),
    Target(
        "target outage with budgets: work orders, dead letters",
        "1, 0",
        lambda r: (
            r["outage"]["with_budgets"]["target_work_orders"],
            r["outage"]["with_budgets"]["dead_letters"],
        ),
        lambda v: v == (1, 0),
        lambda v: f"{v[0]}, {v[1]}",
        "outage",
        "the retry budget trips before any run spends its attempts",
    ),
    _limit(
        "target outage without budgets: dead letters",
        ("outage", "without_budgets", "dead_letters"),
        "<=",
        None,
        "{:.0f}",
        bounded_by="every run caught in the outage spends its three attempts",
    ),
    _limit(
        "target outage: every held run succeeded, s after the last failed call",
        ("outage", "with_budgets", "recovery_s"),
        "<=",
        None,
        "{:.0f}",
        bounded_by="held runs over release_per_minute, after the first successful probe",
    ),
    _limit(
        "target outage: held runs released per minute, peak",
        ("outage", "with_budgets", "released_peak_per_minute"),
        "<=",
        10,
        "{:.0f}",
        bounded_by="the policy's release_per_minute",
    ),
    _limit(
        "tasks apply of 10,000 unchanged tasks, s",
        ("ops", "tasks_apply", "seconds_for_10000"),
        "<=",
        60,
        "{:.0f}",
        bounded_by="reading and comparing the stored tasks: an unchanged task is not written",
    ),
    _limit(
        "audit verify --all, chains per s",
        ("verify", "chains_per_s"),
        ">=",
        5000,
        "{:.0f}",
        bounded_by="the scan of two tables and one HMAC per record, in one client process",
    ),
    _limit(
        "audit verify --all, chains per s of CPU (client and local cloud)",
        ("verify", "chains_per_cpu_s"),
        ">=",
        None,
        "{:.0f}",
        bounded_by="the same, per CPU-second of both processes",
    ),
    _limit(
        "moto's scan of the same tables, chains per s",
        ("verify", "moto_scan", "chains_per_s"),
        ">=",
        None,
        "{:.0f}",
        bounded_by="the local cloud's own scan: the ceiling of the row above",
    ),
    _limit(
        "cold import of a handler / import boto3 (worst)",
        ("imports", "worst_ratio"),
        "<=",
        1.3,
        bounded_by="lazy imports: a handler imports only what its module needs",
    ),
    _limit(
        "handler import + its first call's imports / import boto3 (worst)",
        ("imports", "worst_with_first_call_ratio"),
        "<=",
        None,
        bounded_by="pydantic models and botocore's service models loaded by the first call",
    ),
    Target(
        "redrive: SQS requests per moved message",
        "<= (3 per 10 + 2) / moved",
        lambda r: (r["ops"]["redrive"]["sqs_requests_per_message"], _redrive_floor(r["ops"])),
        lambda v: v[0] <= v[1] + 1e-9,
        lambda v: f"{v[0]:.3f} (floor {v[1]:.3f})",
        "ops",
        "batches of 10: a receive, a send and a delete per batch",
    ),
    _limit(
        "console first screen, 100,000 runs, cold s",
        ("console", "first_screen_seconds", "cold"),
        "<=",
        1.0,
        "{:.2f}",
        bounded_by="the queries of the first screen, each a page of an index",
    ),
    _limit(
        "console first screen, 100,000 runs, warm median s",
        ("console", "first_screen_seconds", "warm_median"),
        "<=",
        1.0,
        "{:.2f}",
        bounded_by="the queries of the first screen, each a page of an index",
    ),
    _limit(
        "pre-flight conflict-warning hit rate on a simulated day, %",
        ("conflicts", "hit_rate_pct"),
        ">=",
        90,
        "{:.1f}",
        bounded_by="runs much longer than their recent median, which the pre-flight cannot know",
    ),
)
