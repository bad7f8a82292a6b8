"""Replays every transcript in `fixtures/transcripts/` against the server, and proves the comparison can fail.

A transcript test is only worth having if a wrong server would fail it, so besides the replays this module checks
that the normalisation forgives exactly what it should (chunking, generated ids, key order, interleaving of other
sessions) and nothing else (a wrong stop reason, a missing or extra line, a reordering within a session, a line on
the wrong side of an input, inconsistent placeholders), both on synthetic conversations and on real replays.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server.errors import TranscriptError
from acp_server.transcripts.format import Line, Transcript, dump_transcript, load_transcript, parse_transcript
from acp_server.transcripts.normalise import canonicalise, compare
from tests.support.harness import DEFAULT_ARGS, Entry, scaled
from tests.support.transcripts import (
    TRANSCRIPT_DIR,
    ReplayResult,
    StartServer,
    record,
    replay,
    server_args,
    transcript_from_log,
)

TRANSCRIPTS = sorted(TRANSCRIPT_DIR.glob("*.jsonl"))

# Transcripts written from docs/interrupts.md that the server does not meet yet. Strict: once the server is fixed the
# replay passes, the xfail turns into a failure, and the entry must be removed.
KNOWN_SERVER_BUGS: dict[str, str] = {}


def _transcript_params() -> list[Any]:
    params = []
    for path in TRANSCRIPTS:
        reason = KNOWN_SERVER_BUGS.get(path.name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", _transcript_params())
async def test_transcript_replays_to_a_match(path: Path, start_server: StartServer) -> None:
    result = await replay(load_transcript(path), start_server)
    assert result.ok, result.report()


def test_transcript_directory_holds_the_scenarios() -> None:
    names = {path.stem for path in TRANSCRIPTS}
    required = {
        "i01_cancel_during_gate",
        "i03_cancel_routed_by_session",
        "i05_tool_cancel",
        "i10b_idle_cancel_then_prompt",
        "i11_cancel_after_turn_is_noop",
        "i13_cancel_unknown_session_is_silent",
        "bad_input",
        "echo_conversation",
    }
    assert required <= names, f"missing: {sorted(required - names)}"
    assert len([name for name in names if name.startswith("rec_")]) >= 2, "expected at least two recorded transcripts"
    assert set(KNOWN_SERVER_BUGS) <= {path.name for path in TRANSCRIPTS}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[path.stem for path in TRANSCRIPTS])
def test_transcript_file_round_trips_through_the_format(path: Path) -> None:
    transcript = load_transcript(path)
    again = parse_transcript(dump_transcript(transcript))
    assert again.args == transcript.args
    assert again.timeout == transcript.timeout
    assert [line.to_json() for line in again.lines] == [line.to_json() for line in transcript.lines]


@pytest.mark.parametrize("path", sorted((TRANSCRIPT_DIR / "scripts").glob("*.jsonl")), ids=lambda path: path.stem)
def test_recording_script_parses_and_has_a_recording(path: Path) -> None:
    script = load_transcript(path)
    assert script.lines, "an empty script"
    assert all(line.dir != "out" for line in script.lines), "a script holds only in and sleep lines"
    assert (TRANSCRIPT_DIR / path.name).exists(), "every script has its recording next to the transcripts"


# --- building conversations by hand ---


def _in(message: dict[str, Any]) -> Line:
    return Line("in", msg={"jsonrpc": "2.0", **message})


def _out(message: dict[str, Any]) -> Line:
    return Line("out", msg={"jsonrpc": "2.0", **message})


def _new_session(request_id: int, session: str) -> list[Line]:
    return [
        _in({"id": request_id, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}),
        _out({"id": request_id, "result": {"sessionId": session}}),
    ]


def _prompt(request_id: int, session: str) -> Line:
    return _in(
        {
            "id": request_id,
            "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]},
        }
    )


def _cancel(session: str) -> Line:
    return _in({"method": "session/cancel", "params": {"sessionId": session}})


def _update(session: str, update: dict[str, Any]) -> Line:
    return _out({"method": "session/update", "params": {"sessionId": session, "update": update}})


def _chunk(session: str, text: str, message_id: str, kind: str = "agent_message_chunk") -> Line:
    return _update(session, {"sessionUpdate": kind, "content": {"type": "text", "text": text}, "messageId": message_id})


def _probe(session: str, prompt: int, event: str, **fields: Any) -> Line:
    params = {"sessionId": session, "prompt": prompt, "event": event, **fields}
    return _out({"method": "_scripted/probe", "params": params})


def _response(request_id: int, stop: str) -> Line:
    return _out({"id": request_id, "result": {"stopReason": stop}})


def _tool_call(session: str, call: str) -> list[Line]:
    return [
        _update(session, {"sessionUpdate": "tool_call", "toolCallId": call, "title": "t", "status": "pending"}),
        _update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "failed"}),
    ]


def _cancelled_turn(session: str, message_id: str) -> list[Line]:
    """One session: prompt, chunk, gate probe, cancel, step_exited, response cancelled."""
    return [
        *_new_session(1, session),
        _prompt(10, session),
        _chunk(session, "a", message_id),
        _probe(session, 10, "gate_reached", gate="g"),
        _cancel(session),
        _probe(session, 10, "step_exited", step=1, reason="cancelled"),
        _response(10, "cancelled"),
    ]


EXPECTED = _cancelled_turn("$session1", "$msg1")
ACTUAL = _cancelled_turn("sess_4f1e", "msg_91ab")


def _mismatch(expected: list[Line], actual: list[Line]) -> str:
    comparison = compare(expected, actual)
    assert not comparison.matches, "the comparison should have reported a mismatch"
    return comparison.diff()


# --- normalisation forgives what does not matter ---


def test_normalisation_makes_generated_ids_irrelevant() -> None:
    assert compare(EXPECTED, ACTUAL).matches
    assert compare(_cancelled_turn("sess_other", "msg_other"), ACTUAL).matches
    assert compare(_cancelled_turn("$sessionA", "$firstMessage"), ACTUAL).matches  # any placeholder names


def test_normalisation_makes_chunking_irrelevant() -> None:
    expected = [*_new_session(1, "$s"), _prompt(10, "$s"), _chunk("$s", "hello world", "$m"), _response(10, "end_turn")]
    pieces = [_chunk("sess_1", text, "msg_1") for text in ("hel", "lo ", "world")]
    actual = [*_new_session(1, "sess_1"), _prompt(10, "sess_1"), *pieces, _response(10, "end_turn")]
    assert compare(expected, actual).matches
    thoughts = [_chunk("sess_1", text, "msg_1", "agent_thought_chunk") for text in ("hel", "lo ", "world")]
    expected_thought = _chunk("$s", "hello world", "$m", "agent_thought_chunk")
    assert compare([*expected[:3], expected_thought, expected[-1]], [*actual[:3], *thoughts, actual[-1]]).matches


def _terminal_chunk(session: str, terminal: str, data: bytes) -> Line:
    chunk = {"sessionUpdate": "terminal_output_chunk", "terminalId": terminal, "data": base64.b64encode(data).decode()}
    return _update(session, chunk)


def _terminal_turn(session: str, chunks: list[Line]) -> list[Line]:
    return [*_new_session(1, session), _prompt(10, session), *chunks, _out({"id": 10, "result": {"messageId": "m"}})]


def test_normalisation_makes_the_chunking_of_a_v2_terminals_bytes_irrelevant() -> None:
    raw = "one\ntwö\n".encode()
    expected = _terminal_turn("$s", [_terminal_chunk("$s", "$t", raw)])
    split = [_terminal_chunk("sess_1", "term_1", piece) for piece in (raw[:2], raw[2:6], raw[6:])]  # inside the ö
    assert compare(expected, _terminal_turn("sess_1", split)).matches


def test_comparison_reports_v2_terminal_bytes_that_differ_or_belong_to_another_terminal() -> None:
    expected = _terminal_turn("$s", [_terminal_chunk("$s", "$t", b"onetwo")])
    _mismatch(expected, _terminal_turn("sess_1", [_terminal_chunk("sess_1", "term_1", b"one-two")]))
    two_terminals = [_terminal_chunk("sess_1", "term_1", b"one"), _terminal_chunk("sess_1", "term_2", b"two")]
    _mismatch(expected, _terminal_turn("sess_1", two_terminals))
    not_base64 = _update("sess_1", {"sessionUpdate": "terminal_output_chunk", "terminalId": "term_1", "data": "?"})
    _mismatch(expected, _terminal_turn("sess_1", [_terminal_chunk("sess_1", "term_1", b"onetwo"), not_base64]))


def test_normalisation_ignores_key_order_and_timestamps() -> None:
    reordered = [
        Line(line.dir, msg=dict(reversed(list(line.msg.items()))), t=float(index)) for index, line in enumerate(ACTUAL)
    ]
    assert compare(EXPECTED, reordered).matches


def test_normalisation_lets_other_sessions_interleave() -> None:
    def two_sessions(a: str, b: str, order: list[int]) -> list[Line]:
        outputs = [
            _chunk(a, "a", "msg_a" if a.startswith("s") else "$ma"),
            _chunk(b, "b", "msg_b" if b.startswith("s") else "$mb"),
            _response(10, "end_turn"),
            _response(11, "end_turn"),
        ]
        return [*_new_session(1, a), *_new_session(2, b), _prompt(10, a), _prompt(11, b), *[outputs[i] for i in order]]

    expected = two_sessions("$A", "$B", [0, 2, 1, 3])
    assert compare(expected, two_sessions("sess_a", "sess_b", [1, 3, 0, 2])).matches
    assert compare(expected, two_sessions("sess_a", "sess_b", [1, 0, 3, 2])).matches


def test_normalisation_makes_the_client_directories_irrelevant() -> None:
    def conversation(root: str, mentioned: str) -> list[Line]:
        read = {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": f"Read {mentioned}/a.txt",
            "status": "pending",
        }
        return [
            _in({"id": 1, "method": "session/new", "params": {"cwd": root, "mcpServers": []}}),
            _out({"id": 1, "result": {"sessionId": "sess_1"}}),
            _prompt(10, "sess_1"),
            _update("sess_1", {**read, "locations": [{"path": f"{mentioned}/a.txt"}]}),
            _response(10, "end_turn"),
        ]

    assert compare(conversation("/home/me/proj", "/home/me/proj"), conversation("/ci/build", "/ci/build")).matches
    assert "$cwd1/a.txt" in "\n".join(canonicalise(conversation("/ci/build", "/ci/build")).lines())
    _mismatch(conversation("/home/me/proj", "/home/me/proj"), conversation("/ci/build", "/home/me/proj"))
    _mismatch(conversation("/tmp/a", "/tmp/a"), conversation("/tmp/b", "/tmp/bb"))  # a sibling is not inside a root


def test_normalisation_drops_timestamp_fields() -> None:
    def listing(updated: str) -> list[Line]:
        entry = {"sessionId": "sess_1", "cwd": "/tmp", "title": "t", "updatedAt": updated}
        return [
            _in({"id": 5, "method": "session/list", "params": {}}),
            _out({"id": 5, "result": {"sessions": [entry]}}),
        ]

    assert compare(listing("2026-01-01T00:00:00.000001Z"), listing("2027-02-02T12:34:56.789012Z")).matches


def test_normalisation_keeps_responses_to_other_requests_free_within_their_input_window() -> None:
    def batch(order: list[int]) -> list[Line]:
        inputs = [
            _in({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
            _in({"id": 2, "method": "nope"}),
        ]
        outputs = [
            _out({"id": 1, "result": {"protocolVersion": 1}}),
            _out({"id": 2, "error": {"code": -32601, "message": "Method not found: nope"}}),
        ]
        return [*inputs, *[outputs[i] for i in order]]

    assert compare(batch([0, 1]), batch([1, 0])).matches


# --- and reports what matters ---


def test_comparison_reports_a_wrong_stop_reason() -> None:
    diff = _mismatch([*EXPECTED[:-1], _response(10, "end_turn")], ACTUAL)
    assert '-← [session $session1] {"id":10,"jsonrpc":"2.0","result":{"stopReason":"end_turn"}}' in diff
    assert '+← [session $session1] {"id":10,"jsonrpc":"2.0","result":{"stopReason":"cancelled"}}' in diff


def test_comparison_reports_a_missing_chunk() -> None:
    late_chunk = _chunk("sess_4f1e", "b", "msg_91ab")
    diff = _mismatch(EXPECTED, [*ACTUAL[:-1], late_chunk, ACTUAL[-1]])
    assert '+← [session $session1] {"jsonrpc":"2.0","method":"session/update"' in diff
    assert '"text":"b"' in diff


def test_comparison_reports_a_chunk_text_that_differs() -> None:
    _mismatch(EXPECTED, [*ACTUAL[:3], _chunk("sess_4f1e", "ab", "msg_91ab"), *ACTUAL[4:]])


def test_comparison_reports_an_extra_update() -> None:
    extra = _update("$session1", {"sessionUpdate": "tool_call_update", "toolCallId": "$call1", "status": "failed"})
    diff = _mismatch([*EXPECTED[:-1], extra, EXPECTED[-1]], ACTUAL)
    assert '-← [session $session1] {"jsonrpc":"2.0","method":"session/update"' in diff


def test_comparison_reports_wrong_order_within_a_session() -> None:
    swapped = [*ACTUAL[:3], ACTUAL[4], ACTUAL[3], *ACTUAL[5:]]
    _mismatch(EXPECTED, swapped)
    response_first = [*ACTUAL[:-2], ACTUAL[-1], ACTUAL[-2]]
    _mismatch(EXPECTED, response_first)


def test_comparison_reports_a_line_on_the_wrong_side_of_an_input() -> None:
    # The response is expected after the cancel; the server sent it before the cancel was written.
    early = [*ACTUAL[:5], ACTUAL[7], ACTUAL[5], ACTUAL[6]]
    assert [line.dir for line in early] == ["in", "out", "in", "out", "out", "out", "in", "out"]
    _mismatch(EXPECTED, early)


def test_comparison_does_not_join_chunks_of_different_messages() -> None:
    expected = [*_new_session(1, "$s"), _prompt(10, "$s"), _chunk("$s", "ab", "$m1"), _response(10, "end_turn")]
    actual = [
        *_new_session(1, "sess_1"),
        _prompt(10, "sess_1"),
        _chunk("sess_1", "a", "msg_1"),
        _chunk("sess_1", "b", "msg_2"),
        _response(10, "end_turn"),
    ]
    _mismatch(expected, actual)


def test_comparison_requires_consistent_placeholders() -> None:
    head = [*_new_session(1, "$s"), _prompt(10, "$s")]
    real_head = [*_new_session(1, "sess_1"), _prompt(10, "sess_1")]
    one_call = [*head, *_tool_call("$s", "$call1"), _response(10, "end_turn")]
    two_calls = [*head, _tool_call("$s", "$call1")[0], _tool_call("$s", "$call2")[1], _response(10, "end_turn")]
    same_id = [*real_head, *_tool_call("sess_1", "call_x"), _response(10, "end_turn")]
    different_ids = [*real_head, _tool_call("sess_1", "call_x")[0], _tool_call("sess_1", "call_y")[1]]
    different_ids.append(_response(10, "end_turn"))
    assert compare(one_call, same_id).matches
    assert compare(two_calls, different_ids).matches
    _mismatch(one_call, different_ids)  # one placeholder, two real ids
    _mismatch(two_calls, same_id)  # two placeholders, one real id


def test_comparison_keeps_client_chosen_ids_literal() -> None:
    def echoed(sent: str, echoed: str) -> list[Line]:
        request = {"toolCall": {"toolCallId": sent}}
        return [
            *_new_session(1, "sess_1"),
            _in({"id": 10, "method": "session/prompt", "params": {"sessionId": "sess_1", "_meta": request}}),
            _out(
                {
                    "id": 0,
                    "method": "session/request_permission",
                    "params": {"sessionId": "sess_1", "toolCall": {"toolCallId": echoed}},
                }
            ),
        ]

    assert compare(echoed("perm-1", "perm-1"), echoed("perm-1", "perm-1")).matches
    _mismatch(echoed("perm-1", "perm-1"), echoed("perm-1", "perm-2"))


def test_canonical_form_labels_every_line_with_its_stream() -> None:
    lines = canonicalise(ACTUAL).lines()
    assert lines[0].startswith('→ {"id":1,')
    assert lines[1] == '← [response to id 1] {"id":1,"jsonrpc":"2.0","result":{"sessionId":"$session1"}}'
    assert all(line.startswith(("→ ", "← [session $session1] ")) for line in lines[2:])


# --- real replays fail when the transcript is wrong ---


def _i01() -> Transcript:
    return load_transcript(TRANSCRIPT_DIR / "i01_cancel_during_gate.jsonl")


def _edited(transcript: Transcript, lines: list[Line]) -> Transcript:
    return Transcript(lines, args=transcript.args, timeout=transcript.timeout, name=f"edited {transcript.name}")


def _find(lines: list[Line], needle: str) -> int:
    return next(i for i, line in enumerate(lines) if needle in orjson.dumps(line.to_json()).decode())


async def _replay_expecting_mismatch(transcript: Transcript, start_server: StartServer) -> ReplayResult:
    result = await replay(transcript, start_server, timeout=scaled(1.5))
    assert not result.matches, "the replay should have reported a mismatch"
    assert not result.ok
    return result


async def test_replay_reports_wrong_stop_reason(start_server: StartServer) -> None:
    transcript = _i01()
    lines = list(transcript.lines)
    index = _find(lines, '"stopReason":"cancelled"')
    lines[index] = Line("out", msg={"jsonrpc": "2.0", "id": 10, "result": {"stopReason": "end_turn"}})
    result = await _replay_expecting_mismatch(_edited(transcript, lines), start_server)
    assert '-← [session $session1] {"id":10,"jsonrpc":"2.0","result":{"stopReason":"end_turn"}}' in result.diff()
    assert '+← [session $session1] {"id":10,"jsonrpc":"2.0","result":{"stopReason":"cancelled"}}' in result.diff()


async def test_replay_reports_missing_chunk(start_server: StartServer) -> None:
    transcript = _i01()
    lines = list(transcript.lines)
    del lines[_find(lines, '"text":"a"')]
    result = await _replay_expecting_mismatch(_edited(transcript, lines), start_server)
    assert '+← [session $session1] {"jsonrpc":"2.0","method":"session/update"' in result.diff()


async def test_replay_reports_extra_update(start_server: StartServer) -> None:
    transcript = _i01()
    lines = list(transcript.lines)
    chunk_b = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "b"}, "messageId": "$msg1"}
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "$session1", "update": chunk_b}}
    lines.insert(_find(lines, '"stopReason":"cancelled"'), Line("out", msg=message))
    result = await _replay_expecting_mismatch(_edited(transcript, lines), start_server)
    assert '"text":"b"' in result.diff()


async def test_replay_reports_wrong_order_within_a_session(start_server: StartServer) -> None:
    transcript = _i01()
    lines = list(transcript.lines)
    chunk = _find(lines, '"text":"a"')
    lines[chunk - 1], lines[chunk] = lines[chunk], lines[chunk - 1]  # chunk "a" before its step_started probe
    result = await _replay_expecting_mismatch(_edited(transcript, lines), start_server)
    assert '"event":"step_started"' in result.diff()


async def test_replay_joins_chunks_the_server_split(start_server: StartServer) -> None:
    transcript = load_transcript(TRANSCRIPT_DIR / "echo_conversation.jsonl")
    result = await replay(transcript, start_server)
    assert result.ok, result.report()

    def is_chunk(message: Any) -> bool:
        return isinstance(message, dict) and "agent_message_chunk" in orjson.dumps(message).decode()

    chunks = [entry for entry in result.client.log if entry.dir == "out" and is_chunk(entry.msg)]
    written = [line for line in transcript.lines if line.dir == "out" and is_chunk(line.msg)]
    assert len(chunks) > len(written), "the echo model should have split the long prompt into several chunks"


# --- recording ---


SCRIPT = """\
{"dir":"meta","args":["--model","scripted","--test-mode","--cleanup-deadline","0.5"]}
{"dir":"in","msg":{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}}
{"dir":"in","msg":{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}}
{"dir":"in","msg":{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"$session1","prompt":[{"type":"text","text":"go"}],"_meta":{"scripted":[{"say":"a"},{"tool":"test_client_request","args":{"method":"fs/read_text_file","params":{"path":"/tmp/x"}}},{"say":"b"}]}}}}
{"dir":"in","msg":{"jsonrpc":"2.0","id":"$req1","result":{"content":"hi"}}}
{"dir":"in","msg":{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess_nobody"}}}
"""


@pytest.mark.timeout(30)
async def test_recorded_transcript_replays_to_a_match(start_server: StartServer) -> None:
    recorded = await record(parse_transcript(SCRIPT, "script"), start_server, settle=0.2)
    text = dump_transcript(recorded).decode()
    assert "sess_nobody" in text, "a client-chosen id stays literal"
    assert '"id":"$req1","method":"fs/read_text_file"' in text, "the server's request id becomes a placeholder"
    assert '"id":"$req1","result":{"content":"hi"}' in text
    assert "sess_" not in text.replace("sess_nobody", ""), "no generated session id is left"
    assert '"stopReason":"end_turn"' in text
    result = await replay(parse_transcript(text, "recorded"), start_server)
    assert result.ok, result.report()


def test_transcript_from_log_replaces_generated_ids_and_keeps_the_rest() -> None:
    raw = [
        ("in", b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}'),
        ("out", b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":"sess_abc"}}\n'),
        ("in", b'{"jsonrpc":"2.0", "method":"session/cancel","params":{"sessionId":"sess_abc"}}'),
        ("in", b"{broken"),
        ("out", b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}\n'),
    ]
    log = [Entry(i, 100.0 + i, d, _loads_or_none(data), data) for i, (d, data) in enumerate(raw)]
    transcript = transcript_from_log(log, ("--model", "echo"), eof_index=len(log), times=True, pauses=[(3, 0.25)])
    dumped = [orjson.loads(line) for line in dump_transcript(transcript).splitlines()]
    assert dumped[0] == {"dir": "meta", "args": ["--model", "echo"]}
    assert dumped[2]["msg"]["result"] == {"sessionId": "$session1"}
    assert dumped[2]["t"] == 1.0
    # Not byte-identical to its compact form (a space): kept raw, generated id and all; replay writes raw lines as is.
    assert dumped[3]["raw"] == raw[2][1].decode()
    assert dumped[4] == {"dir": "meta", "sleep": 0.25}, "a pause is put back before the entry it preceded"
    assert dumped[5]["raw"] == "{broken"
    assert dumped[-1] == {"dir": "in", "eof": True}


def _loads_or_none(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


# --- the file format ---


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('{"dir":"in","msg":{}}\n{"dir":"out",', "t.jsonl:2: not JSON"),
        ('{"dir":"sideways","msg":{}}', '"dir": "in", "out" or "meta"'),
        ('{"dir":"in","msg":{},"mesage":1}', "unexpected key(s) mesage"),
        ('{"dir":"in","msg":{},"raw":"x"}', "exactly one of msg, raw or eof"),
        ('{"dir":"out","eof":true}', "unexpected key(s) eof"),
        ('{"dir":"in","raw":"two\\nlines"}', "raw must be a string holding one line"),
        ('{"dir":"in","msg":{}}\n{"dir":"meta","args":["--model","echo"]}', "t.jsonl:2: args and timeout belong"),
        ('{"dir":"in","eof":true}\n{"dir":"in","msg":{}}', "nothing can be sent after stdin was closed"),
        ('{"dir":"meta","sleep":-1}', "sleep must be a non-negative number"),
    ],
)
def test_parser_rejects_malformed_transcripts(text: str, complaint: str) -> None:
    with pytest.raises(TranscriptError) as caught:
        parse_transcript(text, "t.jsonl")
    assert complaint in str(caught.value)


def test_parser_keeps_unicode_line_separators_inside_a_line() -> None:
    text = orjson.dumps({"dir": "out", "msg": {"text": "a\u2028b\u0085c"}}).decode()
    assert "\u2028" in text, "orjson writes U+2028 unescaped, so the parser must not split there"
    transcript = parse_transcript(text)
    assert transcript.lines == [Line("out", msg={"text": "a\u2028b\u0085c"})]


def test_parser_reads_meta_and_defaults() -> None:
    transcript = parse_transcript(
        '{"dir":"meta","args":["--model","echo"],"timeout":2,"comment":"why"}\n\n'
        '{"dir":"in","msg":{"id":1},"t":0.5,"comment":"first"}\n{"dir":"meta","sleep":0.1}\n'
    )
    assert transcript.args == ("--model", "echo")
    assert transcript.timeout == 2.0
    assert transcript.comment == "why"
    assert [line.dir for line in transcript.lines] == ["in", "meta"]
    assert transcript.events()[-1] == Line("in", eof=True), "stdin EOF is implicit at the end"
    default = parse_transcript('{"dir":"in","msg":{"id":1}}')
    assert default.args is None, "no meta line: the file names no arguments"
    assert server_args(default) == DEFAULT_ARGS == ("--model", "scripted", "--test-mode", "--cleanup-deadline", "0.5")
