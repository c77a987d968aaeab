"""A picture of a run (`python -m demo --timeline run.png`): one lane per tenant, each file's
execution a bar from its start to its stop coloured by its outcome, the halted time shaded,
and halts, resumes, skips and hand-offs marked, so order and parallelism show at a glance.

Two steps without side effects beyond the file written: `from_run` turns what a run recorded
(the executions as `LocalPipeline.executions` describes them, the ledger's history of closed
attempts) into a `Timeline`; `render` draws a `Timeline` with matplotlib (no pyplot, no
display: its Agg canvas) into a PNG, SVG or PDF, chosen by the file's suffix. `write` reads
both from a running local pipeline and does the two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from demo.verify import is_resume

#: The file formats `render` writes, by suffix.
SUFFIXES = (".png", ".svg", ".pdf")

#: A bar's colour and legend text per outcome: the Step Functions status of the execution, or
#: DUPLICATE (the ledger closed it as a copy of an earlier file: nothing sent) or RUNNING (not
#: closed when the picture was taken).
OUTCOMES: dict[str, tuple[str, str]] = {
    "SUCCEEDED": ("#2ca02c", "succeeded"),
    "DUPLICATE": ("#a6dba0", "duplicate, nothing sent"),
    "FAILED": ("#d62728", "failed"),
    "TIMED_OUT": ("#ff7f0e", "timed out"),
    "ABORTED": ("#8c564b", "aborted"),
    "RUNNING": ("#1f77b4", "still running"),
}
HALT_COLOUR, HALT_HATCH = "#f6d3d3", "#e8a5a5"
#: Marker (matplotlib marker, colour, size, legend text) per event.
MARKS: dict[str, tuple[str, str, float, str]] = {
    "handoff": ("v", "#555555", 5, "hand-off to the next file"),
    "halt": ("8", "#8b0000", 7, "halt after a failure"),
    "resume": (">", "#000000", 7, "ops resume"),
    "skip": ("X", "#444444", 7, "ops skip"),
}
BAR_HEIGHT = 0.5  # lanes are 1 apart
HALT_HEIGHT = BAR_HEIGHT
MARK_OFFSET = BAR_HEIGHT / 2 + 0.08  # markers sit just above their bar


@dataclass(frozen=True)
class Bar:
    """One execution: a file's attempt. Times in seconds from the run's origin."""

    tenant: str
    file: str  # the object key's last part (a resumed attempt: and the record it resumed at)
    start: float
    stop: float | None  # None: still running when the picture was taken
    outcome: str  # a key of `OUTCOMES`
    resumed: bool  # started by `ops resume` (a file's second or later attempt)


@dataclass(frozen=True)
class Halt:
    """A tenant halted after a failed file, until a resume or a skip (or still, at the end)."""

    tenant: str
    start: float
    stop: float | None
    ended_by: str | None  # "resume", "skip", or None: still halted


@dataclass(frozen=True)
class Handoff:
    """The next file of a tenant started after the one before it closed (or was skipped)."""

    tenant: str
    after: float  # when the file before closed, or the operator skipped it
    start: float  # when the next file started

    @property
    def gap(self) -> float:
        return self.start - self.after


@dataclass(frozen=True)
class Timeline:
    tenants: tuple[str, ...]  # one lane each, in this order, top to bottom
    bars: tuple[Bar, ...]
    halts: tuple[Halt, ...]
    handoffs: tuple[Handoff, ...]
    end: float  # when the picture was taken (a running bar or a halt lasts until then)


def from_run(
    executions: Mapping[str, Sequence[dict[str, Any]]],
    history: Mapping[str, Sequence[dict[str, Any]]],
    *,
    origin: float,
    end: float,
) -> Timeline:
    """The timeline of a run. ``executions``: per tenant, as `LocalPipeline.executions` gives
    them (``name``, ``status``, ``startDate``, ``stopDate``, ``key``, ``version_id``,
    ``input``); ``history``: per tenant, the ledger's closed attempts (`Ledger.history`:
    ``execution``, ``status``, ``halted``, ``closed_at``). ``origin`` and ``end``: epoch
    seconds (the first upload, and now)."""
    bars: list[Bar] = []
    halts: list[Halt] = []
    handoffs: list[Handoff] = []
    for tenant, runs in executions.items():
        closed = {entry["execution"]: entry for entry in history.get(tenant, ())}
        ordered = sorted(runs, key=lambda e: (e["startDate"], e["name"]))
        lane: list[tuple[Bar, Halt | None]] = []
        for index, execution in enumerate(ordered):
            entry = closed.get(execution["name"], {})
            stop = execution["stopDate"].timestamp() - origin if execution.get("stopDate") else None
            bar = Bar(
                tenant=tenant,
                file=_label(execution),
                start=execution["startDate"].timestamp() - origin,
                stop=stop,
                outcome="DUPLICATE" if entry.get("status") == "DUPLICATE" else execution["status"],
                resumed=is_resume(execution),
            )
            halt = None
            # A skip rewrites the attempt's history item (halted no more): a skipped file was halted.
            if stop is not None and (entry.get("halted") or entry.get("status") == "SKIPPED"):
                same_file = (execution["key"], execution["version_id"])
                retry = next(
                    (e for e in ordered[index + 1 :] if (e["key"], e["version_id"]) == same_file), None
                )
                if retry is not None:
                    halt = Halt(tenant, stop, retry["startDate"].timestamp() - origin, "resume")
                elif entry.get("status") == "SKIPPED" and entry.get("closed_at"):
                    halt = Halt(tenant, stop, entry["closed_at"] - origin, "skip")
                else:
                    halt = Halt(tenant, stop, None, None)
                halts.append(halt)
            bars.append(bar)
            lane.append((bar, halt))
        for (before, halted), (after, _) in pairwise(lane):
            if after.resumed or before.stop is None:
                continue
            released = halted.stop if halted is not None else before.stop
            if released is not None:
                handoffs.append(Handoff(tenant, released, after.start))
    return Timeline(
        tenants=tuple(executions),
        bars=tuple(bars),
        halts=tuple(halts),
        handoffs=tuple(handoffs),
        end=end - origin,
    )


def render(timeline: Timeline, path: Path, *, title: str = "ordered ingest: the run") -> Figure:
    """Draw ``timeline`` into ``path`` (PNG, SVG or PDF by its suffix, see `SUFFIXES`). Returns
    the figure, drawn: its axes map seconds (x) and lanes (y, the tenants as tick labels) to
    the pixels of the PNG written (origin at the bottom left there)."""
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(
            f"{path}: a timeline is written as {' or '.join(SUFFIXES)}; give the file one of these suffixes"
        )
    lanes = {tenant: index for index, tenant in enumerate(timeline.tenants)}
    fig = Figure(figsize=(12, 1.9 + 0.9 * max(1, len(lanes))), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()

    for halt in timeline.halts:
        stop = timeline.end if halt.stop is None else halt.stop
        ax.barh(
            lanes[halt.tenant],
            stop - halt.start,
            left=halt.start,
            height=HALT_HEIGHT,
            color=HALT_COLOUR,
            hatch="//",
            edgecolor=HALT_HATCH,
            linewidth=0,
            zorder=1,
        )
    labels = []
    for bar in timeline.bars:
        stop = timeline.end if bar.stop is None else bar.stop
        lane = lanes[bar.tenant]
        ax.barh(
            lane,
            stop - bar.start,
            left=bar.start,
            height=BAR_HEIGHT,
            color=OUTCOMES[bar.outcome][0],
            edgecolor="white",
            linewidth=1,
            zorder=2,
        )
        labels.append(
            (
                bar,
                ax.text(
                    bar.start,
                    lane + BAR_HEIGHT / 2 + 0.04,
                    bar.file,
                    fontsize=7,
                    ha="left",
                    va="top",
                    clip_on=True,
                    zorder=3,
                ),
            )
        )

    marks: dict[str, list[tuple[float, int]]] = {kind: [] for kind in MARKS}
    marks["handoff"] = [(h.start, lanes[h.tenant]) for h in timeline.handoffs]
    marks["halt"] = [(h.start, lanes[h.tenant]) for h in timeline.halts]
    marks["resume"] = [(b.start, lanes[b.tenant]) for b in timeline.bars if b.resumed]
    marks["skip"] = [
        (h.stop, lanes[h.tenant]) for h in timeline.halts if h.ended_by == "skip" and h.stop is not None
    ]
    for kind, points in marks.items():
        if points:
            marker, colour, size, _ = MARKS[kind]
            ax.plot(
                [x for x, _ in points],
                [lane - MARK_OFFSET for _, lane in points],
                linestyle="none",
                marker=marker,
                color=colour,
                markersize=size,
                markeredgecolor="white",
                markeredgewidth=0.5,
                zorder=4,
            )

    starts = [b.start for b in timeline.bars] + [0.0]
    left, right = min(starts), max([timeline.end, *(b.stop or 0 for b in timeline.bars)])
    pad = max(right - left, 1.0) * 0.01
    ax.set_xlim(left - pad, right + pad)
    ax.set_ylim(len(lanes) - 0.4, -0.6)  # the first tenant on top
    ax.set_yticks(range(len(lanes)), list(lanes))
    ax.set_xlabel("seconds since the first upload")
    ax.set_title(title)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)

    handles: list[Any] = [
        Patch(color=colour, label=text)
        for outcome, (colour, text) in OUTCOMES.items()
        if any(b.outcome == outcome for b in timeline.bars)
    ]
    if timeline.halts:
        handles.append(
            Patch(facecolor=HALT_COLOUR, hatch="//", edgecolor=HALT_HATCH, linewidth=0, label="halted")
        )
    handles += [
        Line2D(
            [],
            [],
            linestyle="none",
            marker=MARKS[kind][0],
            color=MARKS[kind][1],
            markersize=MARKS[kind][2],
            label=MARKS[kind][3],
        )
        for kind, points in marks.items()
        if points
    ]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize=8)

    fig.draw_without_rendering()  # lays out the figure, so text and bars have their final sizes
    _drop_crowded_labels(ax, labels, timeline)
    fig.savefig(path)
    return fig


def _label(execution: dict[str, Any]) -> str:
    name = str(execution.get("key") or execution["name"]).rsplit("/", 1)[-1]
    first = int((execution.get("input") or {}).get("start_record") or 0)
    return f"{name} from record {first:,}" if first else name


def _drop_crowded_labels(ax, labels: list[tuple[Bar, Any]], timeline: Timeline) -> None:
    """A file name is shown under its bar only if it fits before the next bar of its lane starts."""
    next_start: dict[Bar, float] = {}
    for tenant in timeline.tenants:
        lane = sorted((b for b in timeline.bars if b.tenant == tenant), key=lambda b: b.start)
        for before, after in pairwise(lane):
            next_start[before] = after.start
    x_max = ax.get_xlim()[1]
    for bar, text in labels:
        room = (
            ax.transData.transform((next_start.get(bar, x_max), 0))[0]
            - ax.transData.transform((bar.start, 0))[0]
        )
        if text.get_window_extent().width > room - 2:
            text.remove()


def write(
    pipe: Any, resources: Mapping[str, Any], path: Path, *, origin: float, end: float, title: str
) -> Timeline:
    """Read the run from the local pipeline ``pipe`` (its executions, and each tenant's ledger
    history; ``resources``: what `ops.discovery.discover` found) and draw it into ``path``."""
    from lambdas.ledger import Ledger

    ddb = pipe.client("dynamodb")
    timeline = from_run(
        {tenant: pipe.executions(tenant) for tenant in pipe.tenant_ids},
        {tenant: Ledger(ddb, resources[tenant].ledger_table, tenant).history() for tenant in pipe.tenant_ids},
        origin=origin,
        end=end,
    )
    render(timeline, path, title=title)
    return timeline
