"""The pace model (`pipeline_constructs/pace.py`) and the chunk size it computes for a tenant
that leaves `chunk_size` out."""

from __future__ import annotations

import math
import textwrap

import pytest

from pipeline_constructs import budgets, pace
from pipeline_constructs.budgets import MAX_CHUNK_SIZE
from pipeline_constructs.config import ConfigError, parse_config

SINK = "sink: {url: 'https://core.example.com', auth: {type: none}"


def tenant(options: str = "", sink: str = ""):
    (parsed,) = parse_config(
        textwrap.dedent(
            f"""
            tenants:
              - {{id: acme, prefix: a/, {options} {SINK}{sink}}}}}
            """
        )
    ).tenants
    return parsed


def per_page(size: int, timeout: int = 10, outage: int = 3600, batch: int = 1) -> int:
    return budgets.max_chunks_per_page(size, timeout, outage, batch)


def test_the_default_is_the_smallest_round_size_whose_fixed_costs_fit_the_share():
    """GIVEN the default sink settings (one record per POST, 10 s timeout, 1 h outage budget)
    WHEN chunk_size is left out THEN the tenant gets the smallest round size whose chunk, page
    and progress costs are within FIXED_COST_SHARE of its sending at ANSWER; the round size
    below it is not."""
    size = tenant().records_per_chunk
    assert size in pace.ROUND_SIZES
    assert pace.fixed_share(size, 1, per_page(size)) <= pace.FIXED_COST_SHARE
    smaller = pace.ROUND_SIZES[pace.ROUND_SIZES.index(size) - 1]
    assert pace.fixed_share(smaller, 1, per_page(smaller)) > pace.FIXED_COST_SHARE


def test_a_slower_core_system_only_makes_the_fixed_costs_a_smaller_share():
    """GIVEN the computed default WHEN the core system answers slower than the design point
    THEN the fixed costs take a smaller share of the sending (never a larger one)."""
    size = tenant().records_per_chunk
    shares = [
        pace.fixed_share(size, 1, per_page(size), answer_seconds=ms / 1000) for ms in (5, 10, 20, 100, 1000)
    ]
    assert shares == sorted(shares, reverse=True) and shares[0] <= pace.FIXED_COST_SHARE


def test_batch_mode_gets_the_largest_chunk_when_no_round_size_fits_the_share():
    """GIVEN 100 records per POST WHEN chunk_size is left out THEN even chunk_size's own limit
    (1,000 POSTs) does not bring the fixed costs within the share at 5 ms, so the tenant gets
    that limit, a whole number of batches."""
    bat = tenant(sink=", batch_size: 100")
    assert bat.records_per_chunk == MAX_CHUNK_SIZE
    assert pace.fixed_share(MAX_CHUNK_SIZE, 100, per_page(MAX_CHUNK_SIZE, batch=100)) > pace.FIXED_COST_SHARE


def test_the_default_stays_within_the_register_budget():
    """GIVEN a 60 s sink timeout, where the history budget allows at most 9,198 records a chunk
    WHEN chunk_size is left out THEN the tenant gets that most (no round size below it fits the
    share), and it validates."""
    slow = tenant(sink=", timeout_seconds: 60")
    assert slow.records_per_chunk == budgets.max_chunk_size(60, 3600) == 9198


@pytest.mark.parametrize("timeout", [1, 5, 10, 30, 60])
@pytest.mark.parametrize("batch", [1, 7, 100, 1000])
@pytest.mark.parametrize("outage", [60, 3600, 6 * 3600])
def test_every_computed_default_is_a_valid_chunk_size(timeout, batch, outage):
    """GIVEN any sink settings WHEN chunk_size is left out THEN the computed size is a whole
    number of batches, within chunk_size's limit and the register budget, and a page holds at
    least one of its chunks: the tenant validates (parse_config checks every rule)."""
    computed = tenant(
        sink=f", timeout_seconds: {timeout}, batch_size: {batch}, outage_budget_seconds: {outage}"
    )
    size = computed.records_per_chunk
    assert 1 <= size <= min(MAX_CHUNK_SIZE, budgets.max_chunk_size(timeout, outage, batch))
    assert (
        size == MAX_CHUNK_SIZE or size % batch == 0 or size == budgets.max_chunk_size(timeout, outage, batch)
    )
    assert budgets.page_budget(computed).chunks_per_page >= 1


def test_the_default_keeps_the_chunks_per_page_the_tenant_writes():
    """GIVEN chunks_per_page 8 (what a page holds only up to 500 records a chunk at the default
    sink settings) WHEN chunk_size is left out THEN the largest size whose page still holds 8."""
    assert tenant("chunks_per_page: 8,").records_per_chunk == 500
    assert per_page(500) >= 8 > per_page(1000)


def test_a_chunk_size_written_in_the_file_wins():
    """GIVEN chunk_size 250 in the tenant WHEN it is validated THEN 250 is its chunk size; left
    out, the field stays null (the reference shows it as computed)."""
    assert tenant("chunk_size: 250,").records_per_chunk == 250
    assert tenant().chunk_size is None


def test_the_close_to_next_path_names_a_source_for_every_step():
    """GIVEN the model's path from a file's close to the next file's first POST THEN every step
    says where its figure comes from (a document or 'assumption'), and the total is their sum."""
    assert all(source.startswith(("https://", "assumption")) for _, _, source in pace.CLOSE_TO_NEXT)
    assert pace.close_to_next_seconds() == pytest.approx(sum(seconds for _, seconds, _ in pace.CLOSE_TO_NEXT))


def test_the_docs_cost_model_tables_are_what_the_model_computes():
    """GIVEN today's pace model WHEN bench/pace_model.py renders it THEN docs/benchmarks.md shows
    exactly those tables (run `bench/pace_model.py --write` after a change)."""
    from bench import pace_model
    from tests.conftest import ROOT

    assert pace_model.embedded((ROOT / "docs" / "benchmarks.md").read_text()) == pace_model.render()


def test_a_chunk_pays_one_progress_write_for_each_whole_interval_it_sends(monkeypatch):
    """GIVEN progress written every 2 s WHEN a chunk sends for 7.5 s THEN it pays 3 writes, and
    none while it sends for less than one interval."""
    monkeypatch.setattr(pace, "PROGRESS_EVERY_SECONDS", 2.0)
    assert pace.progress_seconds(7.5) == pytest.approx(3 * pace.DYNAMODB_REQUEST.seconds)
    assert pace.progress_seconds(1.9) == 0


def test_in_batch_mode_the_default_is_a_round_size_rounded_up_to_whole_batches():
    """GIVEN 3 records per POST WHEN chunk_size is left out THEN the tenant gets a round size
    rounded up to a whole number of batches: 50,001 (20,001 sends too few POSTs to hide its
    fixed costs at 5 ms)."""
    size = tenant(sink=", batch_size: 3").records_per_chunk
    assert size == 50_001
    assert size in {math.ceil(round_size / 3) * 3 for round_size in pace.ROUND_SIZES}


def test_chunks_per_page_beyond_a_page_at_the_smallest_size_is_refused_with_that_page_s_most():
    """GIVEN a 60 s sink timeout, where a page holds 8 chunks of 100 records and 7 of 200, and
    chunks_per_page 9 WHEN chunk_size is left out THEN no computed size can hold 9: the tenant
    is refused with the most a page holds at the smallest size (8), not at a larger one."""
    with pytest.raises(ConfigError) as refused:
        tenant("chunks_per_page: 9,", ", timeout_seconds: 60")
    message = str(refused.value)
    assert "field 'chunks_per_page' = 9" in message and "use at most 8, or leave it out" in message
    assert per_page(100, timeout=60) == 8 and per_page(200, timeout=60) == 7
