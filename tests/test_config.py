"""tenants.yaml validation: every problem at once, each naming tenant, field, value and fix."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from pipeline_constructs import budgets, names
from pipeline_constructs.config import ConfigError, load_config, parse_config
from tests.conftest import one_problem, problems_of

SINK = "  sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}\n"


def test_the_fixture_tenants_file_is_valid_and_applies_defaults():
    config = load_config(Path(__file__).resolve().parent / "fixtures" / "tenants.yaml")
    by_id = {t.id: t for t in config.tenants}
    assert list(by_id) == ["acme", "globex", "initech"]
    assert by_id["acme"].format == "csv" and by_id["acme"].chunk_size == 100
    assert by_id["globex"].format == "jsonl"
    assert by_id["initech"].chunk_size == 250
    assert by_id["initech"].alarms.queue_age_seconds == 7200
    # nested blocks merge key by key: initech overrides the alarm thresholds it names only
    assert by_id["initech"].alarms.error_logs_threshold == 1
    assert by_id["acme"].sink.url == "https://core.example.com/api/records"


def test_fails_when_an_id_is_declared_twice():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/}}
          - {{id: acme, prefix: b/}}
        """
    ) == (
        "tenant 'acme': field 'id' = 'acme': is declared more than once; give every tenant a unique id "
        "(it names the tenant's queue, workflow and stack)"
    )


def test_fails_when_an_id_has_bad_characters():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: Acme_Corp, prefix: a/}}
        """
    ) == (
        "tenant 'Acme_Corp': field 'id' = 'Acme_Corp': has characters other than lowercase letters, digits "
        "and single hyphens, or does not start with a letter; use lowercase letters, digits and single "
        f"hyphens, starting with a letter (at most {names.MAX_TENANT_ID_LENGTH} characters)"
    )


def test_fails_when_an_id_contains_the_part_every_state_machine_name_shares():
    """GIVEN tenant 'a' and tenant 'a-file-ingest-page-b' WHEN validated THEN the second is
    refused: CDK's grant of 'a's child executions (`execution:a-file-ingest-page*`) would also
    name the executions of 'a-file-ingest-page-b-file-ingest-page'."""
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: a, prefix: a/}}
          - {{id: a-file-ingest-page-b, prefix: b/}}
        """
    ) == (
        "tenant 'a-file-ingest-page-b': field 'id' = 'a-file-ingest-page-b': contains 'file-ingest', the part "
        "every tenant's state machine names share (another tenant's permissions could then cover this one's); "
        "use lowercase letters, digits and single hyphens, starting with a letter (at most 49 characters)"
    )


def test_fails_when_an_id_is_too_long_for_a_derived_resource_name():
    tenant_id = "a" * (names.MAX_TENANT_ID_LENGTH + 1)
    assert names.MAX_TENANT_ID_LENGTH == 49  # "<id>-register-chunk" must fit Lambda's 64 characters
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: {tenant_id}, prefix: a/}}
        """
    ) == (
        f"tenant '{tenant_id}': field 'id' = '{tenant_id}': is 50 characters, so the derived Lambda "
        f"function name '{tenant_id}-register-chunk' is 65 characters (limit 64); use lowercase letters, "
        "digits and single hyphens, starting with a letter (at most 49 characters)"
    )


def test_fails_when_prefixes_overlap():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: in/}}
          - {{id: beta, prefix: in/beta/}}
        """
    ) == (
        "tenant 'beta': field 'prefix' = 'in/beta/': overlaps tenant 'acme' prefix 'in/'; "
        "give each tenant a prefix that is not inside another's"
    )


def test_fails_when_the_format_is_unknown():
    assert (
        one_problem(
            f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, format: xml}}
        """
        )
        == "tenant 'acme': field 'format' = 'xml': is not one of 'csv' or 'jsonl'; use 'csv' (with a header row, the default) or 'jsonl'"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, "is less than 1"),
        (
            100001,
            "is more than 100000",
        ),  # below it, the register budget: test_fails_when_a_record_mode_chunk_is_more_than...
    ],
)
def test_fails_when_chunk_size_is_out_of_range(value, problem):
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, chunk_size: {value}}}
        """
    ) == (
        f"tenant 'acme': field 'chunk_size' = {value}: {problem}; leave it out (computed from the sink settings), "
        "or use a whole number from 1 to 100000 within the register budget of sink.timeout_seconds"
    )


def test_fails_when_a_threshold_is_negative():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - id: acme
            prefix: a/
            alarms: {{stall_after_seconds: -1}}
        """
    ) == (
        "tenant 'acme': field 'alarms.stall_after_seconds' = -1: is less than 60; "
        "use a whole number of seconds, at least 60 (default 1800)"
    )


def test_fails_when_a_key_is_misspelt_and_suggests_the_right_one():
    assert (
        one_problem(
            f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, chunk_sise: 10}}
        """
        )
        == "tenant 'acme': field 'chunk_sise' = 10: unknown key; remove it or fix its spelling (did you mean 'chunk_size'?)"
    )


def test_fails_when_a_notifications_key_is_misspelt_and_suggests_the_right_one():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        notifications: {{email: [oncall@example.com]}}
        tenants:
          - {{id: acme, prefix: a/}}
        """
    ) == (
        "notifications: field 'email' = ['oncall@example.com']: unknown key; "
        "remove it or fix its spelling (did you mean 'emails'?)"
    )


def test_fails_when_a_nested_sink_key_is_misspelt():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, sink: {url: "https://core.example.com", auth: {type: none}, timout: 3}}
        """
    ) == (
        "tenant 'acme': field 'sink.timout' = 3: unknown key; "
        "remove it or fix its spelling (did you mean 'timeout_seconds'?)"
    )


def test_fails_when_a_defaults_key_is_misspelt():
    assert (
        one_problem(
            f"""
        defaults:
        {SINK}
          fromat: csv
        tenants:
          - {{id: acme, prefix: a/}}
        """
        )
        == "defaults: field 'fromat' = 'csv': unknown key; remove it or fix its spelling (did you mean 'format'?)"
    )


def test_fails_when_the_tenant_list_is_empty():
    assert one_problem("tenants: []\n") == (
        "file: field 'tenants' = []: must be a non-empty list; "
        "declare at least one tenant with '- id: ...' and 'prefix: ...'"
    )


def test_fails_when_the_yaml_does_not_parse_and_names_the_line():
    assert one_problem("tenants:\n  - id: acme\n   prefix: a/\n") == (
        "YAML syntax error at line 3, column 4: expected <block end>, but found '<block mapping start>'; "
        "fix the indentation, a missing ':' or an unclosed quote there"
    )


def test_fails_when_the_sink_is_plain_http_to_a_remote_host():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, sink: {url: "http://core.example.com/records", auth: {type: none}}}
        """
    ) == (
        "tenant 'acme': field 'sink.url' = 'http://core.example.com/records': must be an https:// URL "
        "(plain http:// only for localhost); use the core system's https:// endpoint"
    )


def test_fails_when_the_sink_is_missing():
    assert one_problem("tenants:\n  - {id: acme, prefix: a/}\n") == (
        "tenant 'acme': field 'sink' = (missing): is required; set sink.url and sink.auth in the tenant or in defaults "
        "('auth: {type: none}' only in the tenant)"
    )


def test_a_bad_default_is_reported_once_not_once_per_tenant():
    assert one_problem(
        """
        defaults:
          sink: {url: "ftp://core", auth: {type: bearer, secret: core/token}}
        tenants:
          - {id: acme, prefix: a/}
          - {id: beta, prefix: b/}
        """
    ) == (
        "defaults: field 'sink.url' = 'ftp://core': must be an https:// URL (plain http:// only for localhost); "
        "use the core system's https:// endpoint"
    )


def test_reports_every_problem_at_once():
    problems = problems_of(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, format: xml, chunk_size: 0}}
          - {{id: Beta, prefix: a/b/}}
          - {{id: gamma, prefix: c/, colour: red}}
        """
    )
    assert [p.split(":")[0] + ":" + p.split("'")[3] for p in problems] == [
        "tenant 'acme':format",
        "tenant 'acme':chunk_size",
        "tenant 'Beta':id",
        "tenant 'gamma':colour",
        "tenant 'Beta':prefix",
    ]


def test_the_error_message_lists_the_problems_under_the_file_name(tmp_path):
    path = tmp_path / "my-tenants.yaml"
    path.write_text("tenants: []\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith("my-tenants.yaml is invalid (1 problem):\n  - file: field 'tenants'")


def test_on_failure_defaults_to_halt_and_may_be_set_per_tenant_or_in_defaults():
    config = parse_config(
        textwrap.dedent(
            f"""
        defaults:
        {SINK}
          on_failure: continue
        tenants:
          - {{id: a, prefix: a/}}
          - {{id: b, prefix: b/, on_failure: halt}}
        """
        )
    )
    assert [t.on_failure for t in config.tenants] == ["continue", "halt"]
    (solo,) = parse_config(f"defaults:\n{SINK}tenants: [{{id: s, prefix: s/}}]").tenants
    assert solo.on_failure == "halt"
    assert solo.sink.outage_budget_seconds == 3600


def test_fails_when_on_failure_is_unknown():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, on_failure: retry}}
        """
    ) == (
        "tenant 'acme': field 'on_failure' = 'retry': is not one of 'halt' or 'continue'; use 'halt' (a failed "
        "file stops the tenant until `ops resume` or `ops skip`, the default) or 'continue'"
    )


def test_fails_when_the_outage_budget_is_not_positive():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}, outage_budget_seconds: 0}}
        """
    ) == (
        "tenant 'acme': field 'sink.outage_budget_seconds' = 0: is less than 1; "
        "use a whole number of seconds from 1 to 86400 (default 3600)"
    )


def test_fails_when_a_chunk_at_the_slowest_answer_needs_too_many_register_invocations():
    """chunk_size x sink.timeout_seconds, in invocations of the register function's 15 minutes, is
    checked against what one page's history holds with a whole outage (657 at the default hour)."""
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 10000, sink: {url: 'https://core.example.com', auth: {type: none}, timeout_seconds: 60}}
        """
    ) == (
        "tenant 'acme': field 'chunk_size' = 10000: x sink.timeout_seconds 60 = 600000 s for a chunk at the slowest "
        "answer, 715 invocations of the register function's 900 s limit: with a whole outage of "
        "sink.outage_budget_seconds 3600, a page execution's history holds at most 657 for one chunk; use a "
        "chunk_size of at most 9198 at these settings, or a lower sink.timeout_seconds"
    )


def test_the_largest_allowed_chunk_passes_and_one_more_fails():
    """At every sink timeout and outage budget, the largest chunk still fits one page (with a whole
    outage in it) and one record more does not: the bound is the page's history, not a constant."""
    for timeout in (1, 5, 10, 60):
        for outage in (60, 3600, 6 * 3600, 11 * 3600):
            largest = budgets.max_chunk_size(timeout, outage)
            most = budgets.max_register_invocations_per_chunk(outage)
            assert budgets.register_invocations_per_chunk(largest, timeout) == most, (timeout, outage)
            assert budgets.register_invocations_per_chunk(largest + 1, timeout) == most + 1
            assert budgets.max_chunks_per_page(largest, timeout, outage) == 1
            assert budgets.max_chunks_per_page(largest + 1, timeout, outage) == 0


def test_a_longer_outage_budget_leaves_room_for_smaller_chunks():
    """GIVEN a 6-hour outage budget (more of a page's history goes to waiting it out) WHEN the chunk is
    the largest allowed at the default hour THEN it is refused, naming the outage budget, and the
    largest at 6 hours passes."""

    def tenants(chunk_size: int) -> str:
        return f"""
        tenants:
          - {{id: acme, prefix: a/, chunk_size: {chunk_size}, sink: {{url: 'https://core.example.com', auth: {{type: none}}, timeout_seconds: 60, outage_budget_seconds: 21600}}}}
        """

    largest = budgets.max_chunk_size(60, 6 * 3600)
    assert largest < budgets.max_chunk_size(60, 3600) == 9198
    (tenant,) = parse_config(textwrap.dedent(tenants(largest))).tenants
    assert tenant.chunk_size == largest
    problem = one_problem(tenants(9198))
    assert "sink.outage_budget_seconds 21600" in problem and f"at most {largest} at these settings" in problem


def test_an_outage_budget_too_long_for_any_chunk_is_blamed_alone():
    """GIVEN an outage budget that does not fit a page even with one-invocation chunks WHEN synth
    checks the tenant THEN the one problem names the outage budget, not chunk_size."""
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 10000, sink: {url: 'https://core.example.com', auth: {type: none}, outage_budget_seconds: 43200}}
        """
    ).startswith(
        "tenant 'acme': field 'outage_budget_seconds' = 43200: is too long for one page execution's history"
    )


# --- prefixes S3 would URL-encode in its events ----------------------------------------------


def test_fails_when_a_prefix_has_a_space(tmp_path):
    """GIVEN prefix 'Acme Corp/' WHEN the app is built (synth) THEN it fails naming the space: S3
    sends 'Acme+Corp/...' in its events and the tenant's rule would never match a file."""
    path = tmp_path / "tenants.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: "Acme Corp/"}}
        """
        )
    )
    from pipeline_constructs.application import build_app

    with pytest.raises(ConfigError) as caught:
        build_app(path)
    assert caught.value.problems == [
        "tenant 'acme': field 'prefix' = 'Acme Corp/': has the character ' ' (space), which S3 URL-encodes in "
        "its event notifications, so the tenant's rule would never match its files; use only letters, digits, "
        "'/', '.', '_' and '-', e.g. 'Acme-Corp/'"
    ]


@pytest.mark.parametrize(
    ("prefix", "shown", "suggestion"),
    [
        ("year=2024/", "'='", "year-2024/"),
        ("c++/", "'+'", "c--/"),
        ("50%/", "'%'", "50-/"),
        ("köln/", "'ö'", "k-ln/"),
        ("a:b(1)/", "':' and '(' and ')'", "a-b-1-/"),
        ("tab\tx/", "'\\t' (tab)", "tab-x/"),
    ],
    ids=["equals", "plus", "percent", "non-ascii", "several", "tab"],
)
def test_fails_when_a_prefix_has_a_character_s3_encodes_in_events(prefix, shown, suggestion):
    problem = one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: {json.dumps(prefix)}}}
        """
    )
    assert problem == (
        f"tenant 'acme': field 'prefix' = {prefix!r}: has the character{'s' if ' and ' in shown else ''} {shown}, "
        "which S3 URL-encodes in its event notifications, so the tenant's rule would never match its files; "
        f"use only letters, digits, '/', '.', '_' and '-', e.g. '{suggestion}'"
    )


def test_a_prefix_of_letters_digits_and_safe_punctuation_is_valid():
    config = parse_config(
        textwrap.dedent(
            f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: "Acme_Corp-2024/in.v2/"}}
        """
        )
    )
    assert config.tenants[0].prefix == "Acme_Corp-2024/in.v2/"


def test_file_time_limit_defaults_to_the_outage_budget_plus_six_hours_and_may_be_set():
    config = parse_config(
        textwrap.dedent(
            """
        tenants:
          - {id: a, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}, outage_budget_seconds: 600}}
          - {id: b, prefix: b/, sink: {url: 'https://core.example.com', auth: {type: none}}, file_time_limit_seconds: 7200}
        """
        )
    )
    assert [t.file_time_limit for t in config.tenants] == [600 + 6 * 3600, 7200]


def test_fails_when_the_file_time_limit_is_not_longer_than_the_outage_budget():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}}, file_time_limit_seconds: 3600}
        """
    ) == (
        "tenant 'acme': field 'file_time_limit_seconds' = 3600: is not longer than sink.outage_budget_seconds "
        "3600: an outage would time the file out before its budget ends; use more than 3600 seconds, or leave "
        "it out (default: the outage budget plus 6 hours)"
    )


def test_queue_age_defaults_to_a_six_hour_backlog_and_sink_errors_to_ten():
    (solo,) = parse_config(f"defaults:\n{SINK}tenants: [{{id: s, prefix: s/}}]").tenants
    assert (solo.alarms.queue_age_seconds, solo.alarms.sink_errors_threshold) == (21600, 10)


def test_duplicate_files_defaults_to_process_and_may_be_set_per_tenant_or_in_defaults():
    config = parse_config(
        textwrap.dedent(
            f"""
        defaults:
        {SINK}
          duplicate_files: skip
        tenants:
          - {{id: a, prefix: a/}}
          - {{id: b, prefix: b/, duplicate_files: process}}
        """
        )
    )
    assert [t.duplicate_files for t in config.tenants] == ["skip", "process"]
    (solo,) = parse_config(f"defaults:\n{SINK}tenants: [{{id: s, prefix: s/}}]").tenants
    assert solo.duplicate_files == "process"


def test_fails_when_duplicate_files_is_unknown():
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, duplicate_files: ignore}}
        """
    ) == (
        "tenant 'acme': field 'duplicate_files' = 'ignore': is not one of 'process' or 'skip'; use 'process' "
        "(a byte-identical re-upload is processed again, the default) or 'skip' (recorded as a duplicate)"
    )


# --- the batch contract (sink.batch_size) ------------------------------------------------------


def test_batch_size_defaults_to_one_record_per_post():
    (tenant,) = parse_config(
        textwrap.dedent(
            """
        tenants:
          - {id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}}}
        """
        )
    ).tenants
    assert tenant.sink.batch_size == 1


def test_fails_when_batch_size_is_zero():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}, batch_size: 0}}
        """
    ) == (
        "tenant 'acme': field 'sink.batch_size' = 0: is less than 1; use a whole number "
        "from 1 to 1000 (default 1): 1 sends one record per POST, more a JSON array per POST, only for a core "
        "system that implements the batch contract"
    )


def test_fails_when_batch_size_is_above_the_largest():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 1000, sink: {url: 'https://core.example.com', auth: {type: none}, batch_size: 1001}}
        """
    ).startswith("tenant 'acme': field 'sink.batch_size' = 1001: is more than 1000; ")


def test_fails_when_batch_size_is_larger_than_chunk_size():
    """A batch is cut inside one chunk: it could never fill."""
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 100, sink: {url: 'https://core.example.com', auth: {type: none}, batch_size: 250}}
        """
    ) == (
        "tenant 'acme': field 'sink.batch_size' = 250: is larger than chunk_size 100: a batch never spans two "
        "chunks; use a sink.batch_size of at most 100, or a chunk_size of at least 250"
    )


def test_fails_when_a_chunks_batches_at_the_slowest_answer_need_too_many_register_invocations():
    """In batch mode the bound is ceil(chunk_size / batch_size) x sink.timeout_seconds."""
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 50000, sink: {url: 'https://core.example.com', auth: {type: none}, timeout_seconds: 60, batch_size: 5}}
        """
    ) == (
        "tenant 'acme': field 'chunk_size' = 50000: in 10000 batches of sink.batch_size 5 x sink.timeout_seconds 60 "
        "= 600000 s for a chunk at the slowest answer, 715 invocations of the register function's 900 s limit: with "
        "a whole outage of sink.outage_budget_seconds 3600, a page execution's history holds at most 657 for one "
        "chunk; use a chunk_size of at most 45990 at these settings, or a lower sink.timeout_seconds, or a larger "
        "sink.batch_size"
    )


def test_batches_let_the_largest_chunk_through_at_the_slowest_timeout():
    """GIVEN chunk_size 1000 and a 60 s sink timeout, which takes 72 invocations at the slowest answer in
    record mode WHEN the core system takes batches of 100 THEN 10 requests of 60 s fit one invocation."""
    from pipeline_constructs import budgets

    (tenant,) = parse_config(
        textwrap.dedent(
            """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 1000, sink: {url: 'https://core.example.com', auth: {type: none}, timeout_seconds: 60, batch_size: 100}}
        """
        )
    ).tenants
    assert budgets.register_timeout_seconds(1000, 60, 100) == 10 * 60 + budgets.REGISTER_MARGIN_SECONDS
    assert budgets.register_invocations_per_chunk(1000, 60, 100) == 1
    assert tenant.sink.batch_size == 100


def test_the_largest_allowed_chunk_in_batch_mode_passes_and_one_more_fails():
    from pipeline_constructs import budgets

    for timeout, batch in ((60, 2), (60, 3), (30, 7), (10, 1)):
        largest = budgets.max_chunk_size(timeout, 3600, batch)
        most = budgets.max_register_invocations_per_chunk(3600)
        assert budgets.register_invocations_per_chunk(largest, timeout, batch) == most
        assert budgets.register_invocations_per_chunk(largest + 1, timeout, batch) == most + 1


def test_record_mode_allows_any_chunk_the_register_budget_allows():
    """GIVEN one record per POST WHEN the chunk is the largest the register budget allows (at 60 s:
    14 requests an invocation, 657 invocations) THEN it is accepted; at 10 s and below the bound is
    chunk_size's own limit, 100,000."""
    for timeout, largest in ((60, 9198), (10, 57159)):
        (tenant,) = parse_config(
            textwrap.dedent(
                f"""
            tenants:
              - {{id: acme, prefix: a/, chunk_size: {largest}, sink: {{url: 'https://core.example.com', auth: {{type: none}}, timeout_seconds: {timeout}}}}}
            """
            )
        ).tenants
        assert tenant.chunk_size == largest == budgets.max_chunk_size(timeout, 3600, 1)
    (tenant,) = parse_config(
        textwrap.dedent(
            """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 100000, sink: {url: 'https://core.example.com', auth: {type: none}, timeout_seconds: 5}}
        """
        )
    ).tenants
    assert tenant.chunk_size == 100000 < budgets.max_chunk_size(5, 3600, 1)


def test_fails_when_a_record_mode_chunk_is_more_than_the_register_budget_allows():
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 57160, sink: {url: 'https://core.example.com', auth: {type: none}}}
        """
    ) == (
        "tenant 'acme': field 'chunk_size' = 57160: x sink.timeout_seconds 10 = 571600 s for a chunk at the slowest "
        "answer, 658 invocations of the register function's 900 s limit: with a whole outage of "
        "sink.outage_budget_seconds 3600, a page execution's history holds at most 657 for one chunk; use a "
        "chunk_size of at most 57159 at these settings, or a lower sink.timeout_seconds"
    )


def test_batch_mode_allows_chunks_up_to_100000_and_no_more():
    (tenant,) = parse_config(
        textwrap.dedent(
            """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 100000, sink: {url: 'https://core.example.com', auth: {type: none}, batch_size: 1000}}
        """
        )
    ).tenants
    assert tenant.chunk_size == 100000
    assert one_problem(
        """
        tenants:
          - {id: acme, prefix: a/, chunk_size: 100001, sink: {url: 'https://core.example.com', auth: {type: none}, batch_size: 1000}}
        """
    ) == (
        "tenant 'acme': field 'chunk_size' = 100001: is more than 100000; leave it out (computed from the sink "
        "settings), or use a whole number from 1 to 100000 within the register budget of sink.timeout_seconds"
    )


def test_a_batch_mode_chunk_is_bounded_by_the_register_budget_below_the_limit():
    """GIVEN batches of 10 at a 60 s sink timeout THEN 91,980 records a chunk (9,198 POSTs, 14 a 900 s
    invocation at the slowest answer, 657 invocations) pass and one batch more is refused."""

    def tenants(chunk_size: int) -> str:
        return f"""
        tenants:
          - {{id: acme, prefix: a/, chunk_size: {chunk_size}, sink: {{url: 'https://core.example.com', auth: {{type: none}}, batch_size: 10, timeout_seconds: 60}}}}
        """

    (tenant,) = parse_config(textwrap.dedent(tenants(91980))).tenants
    assert tenant.chunk_size == 91980 == budgets.max_chunk_size(60, 3600, 10)
    assert one_problem(tenants(91990)) == (
        "tenant 'acme': field 'chunk_size' = 91990: in 9199 batches of sink.batch_size 10 x sink.timeout_seconds "
        "60 = 551940 s for a chunk at the slowest answer, 658 invocations of the register function's 900 s limit: "
        "with a whole outage of sink.outage_budget_seconds 3600, a page execution's history holds at most 657 for "
        "one chunk; use a chunk_size of at most 91980 at these settings, or a lower sink.timeout_seconds, or a "
        "larger sink.batch_size"
    )


# --- pages of chunks -------------------------------------------------------------------


def test_fails_when_chunks_per_page_is_more_than_a_pages_history_holds():
    """GIVEN chunks_per_page 9 where the history budget allows 8 at any chunk size (timeout 10 s,
    outage budget 1 h) WHEN validated THEN refused with the most that fits; 8 is fine, and the
    computed chunk size is then the largest whose page holds 8 (500: 1,000 holds 7)."""
    text = """
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, chunks_per_page: {value}}}
        """
    assert one_problem(text.format(SINK=SINK, value=9)) == (
        "tenant 'acme': field 'chunks_per_page' = 9: is more than the 8 chunks a page's history holds at "
        "these settings; use at most 8, or leave it out"
    )
    (tenant,) = parse_config(textwrap.dedent(text.format(SINK=SINK, value=8))).tenants
    assert (tenant.chunks_per_page, tenant.records_per_chunk) == (8, 500)


def test_fails_when_pages_per_section_is_more_than_a_sections_history_holds():
    """GIVEN pages_per_section 765 where a section's history holds 764 WHEN validated THEN
    refused with the range; 764 (and a small value for tests) is fine."""
    text = """
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, pages_per_section: {value}}}
        """
    assert one_problem(text.format(SINK=SINK, value=765)) == (
        "tenant 'acme': field 'pages_per_section' = 765: is more than 764; leave it out (the default is "
        "the most a section's history allows), or use a whole number from 1 to 764"
    )
    assert (
        parse_config(textwrap.dedent(text.format(SINK=SINK, value=764))).tenants[0].pages_per_section == 764
    )
    assert parse_config(textwrap.dedent(text.format(SINK=SINK, value=2))).tenants[0].pages_per_section == 2


def test_fails_when_the_outage_budget_is_too_long_for_a_pages_history():
    """GIVEN an outage budget of 24 h (one chunk may wait it out in its page: about 1,450 waits)
    WHEN validated THEN refused: not even one chunk would fit a page's history budget."""
    problem = one_problem(
        """
        defaults:
          sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}, outage_budget_seconds: 86400}
        tenants:
          - {id: acme, prefix: a/}
        """
    )
    assert problem.startswith(
        "tenant 'acme': field 'outage_budget_seconds' = 86400: is too long for one page"
    )
    assert "use a shorter sink.outage_budget_seconds" in problem


@pytest.mark.parametrize(
    "entry",
    [
        "chunk_size: 'ten'",
        "chunk_size: 1.5",
        "chunk_size: true",
        "chunk_size: -3",
        "format: 7",
        "on_failure: [halt]",
        "duplicate_files: {a: 1}",
        "sink: {url: 5, auth: {type: none}}",
        "sink: {url: 'https://x', auth: {type: none}, timeout_seconds: 0}",
        "sink: {url: 'https://x', auth: {type: none}, batch_size: 'big'}",
        "alarms: {evaluation_periods: 99}",
        "alarms: 3",
        "ordering: {by: sequence}",
        "chunks_per_page: 0",
        "pages_per_section: 'many'",
        "prefix: 5",
    ],
)
def test_no_problem_is_worded_by_the_validation_library(entry):
    """GIVEN a wrong value of any kind (type, bound, choice, shape) WHEN validated THEN every
    problem line is in the project's tenant/field/value/fix form, never pydantic's wording."""
    with pytest.raises(ConfigError) as refused:
        parse_config(f"tenants:\n  - {{id: acme, prefix: a/, {entry}}}\n")
    for line in refused.value.problems:
        assert not re.search(r"Input should|Value error|validation error|pydantic|Field required", line), line
        assert re.match(r"tenant 'acme': field '[\w.]+' = .+: .+; .+", line), line


def test_fails_when_prefixes_nest_three_deep_reporting_every_pair_on_the_later_tenant_in_file_order():
    """GIVEN three nested prefixes declared deepest first, with an unrelated tenant between
    them WHEN validated THEN each of the three pairs is reported once, on the later tenant of
    the pair, in the order of the file (the sorted scan finds pairs in another order)."""
    assert problems_of(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: deep, prefix: in/a/b/}}
          - {{id: other, prefix: other/}}
          - {{id: mid, prefix: in/a/}}
          - {{id: top, prefix: in/}}
        """
    ) == [
        (
            "tenant 'mid': field 'prefix' = 'in/a/': overlaps tenant 'deep' prefix 'in/a/b/'; "
            "give each tenant a prefix that is not inside another's"
        ),
        (
            "tenant 'top': field 'prefix' = 'in/': overlaps tenant 'deep' prefix 'in/a/b/'; "
            "give each tenant a prefix that is not inside another's"
        ),
        (
            "tenant 'top': field 'prefix' = 'in/': overlaps tenant 'mid' prefix 'in/a/'; "
            "give each tenant a prefix that is not inside another's"
        ),
    ]


def test_fails_when_two_tenants_share_a_prefix_and_siblings_with_a_common_start_do_not_overlap():
    """'in/' and 'in2/' share a start but neither is inside the other; the same prefix twice is."""
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: a, prefix: in/}}
          - {{id: b, prefix: in2/}}
          - {{id: c, prefix: in/}}
        """
    ) == (
        "tenant 'c': field 'prefix' = 'in/': overlaps tenant 'a' prefix 'in/'; "
        "give each tenant a prefix that is not inside another's"
    )


def test_a_thousand_tenants_validate_and_an_overlap_between_the_first_and_last_is_found():
    """GIVEN 1,000 tenants (1,000 in one account) whose last prefix is inside the
    first's WHEN validated (without the account-quota check, which one account could not
    pass) THEN that one overlap is reported, on the later tenant, and nothing else: the sorted
    scan (the pairwise check took 10 s here; its time is bench/synth_scale.py's business)
    misses no pair however far apart they are declared."""
    import yaml

    tenants = [{"id": f"t{i:05d}", "prefix": f"t{i:05d}/incoming/"} for i in range(1_000)]
    tenants.append({"id": "last", "prefix": "t00000/incoming/late/"})
    text = yaml.safe_dump(
        {
            "defaults": {
                "sink": {
                    "url": "https://core.example.com/records",
                    "auth": {"type": "bearer", "secret": "core/token"},
                }
            },
            "tenants": tenants,
        }
    )
    with pytest.raises(ConfigError) as refused:
        parse_config(text, check_capacity=False)
    assert refused.value.problems == [
        "tenant 'last': field 'prefix' = 't00000/incoming/late/': overlaps tenant 't00000' prefix "
        "'t00000/incoming/'; give each tenant a prefix that is not inside another's"
    ]
    tenants.pop()
    assert (
        len(
            parse_config(
                yaml.safe_dump(
                    {
                        "defaults": {
                            "sink": {
                                "url": "https://core.example.com/records",
                                "auth": {"type": "bearer", "secret": "core/token"},
                            }
                        },
                        "tenants": tenants,
                    }
                ),
                check_capacity=False,
            ).tenants
        )
        == 1_000
    )


@pytest.mark.parametrize(("value", "problem"), [(127, "is less than 128"), (10241, "is more than 10240")])
def test_fails_when_the_register_memory_is_outside_lambdas_range(value, problem):
    assert one_problem(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: a/, register_memory_mb: {value}}}
        """
    ) == (
        f"tenant 'acme': field 'register_memory_mb' = {value}: {problem}; use a whole number from 128 to 10240 "
        "(default 256)"
    )
