"""The picture of a run (`python -m demo --timeline`): what `from_run` reads from the executions
and the ledger's history, and what `render` draws, checked in the PNG's pixels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from PIL import Image

from demo.timeline import MARK_OFFSET, Bar, Halt, Handoff, Timeline, from_run, render
from lambdas.contract import execution_name

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ORIGIN = T0.timestamp()


def execution(event_id, key, start, stop, status="SUCCEEDED", attempt=0, start_record=0):
    """An execution as `LocalPipeline.executions` describes it (the fields the timeline reads)."""
    return {
        "name": execution_name(event_id, attempt),
        "key": key,
        "version_id": f"v-{event_id}",
        "status": status,
        "startDate": T0 + timedelta(seconds=start),
        "stopDate": None if stop is None else T0 + timedelta(seconds=stop),
        "input": {"event_id": event_id, "key": key, "start_record": start_record},
    }


def closed(event_id, status, *, halted=False, closed_at=None):
    """A ledger history entry (`Ledger.history`)."""
    return {
        "execution": event_id,
        "status": status,
        "halted": halted,
        "closed_at": None if closed_at is None else ORIGIN + closed_at,
    }


# acme: a.csv succeeds, b.csv fails and halts the tenant, the operator resumes it at 20 s (at its
# record 42), c.csv follows; globex runs three files meanwhile, all succeed.
ACME = [
    execution("a1", "acme/a.csv", 1, 6),
    execution("a2", "acme/b.csv", 6.5, 12, "FAILED"),
    execution("a2", "acme/b.csv", 20, 26, attempt=1, start_record=42),
    execution("a3", "acme/c.csv", 26.5, 31),
]
GLOBEX = [
    execution("g1", "globex/x.csv", 1.5, 9),
    execution("g2", "globex/y.csv", 9.5, 15),
    execution("g3", "globex/z.csv", 15.5, 22),
]
HISTORY = {
    "acme": [closed("a1", "SUCCEEDED", closed_at=6), closed("a2", "FAILED", halted=True, closed_at=12)]
}


def test_from_run_finds_the_halt_the_resume_and_the_hand_offs():
    """GIVEN a tenant whose second file failed and halted it until `ops resume`, and a tenant
    running in parallel WHEN the run is read THEN the halt lasts from the failure to the resume,
    the resumed attempt is a bar of its own, named with the record it resumed at, and every
    other next file is a hand-off."""
    timeline = from_run({"acme": ACME, "globex": GLOBEX}, HISTORY, origin=ORIGIN, end=ORIGIN + 32)

    assert timeline.tenants == ("acme", "globex")
    assert [(b.file, b.outcome, b.resumed) for b in timeline.bars if b.tenant == "acme"] == [
        ("a.csv", "SUCCEEDED", False),
        ("b.csv", "FAILED", False),
        ("b.csv from record 42", "SUCCEEDED", True),
        ("c.csv", "SUCCEEDED", False),
    ]
    assert timeline.halts == (Halt("acme", 12, 20, "resume"),)
    assert [(h.tenant, h.after, round(h.start, 3)) for h in timeline.handoffs] == [
        ("acme", 6, 6.5),
        ("acme", 26, 26.5),
        ("globex", 9, 9.5),
        ("globex", 15, 15.5),
    ]
    assert timeline.end == 32


def test_from_run_ends_a_halt_at_the_skip_and_keeps_one_still_halted():
    """GIVEN a failed file the operator skipped at 20 s (its history item is SKIPPED and no longer
    halted), a file still halted at the end, a duplicate and a file still running WHEN the run
    is read THEN the skip ends the first halt and hands off to the next file, the second halt
    lasts to the end, the duplicate and the running file have their own outcomes."""
    runs = [
        execution("s1", "t/bad.csv", 1, 5, "FAILED"),
        execution("s2", "t/next.csv", 21, 25),
        execution("s3", "t/copy.csv", 25.5, 26),
        execution("s4", "t/fails.csv", 26.5, 28, "TIMED_OUT"),
    ]
    history = {
        "t": [
            closed("s1", "SKIPPED", closed_at=20),
            closed("s2", "SUCCEEDED"),
            closed("s3", "DUPLICATE"),
            closed("s4", "FAILED", halted=True),
        ]
    }
    other = [execution("u1", "u/run.csv", 2, None, "RUNNING")]

    timeline = from_run({"t": runs, "u": other}, history, origin=ORIGIN, end=ORIGIN + 30)

    assert [b.outcome for b in timeline.bars] == ["FAILED", "SUCCEEDED", "DUPLICATE", "TIMED_OUT", "RUNNING"]
    assert timeline.halts == (Halt("t", 5, 20, "skip"), Halt("t", 28, None, None))
    assert (Handoff("t", 20, 21)) in timeline.handoffs
    assert not [h for h in timeline.handoffs if h.tenant == "u"]


def test_from_run_draws_no_halt_for_a_tenant_that_continues_after_a_failure():
    """GIVEN on_failure: continue (the failed close did not halt) WHEN read THEN no halt, a hand-off."""
    runs = [execution("c1", "t/a.csv", 1, 2, "FAILED"), execution("c2", "t/b.csv", 2.5, 4)]
    timeline = from_run(
        {"t": runs}, {"t": [closed("c1", "FAILED", halted=False)]}, origin=ORIGIN, end=ORIGIN + 5
    )
    assert timeline.halts == () and timeline.handoffs == (Handoff("t", 2, 2.5),)


# --- the picture ------------------------------------------------------------------------------


def is_green(pixel) -> bool:
    r, g, b = (int(c) for c in pixel[:3])
    return g > r + 60 and g > b + 60


def is_red(pixel) -> bool:
    r, g, b = (int(c) for c in pixel[:3])
    return r > g + 100 and r > b + 100


class Picture:
    """The PNG written, read back with Pillow, addressed in the axes' data coordinates (seconds,
    and the lane of a tenant as its y tick label says)."""

    def __init__(self, path, figure) -> None:
        self.pixels = np.asarray(Image.open(path).convert("RGB"))
        self.ax = figure.axes[0]
        self.lanes = {
            label.get_text(): y for y, label in zip(self.ax.get_yticks(), self.ax.get_yticklabels())
        }

    def xy(self, seconds: float, tenant: str, dy: float = 0.0) -> tuple[int, int]:
        """Column and row of a point (rows count from the top in the image, from the bottom in matplotlib)."""
        x, y = self.ax.transData.transform((seconds, self.lanes[tenant] + dy))
        return round(x), round(self.pixels.shape[0] - y)

    def at(self, seconds: float, tenant: str, dy: float = 0.0):
        column, row = self.xy(seconds, tenant, dy)
        return self.pixels[row, column]

    def near(self, seconds: float, tenant: str, dy: float, radius: int = 4):
        column, row = self.xy(seconds, tenant, dy)
        return self.pixels[row - radius : row + radius + 1, column - radius : column + radius + 1].reshape(
            -1, 3
        )

    def bars_along(self, tenant: str) -> list[tuple[int, str]]:
        """The coloured runs along the lane's centre row, left to right: (first column, colour)."""
        _, row = self.xy(0, tenant)
        runs: list[tuple[int, str]] = []
        previous = None
        for column, pixel in enumerate(self.pixels[row]):
            colour = "green" if is_green(pixel) else "red" if is_red(pixel) else None
            if colour and colour != previous:
                runs.append((column, colour))
            previous = colour
        return runs


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    timeline = from_run({"acme": ACME, "globex": GLOBEX}, HISTORY, origin=ORIGIN, end=ORIGIN + 32)
    path = tmp_path_factory.mktemp("timeline") / "run.png"
    figure = render(timeline, path, title="halt and resume")
    return timeline, Picture(path, figure)


def test_each_execution_is_a_bar_in_its_tenants_lane_coloured_by_its_outcome(picture):
    """GIVEN the run above drawn into a PNG WHEN its pixels are read at the middle of each
    execution, in its tenant's lane THEN succeeded ones are green, the failed one red; and the
    failed file's red is in acme's lane only."""
    timeline, image = picture
    assert image.pixels.shape[1] == 1200  # 12 in at 100 dpi, a PNG that opens
    assert image.lanes.keys() == {"acme", "globex"} and image.lanes["acme"] != image.lanes["globex"]
    for bar in timeline.bars:
        pixel = image.at((bar.start + bar.stop) / 2, bar.tenant)
        assert (is_red if bar.outcome == "FAILED" else is_green)(pixel), (bar, pixel)
    assert [colour for _, colour in image.bars_along("globex")] == ["green"] * 3  # no red
    assert "red" in [colour for _, colour in image.bars_along("acme")]


def test_the_bars_follow_each_other_along_x_in_start_order(picture):
    """GIVEN the PNG WHEN acme's lane is scanned left to right THEN its bars come in the order the
    executions started (success, failure, the resumed attempt, the next file), each where its
    start time puts it, with the halted time between the failure and the resume shaded."""
    timeline, image = picture
    acme = sorted((b for b in timeline.bars if b.tenant == "acme"), key=lambda b: b.start)
    runs = image.bars_along("acme")
    # Adjacent green bars are separated by white edges: four bars, four runs.
    assert [colour for _, colour in runs] == ["green" if b.outcome == "SUCCEEDED" else "red" for b in acme]
    for (column, _), bar in zip(runs, acme):
        assert abs(column - image.xy(bar.start, "acme")[0]) <= 2, (bar, column)
    shaded = image.at(16, "acme")  # halted from 12 s to 20 s
    assert not is_green(shaded) and not is_red(shaded) and tuple(shaded) != (255, 255, 255), shaded


def test_the_halt_and_the_resume_are_marked_above_the_lane(picture):
    """GIVEN the PNG THEN a dark red halt marker sits where the failed file stopped and a black
    resume marker where the resumed attempt started, and no halt marker in globex's lane."""
    _, image = picture

    def dark_red(pixels):  # the failed bar's red is lighter (214, 39, 40)
        return any(100 < r < 170 and g < 30 and b < 30 for r, g, b in (map(int, p) for p in pixels))

    def black(pixels):
        return any(max(map(int, p)) < 40 for p in pixels)

    assert dark_red(image.near(12, "acme", -MARK_OFFSET))
    assert black(image.near(20, "acme", -MARK_OFFSET))
    assert not dark_red(image.near(9.5, "globex", -MARK_OFFSET)) and not black(
        image.near(9.5, "globex", -MARK_OFFSET)
    )


def test_a_long_file_name_is_shown_only_where_it_fits(tmp_path):
    """GIVEN a wide bar and a bar too short for its file's name WHEN drawn THEN only the wide one is labelled."""
    bars = (
        Bar("t", "wide.csv", 0, 20, "SUCCEEDED", False),
        Bar("t", "a-very-long-file-name-that-cannot-fit.csv", 20.2, 20.4, "SUCCEEDED", False),
        Bar("t", "after.csv", 20.6, 30, "SUCCEEDED", False),
    )
    figure = render(Timeline(("t",), bars, (), (), 30), tmp_path / "run.png")
    assert sorted(text.get_text() for text in figure.axes[0].texts) == ["after.csv", "wide.csv"]


def test_fails_when_the_file_is_not_a_picture_format(tmp_path):
    with pytest.raises(ValueError) as error:
        render(Timeline(("t",), (), (), (), 1), tmp_path / "run.jpg")
    assert (
        str(error.value)
        == f"{tmp_path / 'run.jpg'}: a timeline is written as .png or .svg or .pdf; give the file one of these suffixes"
    )
