"""Generates docs/conformance.md: every method, notification and session update kind of the four official ACP schemas
of the TypeScript SDK 2.4.0 (fixtures/acp-schema/: v1 and v2, stable and unstable), each marked implemented or not
(with the reason for a deliberate "not") and named with the test that proves it.

Nothing here says by hand what acp-server implements: a method the agent answers is implemented when the server's
method tables hold it (protocol/handlers.py `METHODS`/`NOTIFICATIONS`, protocol/v2/handlers.py, and the deferred side's
protocol/deferred_methods.py), a request or notification the agent sends when the server's code sends it by that
name (a string, or a module constant, handed to `request`/`notify`), and a session update kind when a renderer of that
version builds it (its `sessionUpdate` string in protocol/v1/ or protocol/v2/, or in the shared shapes:
protocol/update_shapes.py, protocol/schema.py). Kept here by hand, and small: the test that proves each row
(`PROOFS`, `UPDATE_PROOFS`) and why a row is not implemented (`NOT_IMPLEMENTED`, `UPDATE_NOT_SENT`).
tests/unit/test_conformance_page.py fails when the committed page differs from what this writes, when a test named
here does not exist, and when an implemented row has no test.

Regenerate the page (after adding a method, say) with:

    python -m tests.support.conformance_page
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "conformance.md"
PACKAGE = ROOT / "acp_server"
COMMAND = "python -m tests.support.conformance_page"

# (version, stability, schema file): the four schemas of `@agentclientprotocol/sdk` 2.4.0 (fixtures/acp-schema/SOURCE.md
# and v2/SOURCE.md give their provenance and sha256).
SCHEMAS: tuple[tuple[int, str, Path], ...] = (
    (1, "stable", ROOT / "fixtures" / "acp-schema" / "schema.json"),
    (1, "unstable", ROOT / "fixtures" / "acp-schema" / "schema.unstable.json"),
    (2, "stable", ROOT / "fixtures" / "acp-schema" / "v2" / "schema.json"),
    (2, "unstable", ROOT / "fixtures" / "acp-schema" / "v2" / "schema.unstable.json"),
)

# The test that proves each implemented row, by (version, direction, method): its file and function (the page shows
# `path::function`); a parametrized test is named without its parameters (it runs for each).
PROOFS: dict[tuple[int, str, str], tuple[str, str]] = {
    # v1, requests the agent answers
    (1, "answers", "initialize"): (
        "tests/e2e/test_v2_negotiation.py",
        "test_acp_init_202_a_request_for_1_gets_the_v1_surface_as_before",
    ),
    (1, "answers", "authenticate"): (
        "tests/e2e/test_auth_and_prompt.py",
        "test_missing_key_is_offered_as_authentication_and_picked_up_without_restart",
    ),
    (1, "answers", "logout"): (
        "tests/e2e/test_logout.py",
        "test_logout_forgets_the_key_given_through_authenticate_until_the_next_authenticate",
    ),
    (1, "answers", "session/new"): (
        "tests/e2e/test_session_options.py",
        "test_new_session_offers_model_and_mode_options_and_announces_commands",
    ),
    (1, "answers", "session/load"): (
        "tests/e2e/test_notices.py",
        "test_nothing_follows_the_load_response_commands_and_title_belong_to_the_replay",
    ),
    (1, "answers", "session/resume"): ("tests/e2e/test_persistence.py", "test_resume_continues_without_replaying"),
    (1, "answers", "session/list"): (
        "tests/e2e/test_persistence.py",
        "test_list_pages_through_250_sessions_once_each_with_a_cwd_filter",
    ),
    (1, "answers", "session/delete"): (
        "tests/e2e/test_persistence.py",
        "test_delete_removes_a_session_from_list_and_load_and_unknown_ids_succeed",
    ),
    (1, "answers", "session/close"): (
        "tests/e2e/test_interrupts.py",
        "test_close_answers_the_running_turn_cancelled_before_its_own_result_and_refuses_the_id",
    ),
    (1, "answers", "session/fork"): (
        "tests/e2e/test_persistence.py",
        "test_fork_copies_the_conversation_into_a_new_session_and_leaves_the_source",
    ),
    (1, "answers", "session/set_mode"): (
        "tests/e2e/test_session_options.py",
        "test_mode_option_and_session_modes_stay_in_sync",
    ),
    (1, "answers", "session/set_config_option"): (
        "tests/e2e/test_prompt_policies.py",
        "test_the_policy_is_a_session_config_option",
    ),
    (1, "answers", "session/prompt"): (
        "tests/e2e/test_sdk_flows.py",
        "test_scripted_say_and_think_arrive_as_message_and_thought_chunks_in_order",
    ),
    (1, "answers", "session/set_title"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_a_title_is_stored_normalized_listed_kept_over_a_turn_and_replayed_after_a_restart",
    ),
    (1, "answers", "auth/status"): (
        "tests/e2e/test_providers_unstable.py",
        "test_auth_status_says_where_each_key_comes_from_and_a_logout_and_authenticate_update_it",
    ),
    (1, "sends", "auth/status_update"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_key_the_endpoint_refuses_is_reported_in_an_auth_status_update",
    ),
    (1, "answers", "providers/list"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_clients_gateway_gets_its_own_key_and_never_the_servers",
    ),
    (1, "answers", "providers/set"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_clients_gateway_gets_its_own_key_and_never_the_servers",
    ),
    (1, "answers", "providers/disable"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_clients_gateway_gets_its_own_key_and_never_the_servers",
    ),
    (2, "answers", "auth/status"): (
        "tests/e2e/test_providers_unstable.py",
        "test_auth_status_says_where_each_key_comes_from_and_a_logout_and_authenticate_update_it",
    ),
    (2, "sends", "auth/status_update"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_key_the_endpoint_refuses_is_reported_in_an_auth_status_update",
    ),
    (2, "answers", "providers/list"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_clients_gateway_gets_its_own_key_and_never_the_servers",
    ),
    (2, "answers", "providers/set"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_clients_gateway_gets_its_own_key_and_never_the_servers",
    ),
    (2, "answers", "providers/disable"): (
        "tests/e2e/test_providers_unstable.py",
        "test_a_clients_gateway_gets_its_own_key_and_never_the_servers",
    ),
    (1, "answers", "session/status"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_status_is_open_in_memory_saved_when_only_stored_unknown_otherwise_and_changes_nothing",
    ),
    (1, "answers", "session/archive"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_archived_sessions_leave_the_default_list_and_the_filter_shows_them_flagged",
    ),
    (1, "answers", "session/unarchive"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_an_archived_session_is_loaded_or_resumed_only_once_unarchived",
    ),
    # v1, notifications the agent handles
    (1, "handles", "mcp/message"): (
        "tests/e2e/test_mcp_over_acp.py",
        "test_the_clients_mcp_message_notifications_reach_only_the_request_they_name",
    ),
    (1, "handles", "session/cancel"): (
        "tests/e2e/test_interrupts.py",
        "test_cancel_is_routed_by_session_id_and_leaves_other_sessions_running",
    ),
    (1, "handles", "$/cancel_request"): (
        "tests/e2e/test_interrupts.py",
        "test_cancel_request_naming_a_prompt_cancels_that_prompt_only",
    ),
    # v1, requests the agent sends the client
    (1, "calls", "mcp/message"): (
        "tests/e2e/test_ts_sdk_mcp.py",
        "test_the_typescript_sdk_offers_an_mcp_server_over_acp_whose_tools_the_agent_calls_and_cancels",
    ),
    (1, "calls", "fs/read_text_file"): (
        "tests/e2e/test_file_tools_e2e.py",
        "test_with_client_fs_the_tools_use_the_editors_buffers_and_never_the_disk",
    ),
    (1, "calls", "fs/write_text_file"): (
        "tests/e2e/test_file_tools_e2e.py",
        "test_with_client_fs_the_tools_use_the_editors_buffers_and_never_the_disk",
    ),
    (1, "calls", "terminal/create"): (
        "tests/e2e/test_command_tools_e2e.py",
        "test_editor_terminal_is_created_shown_awaited_read_and_released_once",
    ),
    (1, "calls", "terminal/output"): (
        "tests/e2e/test_command_tools_e2e.py",
        "test_editor_terminal_is_created_shown_awaited_read_and_released_once",
    ),
    (1, "calls", "terminal/wait_for_exit"): (
        "tests/e2e/test_command_tools_e2e.py",
        "test_editor_terminal_is_created_shown_awaited_read_and_released_once",
    ),
    (1, "calls", "terminal/release"): (
        "tests/e2e/test_command_tools_e2e.py",
        "test_editor_terminal_is_created_shown_awaited_read_and_released_once",
    ),
    (1, "calls", "terminal/kill"): (
        "tests/e2e/test_command_tools_e2e.py",
        "test_editor_terminal_timeout_kills_reads_and_releases",
    ),
    (1, "calls", "session/request_permission"): (
        "tests/e2e/test_command_tools_e2e.py",
        "test_default_mode_asks_before_running_naming_the_command",
    ),
    (1, "calls", "elicitation/create"): (
        "tests/e2e/test_ask_user.py",
        "test_ask_user_sends_a_form_elicitation_and_the_answer_is_the_tool_result",
    ),
    # v1, notifications the agent sends
    (1, "sends", "session/update"): (
        "tests/e2e/test_sdk_flows.py",
        "test_scripted_say_and_think_arrive_as_message_and_thought_chunks_in_order",
    ),
    (1, "sends", "$/cancel_request"): (
        "tests/e2e/test_ask_user.py",
        "test_a_cancel_retracts_an_open_question_and_a_late_answer_is_ignored",
    ),
    # v2, requests the agent answers
    (2, "answers", "initialize"): (
        "tests/e2e/test_v2_negotiation.py",
        "test_acp_init_201_203_204_a_request_for_2_gets_the_v2_surface",
    ),
    (2, "answers", "auth/login"): (
        "tests/e2e/test_v2_auth.py",
        "test_login_finds_the_key_and_logout_forgets_it_until_the_next_login",
    ),
    (2, "answers", "auth/logout"): (
        "tests/e2e/test_v2_auth.py",
        "test_login_finds_the_key_and_logout_forgets_it_until_the_next_login",
    ),
    (2, "answers", "session/new"): (
        "tests/e2e/test_v2_conformance_sessions.py",
        "test_acp_session_001_a_new_session_in_an_absolute_directory_without_mcp_servers_has_an_id",
    ),
    (2, "answers", "session/prompt"): (
        "tests/e2e/test_v2_prompt.py",
        "test_acp_prompt_201_203_state_201_the_prompt_is_answered_on_insertion_then_echoed_then_run_to_idle",
    ),
    (2, "answers", "session/resume"): (
        "tests/e2e/test_v2_sessions.py",
        "test_acp_resume_202_204_replay_from_start_replays_every_message_with_its_id_before_the_response",
    ),
    (2, "answers", "session/list"): (
        "tests/e2e/test_v2_sessions.py",
        "test_acp_list_201_202_close_201_delete_201_202_203",
    ),
    (2, "answers", "session/close"): (
        "tests/e2e/test_v2_sessions.py",
        "test_acp_list_201_202_close_201_delete_201_202_203",
    ),
    (2, "answers", "session/delete"): (
        "tests/e2e/test_v2_sessions.py",
        "test_acp_list_201_202_close_201_delete_201_202_203",
    ),
    (2, "answers", "session/set_config_option"): (
        "tests/e2e/test_v2_conformance_sessions.py",
        "test_acp_config_202_204_206_setting_an_option_answers_and_announces_the_complete_list",
    ),
    (2, "answers", "tool_call/cancel"): (
        "tests/e2e/test_v2_cancel.py",
        "test_tool_call_cancel_stops_that_call_alone_and_the_turn_goes_on",
    ),
    (2, "answers", "terminal/cancel"): (
        "tests/e2e/test_v2_terminals.py",
        "test_terminal_cancel_kills_the_command_alone_and_the_turn_goes_on",
    ),
    (2, "answers", "session/fork"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_v2_fork_copies_the_conversation_and_refuses_an_unknown_source",
    ),
    (2, "answers", "session/set_title"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_a_title_is_stored_normalized_listed_kept_over_a_turn_and_replayed_after_a_restart",
    ),
    (2, "answers", "session/status"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_status_is_open_in_memory_saved_when_only_stored_unknown_otherwise_and_changes_nothing",
    ),
    (2, "answers", "session/archive"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_archived_sessions_leave_the_default_list_and_the_filter_shows_them_flagged",
    ),
    (2, "answers", "session/unarchive"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_an_archived_session_is_loaded_or_resumed_only_once_unarchived",
    ),
    # v2, notifications the agent handles
    (2, "handles", "mcp/message"): (
        "tests/e2e/test_mcp_over_acp.py",
        "test_the_clients_mcp_message_notifications_reach_only_the_request_they_name",
    ),
    (2, "handles", "session/cancel"): (
        "tests/e2e/test_v2_cancel.py",
        "test_acp_cancel_201_202_203_the_cancelled_work_ends_idle_cancelled_and_nothing_of_it_follows",
    ),
    (2, "handles", "$/cancel_request"): (
        "tests/e2e/test_v2_cancel.py",
        "test_cancel_request_withdraws_a_held_prompt_and_leaves_the_work_alone",
    ),
    # v2, requests the agent sends the client
    (2, "calls", "mcp/message"): (
        "tests/e2e/test_ts_sdk_mcp.py",
        "test_the_typescript_sdk_offers_an_mcp_server_over_acp_whose_tools_the_agent_calls_and_cancels",
    ),
    (2, "calls", "session/request_permission"): (
        "tests/e2e/test_v2_conformance_wire.py",
        "test_acp_perm_201_a_permission_request_is_well_formed_and_a_selected_answer_ends_in_idle",
    ),
    (2, "calls", "elicitation/create"): (
        "tests/e2e/test_v2_elicitation.py",
        "test_a_link_question_is_a_v2_url_elicitation_between_requires_action_and_running",
    ),
    # v2, notifications the agent sends
    (2, "sends", "session/update"): (
        "tests/e2e/test_v2_conformance_turns.py",
        "test_acp_prompt_205_patch_201_every_update_of_a_turn_is_schema_valid_for_the_prompted_session_with_ids",
    ),
    (2, "sends", "$/cancel_request"): (
        "tests/e2e/test_ask_user.py",
        "test_a_cancel_retracts_an_open_question_and_a_late_answer_is_ignored",
    ),
}

# The test that proves each session update kind a version sends, by (version, kind).
UPDATE_PROOFS: dict[tuple[int, str], tuple[str, str]] = {
    (1, "user_message_chunk"): (
        "tests/e2e/test_notices.py",
        "test_nothing_follows_the_load_response_commands_and_title_belong_to_the_replay",
    ),
    (1, "agent_message_chunk"): (
        "tests/e2e/test_sdk_flows.py",
        "test_scripted_say_and_think_arrive_as_message_and_thought_chunks_in_order",
    ),
    (1, "agent_thought_chunk"): (
        "tests/e2e/test_sdk_flows.py",
        "test_scripted_say_and_think_arrive_as_message_and_thought_chunks_in_order",
    ),
    (1, "tool_call"): ("tests/e2e/test_runtime_e2e.py", "test_a_tool_call_runs_and_its_result_goes_back_to_the_model"),
    (1, "tool_call_update"): (
        "tests/e2e/test_runtime_e2e.py",
        "test_a_tool_call_runs_and_its_result_goes_back_to_the_model",
    ),
    (1, "plan"): ("tests/e2e/test_file_tools_e2e.py", "test_update_plan_sends_the_complete_plan"),
    (1, "available_commands_update"): (
        "tests/e2e/test_session_options.py",
        "test_new_session_offers_model_and_mode_options_and_announces_commands",
    ),
    (1, "current_mode_update"): (
        "tests/e2e/test_session_options.py",
        "test_mode_option_and_session_modes_stay_in_sync",
    ),
    (1, "config_option_update"): (
        "tests/e2e/test_session_options.py",
        "test_mode_option_and_session_modes_stay_in_sync",
    ),
    (1, "session_info_update"): ("tests/e2e/test_session_options.py", "test_title_command_names_the_session"),
    (1, "usage_update"): (
        "tests/e2e/test_runtime_e2e.py",
        "test_usage_is_reported_when_the_context_window_is_configured",
    ),
    (1, "notice"): (
        "tests/e2e/test_notices.py",
        "test_an_mcp_server_problem_is_a_warning_notice_for_a_client_that_shows_notices",
    ),
    (1, "compaction_update"): (
        "tests/e2e/test_notices.py",
        "test_a_compaction_is_a_compaction_update_with_its_summary_for_a_client_that_shows_them",
    ),
    (2, "user_message"): (
        "tests/e2e/test_v2_prompt.py",
        "test_acp_prompt_201_203_state_201_the_prompt_is_answered_on_insertion_then_echoed_then_run_to_idle",
    ),
    (2, "agent_message_chunk"): (
        "tests/e2e/test_v2_conformance_turns.py",
        "test_acp_prompt_205_patch_201_every_update_of_a_turn_is_schema_valid_for_the_prompted_session_with_ids",
    ),
    (2, "agent_message"): (
        "tests/e2e/test_v2_conformance_sessions.py",
        "test_acp_resume_205_a_replayed_chunk_always_follows_the_whole_message_of_its_id",
    ),
    (2, "agent_thought_chunk"): (
        "tests/e2e/test_v2_conformance_turns.py",
        "test_acp_prompt_205_patch_201_every_update_of_a_turn_is_schema_valid_for_the_prompted_session_with_ids",
    ),
    (2, "agent_thought"): (
        "tests/e2e/test_v2_conformance_sessions.py",
        "test_acp_resume_205_a_replayed_chunk_always_follows_the_whole_message_of_its_id",
    ),
    (2, "state_update"): (
        "tests/e2e/test_v2_prompt.py",
        "test_acp_prompt_201_203_state_201_the_prompt_is_answered_on_insertion_then_echoed_then_run_to_idle",
    ),
    (2, "tool_call_content_chunk"): (
        "tests/e2e/test_v2_tool_content.py",
        "test_acp_patch_204_a_reporting_tool_call_streams_each_piece_once_as_a_content_chunk_before_its_final_update",
    ),
    (2, "tool_call_update"): (
        "tests/e2e/test_v2_prompt.py",
        "test_acp_patch_204_205_208_a_tool_call_is_one_upsert_with_its_name_and_a_plan_is_a_plan_update",
    ),
    (2, "terminal_update"): (
        "tests/e2e/test_v2_terminals.py",
        "test_acp_patch_206_207_a_command_is_a_terminal_with_base64_output_and_its_exit_before_the_idle",
    ),
    (2, "terminal_output_chunk"): (
        "tests/e2e/test_v2_terminals.py",
        "test_acp_patch_206_207_a_command_is_a_terminal_with_base64_output_and_its_exit_before_the_idle",
    ),
    (2, "plan_update"): (
        "tests/e2e/test_v2_prompt.py",
        "test_acp_patch_204_205_208_a_tool_call_is_one_upsert_with_its_name_and_a_plan_is_a_plan_update",
    ),
    (2, "available_commands_update"): (
        "tests/e2e/test_v2_conformance_sessions.py",
        "test_acp_resume_201_203_config_203_204_a_resume_without_replay_succeeds_with_valid_config_options",
    ),
    (2, "config_option_update"): (
        "tests/e2e/test_v2_prompt.py",
        "test_a_session_update_of_the_config_carries_config_ids_and_no_mode_update",
    ),
    (2, "session_info_update"): (
        "tests/e2e/test_session_lifecycle_unstable.py",
        "test_a_title_is_stored_normalized_listed_kept_over_a_turn_and_replayed_after_a_restart",
    ),
    (2, "usage_update"): ("tests/e2e/test_runtime_e2e.py", "test_on_v2_usage_is_reported_as_on_v1_before_the_idle"),
    (2, "notice"): (
        "tests/e2e/test_notices.py",
        "test_an_mcp_server_problem_is_a_warning_notice_for_a_client_that_shows_notices",
    ),
    (2, "compaction_update"): (
        "tests/e2e/test_notices.py",
        "test_a_compaction_is_a_compaction_update_with_its_summary_for_a_client_that_shows_them",
    ),
}

PROXY = "deliberate: `proxy/*` is for proxies that sit between a client and an agent, and acp-server is an agent"

# Why a method of the schemas is not implemented, by method (both versions). A method listed here that becomes
# implemented simply shows as implemented; one not implemented and not listed shows "not yet".
NOT_IMPLEMENTED: dict[str, str] = {
    "elicitation/complete": (
        "deliberate: it tells the client that a URL elicitation finished out of band; acp-server learns of no such "
        "completion (it never hosts the page a URL question opens), so it has nothing to send"
    ),
    "proxy/initialize": PROXY,
    "proxy/successor": PROXY,
}

# Why a session update kind of the schemas is not sent, by kind (both versions).
UPDATE_NOT_SENT: dict[str, str] = {
    "user_message_chunk": "v2 sends a user's prompt whole, as `user_message`",
    "plan_update": "v1 sends each new plan whole, as the stable `plan`",
    "plan_removed": "a plan is only ever replaced, never withdrawn",
    "compaction_summary_chunk": "a compaction's summary arrives whole, in its `compaction_update`",
    "subagent_update": "a delegated task shows as its parent's tool call (docs/guide.md), not as a session of its own",
    "session_message": "not yet: the unstable message entities are not rendered",
    "session_message_chunk": "not yet: the unstable message entities are not rendered",
}

# The directions, in the page's order: what the row's method is to the agent.
DIRECTIONS: dict[str, str] = {
    "answers": "Requests the agent answers",
    "handles": "Notifications the agent handles",
    "calls": "Requests the agent sends the client",
    "sends": "Notifications the agent sends the client",
    "proxy": "Methods for proxies",
}


@dataclass(frozen=True)
class Row:
    """One method of a version, in one direction, and the schemas (stable, unstable) that define it so."""

    version: int
    direction: str
    method: str
    schemas: tuple[str, ...]


@cache
def _schema(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    return document


def _directions(name: str, side: str) -> Iterator[str]:
    """The directions a `$def` with `x-method` puts its method in, by its `x-side` and what it is (its name ends
    `Request`, `Notification` or `Response`). `protocol` (`$/cancel_request`) goes both ways."""
    if side == "proxy":
        yield "proxy"
    elif name.endswith("Request"):
        yield "answers" if side == "agent" else "calls"
    elif name.endswith("Notification"):
        if side in ("agent", "protocol"):
            yield "handles"
        if side in ("client", "protocol"):
            yield "sends"


@cache
def schema_rows() -> tuple[Row, ...]:
    """Every (version, direction, method) of the four schemas, with the stabilities that define it."""
    found: dict[tuple[int, str, str], list[str]] = {}
    for version, stability, path in SCHEMAS:
        for name, definition in _schema(path)["$defs"].items():
            if "x-method" in definition:
                for direction in _directions(name, definition["x-side"]):
                    stabilities = found.setdefault((version, direction, definition["x-method"]), [])
                    if stability not in stabilities:
                        stabilities.append(stability)
    order = list(DIRECTIONS)
    return tuple(
        Row(version, direction, method, tuple(stabilities))
        for (version, direction, method), stabilities in sorted(
            found.items(), key=lambda item: (item[0][0], order.index(item[0][1]), item[0][2])
        )
    )


def schema_methods(version: int, stability: str) -> set[str]:
    """The methods of one schema, each counted once whatever its directions (as the issue counts them)."""
    path = next(p for v, s, p in SCHEMAS if v == version and s == stability)
    return {d["x-method"] for d in _schema(path)["$defs"].values() if "x-method" in d}


@cache
def update_kinds(version: int) -> dict[str, tuple[str, ...]]:
    """Each `sessionUpdate` kind of a version's schemas, with the stabilities that define it."""
    found: dict[str, list[str]] = {}
    for v, stability, path in SCHEMAS:
        if v != version:
            continue
        update = _schema(path)["$defs"]["SessionUpdate"]
        for branch in update.get("oneOf", update.get("anyOf", [])):
            kind = branch.get("properties", {}).get("sessionUpdate", {}).get("const")
            if kind is not None:
                stabilities = found.setdefault(kind, [])
                if stability not in stabilities:
                    stabilities.append(stability)
    return {kind: tuple(stabilities) for kind, stabilities in found.items()}


# --- what the server implements, read from its own code ---


@cache
def answered(version: int) -> tuple[frozenset[str], frozenset[str]]:
    """The requests and notifications a connection of this version is served: the server's own tables."""
    from acp_server.protocol.deferred_methods import DEFERRED_METHODS, DEFERRED_METHODS_V2
    from acp_server.protocol.handlers import METHODS, NOTIFICATIONS
    from acp_server.protocol.v2.handlers import METHODS_V2, NOTIFICATIONS_V2

    if version == 1:
        return frozenset(METHODS) | frozenset(DEFERRED_METHODS), frozenset(NOTIFICATIONS)
    return frozenset(METHODS_V2) | frozenset(DEFERRED_METHODS_V2), frozenset(NOTIFICATIONS_V2)


def _versions_of(path: Path) -> tuple[int, ...]:
    """The protocol versions a module of the package renders for: protocol/v1/ or protocol/v2/ alone, the rest both."""
    parts = path.relative_to(PACKAGE).parts
    if parts[:2] == ("protocol", "v1"):
        return (1,)
    if parts[:2] == ("protocol", "v2"):
        return (2,)
    return (1, 2)


def _strings(tree: ast.Module) -> Iterator[ast.Constant]:
    """The string constants of a module that are not docstrings."""
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        for body in [node.body]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def _sent_names(tree: ast.Module) -> set[str]:
    """The method names a module hands to `request`/`_request`/`notify` as their first argument: a string, or a
    module-level constant naming one (`PERMISSION = "session/request_permission"`)."""
    constants = {
        target.id: statement.value.value
        for statement in tree.body
        if isinstance(statement, ast.Assign)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called not in ("request", "_request", "notify"):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.add(first.value)
        elif isinstance(first, ast.Name) and first.id in constants:
            names.add(constants[first.id])
    return names


def _server_modules() -> Iterator[tuple[Path, ast.Module]]:
    """The modules that speak to a client: the connection (jsonrpc/) and the protocol side (protocol/), without the
    test mode (a test's tool may send anything it is told)."""
    for folder in ("jsonrpc", "protocol"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            if "testmode" not in path.parts:
                yield path, ast.parse(path.read_text())


@cache
def sent(version: int) -> frozenset[str]:
    """The requests and notifications the agent sends a client of this version, read from the code that sends them."""
    return frozenset(
        name for path, tree in _server_modules() if version in _versions_of(path) for name in _sent_names(tree)
    )


# The modules a version renders its session updates with: its own folder and the shapes both share.
SHARED_RENDERERS = ("protocol/update_shapes.py", "protocol/schema.py")


@cache
def rendered_kinds(version: int) -> frozenset[str]:
    """The session update kinds this version's renderers build: a kind is sent when its name, as a string (not a
    docstring), is in protocol/v<version>/ or in the shared shapes."""
    kinds = set(update_kinds(version))
    paths = sorted((PACKAGE / "protocol" / f"v{version}").rglob("*.py")) + [PACKAGE / p for p in SHARED_RENDERERS]
    return frozenset(
        node.value for path in paths for node in _strings(ast.parse(path.read_text())) if node.value in kinds
    )


def implemented(row: Row) -> bool:
    requests, notifications = answered(row.version)
    if row.direction == "answers":
        return row.method in requests
    if row.direction == "handles":
        return row.method in notifications
    if row.direction in ("calls", "sends"):
        return row.method in sent(row.version)
    return False  # proxy/*: acp-server is an agent


# --- the page ---


def _counts() -> list[str]:
    lines = ["| schema | methods implemented | of | session updates sent | of |", "| --- | --- | --- | --- | --- |"]
    rows = schema_rows()
    for version, stability, path in SCHEMAS:
        methods = schema_methods(version, stability)
        done = {row.method for row in rows if row.version == version and row.method in methods and implemented(row)}
        # A method counts as implemented when every direction the schema gives it is.
        missing = {
            row.method
            for row in rows
            if row.version == version and row.method in methods and stability in row.schemas and not implemented(row)
        }
        relative = path.relative_to(ROOT).as_posix()
        kinds = [kind for kind, stabilities in update_kinds(version).items() if stability in stabilities]
        shown = [kind for kind in kinds if kind in rendered_kinds(version)]
        lines.append(
            f"| v{version} {stability} ([`{relative}`](../{relative})) | {len(done - missing)} | {len(methods)} "
            f"| {len(shown)} | {len(kinds)} |"
        )
    return lines


def _proof(test: tuple[str, str] | None) -> str:
    return f"`{test[0]}::{test[1]}`" if test else ""


def render() -> str:
    rows = schema_rows()
    out = [
        "# Conformance: every method and session update of ACP v1 and v2",
        "",
        "<!-- Generated by `" + COMMAND + "` (tests/support/conformance_page.py); do not edit by hand. -->",
        "",
        "Every method, notification and session update kind of the official ACP schemas of the TypeScript SDK 2.4.0",
        "(`@agentclientprotocol/sdk`: v1 and the v2 draft, each stable and unstable; fixtures/acp-schema/SOURCE.md and",
        "v2/SOURCE.md give their provenance), whether acp-server implements it, and the test that proves it. The page",
        "is generated from the server's own code: a method the agent answers is implemented when the server's method",
        "tables serve it on that version, a message the agent sends when its code sends it, and a session update kind",
        "when that version's renderers build it; tests/unit/test_conformance_page.py fails when this page, the code",
        "and the tests named here disagree. How acp-server reads the conformance kit's requirement ids is in",
        "[acp.md](acp.md); a method's behaviour is in its test. To regenerate the page after a change:",
        "",
        f"    {COMMAND}",
        "",
        "## Counts",
        "",
        "Methods and session update kinds per schema. A method is counted once whatever its directions",
        "(`mcp/message` goes both ways, `$/cancel_request` too), and implemented when every direction of it that the",
        "schema defines is. The `_acp_server/…` extension methods are in no schema and not counted.",
        "",
        *_counts(),
    ]
    for version in (1, 2):
        version_rows = [row for row in rows if row.version == version]
        out += ["", f"## ACP v{version}: methods", ""]
        for direction, title in DIRECTIONS.items():
            these = [row for row in version_rows if row.direction == direction]
            if not these:
                continue
            out += [f"### v{version}: {title.lower()}", ""]
            out += ["| method | schema | implemented | test, or why not |", "| --- | --- | --- | --- |"]
            for row in these:
                ok = implemented(row)
                note = (
                    _proof(PROOFS.get((version, direction, row.method)))
                    if ok
                    else NOT_IMPLEMENTED.get(row.method, "not yet")
                )
                out.append(f"| `{row.method}` | {', '.join(row.schemas)} | {'yes' if ok else 'no'} | {note} |")
            out.append("")
        out += [f"## ACP v{version}: session updates", ""]
        out += ["| `sessionUpdate` | schema | sent | test, or why not |", "| --- | --- | --- | --- |"]
        sent_kinds = rendered_kinds(version)
        for kind, stabilities in update_kinds(version).items():
            ok = kind in sent_kinds
            note = _proof(UPDATE_PROOFS.get((version, kind))) if ok else UPDATE_NOT_SENT.get(kind, "not yet")
            out.append(f"| `{kind}` | {', '.join(stabilities)} | {'yes' if ok else 'no'} | {note} |")
    out.append("")
    return "\n".join(out)


def implemented_rows() -> list[tuple[tuple[int, str, str], Row]]:
    """The implemented method rows, by their `PROOFS` key."""
    return [((row.version, row.direction, row.method), row) for row in schema_rows() if implemented(row)]


def sent_updates() -> list[tuple[int, str]]:
    """The session update kinds each version sends, as `UPDATE_PROOFS` keys."""
    return [(version, kind) for version in (1, 2) for kind in sorted(rendered_kinds(version))]


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
