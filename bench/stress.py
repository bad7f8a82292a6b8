"""A seeded randomized stress run: many sessions streaming at once, with random cancels, replacement prompts, queued
and steering prompts, subagents, and permission requests answered late or never, checked for the promises that matter.

It checks exactly one response per prompt, no turn update for a session while none of its prompts is unanswered,
no update carrying another session's id, every message valid against the ACP schema (the test harness's wire
checks), and, through `_acp_server/stats`, nothing left behind at the end: no running turn, queued prompt, pending
client request or child process. It reports cancel latency under that load and the total throughput.

With `--rate R` every `say` and `think` step streams at R chunks/s (the scripted model's `every`), so N sessions are
N models streaming at once, as in an editor with many busy chats; `python -m bench.stress --sessions 1000` does that
at 20 chunks/s each. The server's CPU over the rounds (utime + stime from /proc, all threads) divided by the updates
it wrote is the per-chunk figure, comparable across session counts because the rate per session is fixed.
Run: `python -m bench.stress [--sessions 1000] [--rounds 3] [--rate 20] [--seed 7]`; tests/e2e/test_stress.py runs
a short one, unpaced.
With `--protocol 2` the client speaks ACP v2: a prompt is answered at insertion (`messageId`), or `-32800` when a
cancel withdrew it while held, or `-32600` under `reject`; the work's end is the session's `idle`, and the cancel
latency is measured to the `idle` `cancelled`. tests/e2e/test_stress.py runs a short one on each version.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.report import Figure, format_table
from bench.wire import CLOCK_TICKS, percentile, process_cpu_ticks
from tests.support.harness import RawClient, check_wire

__all__ = ["StressResult", "crossed_sessions", "main", "run"]

POLICIES = ("interrupt", "queue", "reject", "steer")
CANCEL_TARGET_MS = 50.0  # cancel p99 with 1,000 busy sessions (issue 14)


@dataclass
class StressResult:
    prompts: int
    chunks: int
    seconds: float
    cancel_ms: list[float]
    problems: list[str] = field(default_factory=list)
    # Running turns that handed over to a steering prompt at a model-call boundary.
    hand_overs: int = 0
    sessions: int = 0
    rate: float = 0.0  # chunks/s per session of every say/think step (0: as fast as the server goes)
    updates: int = 0  # every session/update written during the rounds
    server_cpu_s: float = 0.0  # the server's CPU over the rounds (all threads)

    @property
    def cpu_us_per_update(self) -> float:
        return self.server_cpu_s / self.updates * 1e6 if self.updates else 0.0

    @property
    def cancel_p99_ms(self) -> float:
        return percentile(self.cancel_ms, 99) if self.cancel_ms else 0.0

    def figures(self, cancel_target_ms: float | None = CANCEL_TARGET_MS) -> list[Figure]:
        paced = (
            f" ({self.sessions} sessions at {self.rate:g} chunks/s)" if self.rate else f" ({self.sessions} sessions)"
        )
        figures = [
            Figure("stress: prompts answered", float(self.prompts), "prompts"),
            Figure("stress: chunks/s over the run", self.chunks / self.seconds, "chunks/s"),
            Figure("stress: problems found", float(len(self.problems)), "problems", "<=", 0.0),
            Figure("stress: steering hand-overs", float(self.hand_overs), "hand-overs"),
            Figure(f"stress: server CPU per update{paced}", self.cpu_us_per_update, "µs"),
        ]
        if self.cancel_ms:
            op = None if cancel_target_ms is None else "<="
            figures += [
                Figure(f"stress: cancel -> cancelled, median{paced}", statistics.median(self.cancel_ms), "ms"),
                Figure(f"stress: cancel -> cancelled, p99{paced}", self.cancel_p99_ms, "ms", op, cancel_target_ms),
            ]
        return figures


def _script(rng: random.Random, tag: str, rate: float = 0.0) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for index in range(rng.randint(1, 6)):
        kind = rng.choice(("say", "say", "think", "sleep", "tool", "write", "gate", "delegate"))
        if kind in ("say", "think"):
            if rate:  # paced: a second or so of streaming per step, like a model's reply
                steps.append({kind: f"{tag}.{index} ", "repeat": rng.choice((1, 5, 20, 40)), "every": 1 / rate})
            else:
                steps.append({kind: f"{tag}.{index} ", "repeat": rng.choice((1, 5, 50, 200))})
        elif kind == "sleep":
            steps.append({"sleep": rng.choice((0.0, 0.01, 0.05))})
        elif kind == "tool":
            steps.append({"tool": "test_sleep", "args": {"s": rng.choice((0.0, 0.02, 0.2))}})
        elif kind == "write":
            steps.append({"tool": "write_file", "args": {"path": f"{tag}-{index}.txt", "content": tag}})
        elif kind == "delegate":  # a subagent with its own small script (cancelled with its parent)
            child = [{"say": f"{tag}.{index}.child ", "repeat": rng.choice((1, 20))}, {"sleep": rng.choice((0, 0.05))}]
            steps.append({"tool": "delegate", "args": {"task": f"{tag}.{index}", "script": child}})
        else:
            steps.append({"gate": f"{tag}.{index}", "timeout": rng.choice((0.05, 0.2))})
    return steps


def crossed_sessions(client: RawClient, ids: list[str]) -> list[str]:
    """Every script's text carries its session's tag (`s<number>r...`): a reply or thought shown under another
    session's id is a crossed wire."""
    tags = {session: f"s{number}r" for number, session in enumerate(ids)}
    crossed = []
    for message in client.received:
        if message.get("method") != "session/update":
            continue
        update = message["params"]["update"]
        if update["sessionUpdate"] in ("agent_message_chunk", "agent_thought_chunk"):
            text = update["content"].get("text", "")
            if not text.startswith(tags.get(message["params"]["sessionId"], "?")):
                crossed.append(f"{message['params']['sessionId']} was sent {text[:40]!r}")
    return crossed[:20]


async def _answer_permissions(client: RawClient, rng: random.Random, stop: asyncio.Event) -> None:
    """The editor's user: answers permission requests now or late, or never answers and presses Stop instead (a
    question nobody answers holds its turn until then, as it should)."""
    seen = 0
    replies: list[asyncio.Task[None]] = []
    while not stop.is_set():
        pending = [m for m in client.received[seen:] if m.get("method") == "session/request_permission"]
        seen = len(client.received)
        for request in pending:
            replies.append(asyncio.create_task(_reply(client, rng, request)))
        await asyncio.sleep(0.02)
    for reply in replies:
        reply.cancel()


async def _reply(client: RawClient, rng: random.Random, request: dict[str, Any]) -> None:
    choice = rng.random()
    if choice < 0.2:
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        await client.cancel(request["params"]["sessionId"])  # never answered: the user presses Stop
        return
    await asyncio.sleep(0.0 if choice < 0.6 else rng.uniform(0.05, 0.5))  # now, or late (perhaps after a cancel)
    option = rng.choice(("allow_once", "reject_once"))
    await client.send({"id": request["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}})


class _States:
    """Each session's v2 `state_update`s as the client received them, read once each, in order.

    What the run asks before every cancel (the session's last state, where its latest work started) and what it
    waits for after one (its next `idle`) were answered by scanning everything received so far: at 1,000 sessions
    that is ~50 ms of the client's loop per question, during which it reads nothing, so the next cancels' answers
    were timestamped late and the client, not the server, set the cancel p99. Here every message is looked at once
    (`catch_up`, also called by a pump on each arrival), so a question costs O(1) and a wait is woken by its idle.
    """

    def __init__(self, client: RawClient) -> None:
        self._client = client
        self._seen = 0  # messages of client.received read so far
        self._state: dict[str, str | None] = {}
        self._running_at: dict[str, int] = {}  # the index of the session's latest non-idle state_update
        self._idles: dict[str, list[int]] = {}  # the indices of the session's idles, ascending
        self._waiters: dict[str, list[tuple[int, asyncio.Future[dict[str, Any]]]]] = {}

    def catch_up(self) -> None:
        received = self._client.received
        for index in range(self._seen, len(received)):
            message = received[index]
            if message.get("method") != "session/update":
                continue
            update = message["params"]["update"]
            if update.get("sessionUpdate") != "state_update":
                continue
            session = message["params"]["sessionId"]
            state = update.get("state")
            self._state[session] = None if state is None else str(state)
            if state != "idle":
                self._running_at[session] = index
                continue
            self._idles.setdefault(session, []).append(index)
            waiting = self._waiters.get(session)
            if waiting:
                self._waiters[session] = [(since, f) for since, f in waiting if not _settle(f, since, index, message)]
        self._seen = len(received)

    def last_state(self, session: str) -> str | None:
        self.catch_up()
        return self._state.get(session)

    def last_running(self, session: str) -> int:
        """The index of the session's latest non-idle `state_update` (where the wait for its idle starts)."""
        self.catch_up()
        return self._running_at.get(session, 0)

    async def idle_after(self, session: str, since: int, timeout: float) -> dict[str, Any]:
        """The session's first v2 `idle` at or after message index `since`."""
        self.catch_up()
        idles = self._idles.get(session, [])
        at = bisect.bisect_left(idles, since)
        if at < len(idles):
            return self._client.received[idles[at]]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(session, []).append((since, future))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise TimeoutError(f"no idle of {session} within {timeout} s") from None

    async def pump(self) -> None:
        """Read each message as it arrives (wait_for hands every message to its predicate once, in order), until
        the server closes stdout or the run ends."""
        with contextlib.suppress(AssertionError):  # stdout closed: nothing more will come
            while True:
                with contextlib.suppress(TimeoutError):
                    await self._client.wait_for(self._see, timeout=3600)

    def _see(self, _message: dict[str, Any]) -> bool:
        self.catch_up()
        return False


def _settle(future: asyncio.Future[dict[str, Any]], since: int, index: int, message: dict[str, Any]) -> bool:
    """Resolve a wait for an idle at or after `since` with this one at `index`; whether the wait is over."""
    if future.done():
        return True
    if index < since:
        return False
    future.set_result(message)
    return True


async def _steer_once(client: RawClient, states: _States, session: str, tag: str, v2: bool) -> list[str]:
    """A steering prompt that provably arrives before a model-call boundary: the running turn waits at a gate, the
    second prompt is sent, and only then is the gate released (the server reads the two in that order); the tool
    call that follows ends a model call, where the turn must hand over. `tag`: the session's text tag (see
    `crossed_sessions`). What went wrong, if anything."""
    since = len(client.received)
    held = await client.prompt(session, [{"gate": "steer", "timeout": 60}, {"tool": "test_sleep", "args": {"s": 0}}])
    await client.probe("gate_reached", timeout=15, sessionId=session, gate="steer")
    steered = await client.prompt(session, [{"say": f"{tag}steered "}])
    await client.release(session, "steer")
    problems = []
    for prompt in (held, steered):
        response = await client.response(prompt, timeout=15)
        if "result" not in response:
            problems.append(f"steering prompt {prompt}: {response}")
    if v2:  # answered at acceptance: the work ends with the session's idle
        await states.idle_after(session, since, 15)
    handed = [
        m
        for m in client.received[since:]
        if m.get("method") == "_scripted/probe" and m["params"]["event"] == "handed_over"
    ]
    if not handed:
        problems.append(f"{session} (steer): the prompt sent before a model-call boundary was not handed over to")
    return problems


async def run(
    sessions: int = 50,
    rounds: int = 20,
    seed: int = 7,
    *,
    workdir: str | None = None,
    validate: bool = True,
    rate: float = 0.0,
    store: bool = True,
    protocol: int = 1,
) -> StressResult:
    """`validate=False` skips the per-message schema check (the wire checks stay), so the figures are the server's.
    `rate` paces every say/think step at that many chunks/s; `store=False` runs the server with `--no-store`."""
    if workdir is None:  # write_file writes here; a directory of our own is removed at the end
        with tempfile.TemporaryDirectory(prefix="acp-server-stress-") as own:
            return await run(
                sessions, rounds, seed, workdir=own, validate=validate, rate=rate, store=store, protocol=protocol
            )
    rng = random.Random(seed)
    # The harness's environment points the store at a fresh temporary state directory, never the user's.
    args = ("--model", "scripted", "--test-mode", "--cleanup-deadline", "0.5", *(() if store else ("--no-store",)))
    client = await RawClient.start(*args)
    client.validator.schema = validate
    problems: list[str] = []
    cancel_ms: list[float] = []
    prompts = 0
    stop = asyncio.Event()
    responder = asyncio.create_task(_answer_permissions(client, rng, stop))
    states = _States(client)
    pump = asyncio.create_task(states.pump())
    started = time.monotonic()
    cpu_before = cpu_after = 0
    updates_before = 0
    try:
        v2 = protocol == 2
        if v2:
            await client.initialize_v2()
            ids = [await client.new_session_v2(workdir) for _ in range(sessions)]
        else:
            await client.initialize()
            ids = [await client.new_session(workdir) for _ in range(sessions)]
        policies = {session: rng.choice(POLICIES) for session in ids}
        for session, policy in policies.items():
            await client.call(
                "session/set_config_option", {"sessionId": session, "configId": "prompt_policy", "value": policy}
            )
        steering = [session for session, policy in policies.items() if policy == "steer"]
        if steering:  # one hand-over whatever the machine's load: the random rounds may not give one
            problems += await _steer_once(client, states, steering[0], f"s{ids.index(steering[0])}r", v2)
            prompts += 2
        cpu_before = process_cpu_ticks(client.process.pid)
        updates_before = len(client.received)
        for round_index in range(rounds):
            outstanding: list[Any] = []
            for number, session in enumerate(ids):
                outstanding.append(await client.prompt(session, _script(rng, f"s{number}r{round_index}", rate)))
                event = rng.random()
                if event < 0.25:
                    await asyncio.sleep(rng.choice((0.0, 0.005, 0.03)))
                    working = states.last_state(session) in ("running", "requires_action")
                    since = len(client.received)
                    t0 = await client.cancel(session)
                    cancelled = outstanding[-1]

                    async def timed(prompt: Any = cancelled, t_cancel: float = t0) -> None:
                        response = await client.response(prompt, timeout=10)
                        if response.get("result", {}).get("stopReason") == "cancelled":
                            cancel_ms.append((client.arrival_time(response) - t_cancel) * 1000)

                    async def timed_v2(session: str = session, t_cancel: float = t0, since: int = since) -> None:
                        idle = await states.idle_after(session, since, 10)
                        if idle["params"]["update"].get("stopReason") == "cancelled":
                            cancel_ms.append((client.arrival_time(idle) - t_cancel) * 1000)

                    if not v2:
                        outstanding.append(asyncio.create_task(timed()))
                    elif working:  # work seen running before the cancel: its idle is owed (I11 otherwise)
                        outstanding.append(asyncio.create_task(timed_v2()))
                elif event < 0.45:  # a second prompt on the busy session: replaced, queued, rejected or steering
                    outstanding.append(await client.prompt(session, _script(rng, f"s{number}r{round_index}b", rate)))
            for item in outstanding:
                if isinstance(item, asyncio.Task):
                    await item
                else:
                    response = await client.response(item, timeout=15)
                    prompts += 1
                    allowed = (-32600, -32800) if v2 else (-32600,)
                    if "result" not in response and response.get("error", {}).get("code") not in allowed:
                        problems.append(f"prompt {item}: {response}")
            if v2:  # every session's work ends with its idle before the next round
                for session in ids:
                    if states.last_state(session) in ("running", "requires_action"):
                        await states.idle_after(session, states.last_running(session), 15)
        cpu_after = process_cpu_ticks(client.process.pid)
        rounds_received = client.received[updates_before:]
        stats = await client.stats()
        kinds = ("runningTurns", "queuedPrompts", "pendingClientRequests", "childProcesses", "mcpSessions")
        leaked = {k: stats[k] for k in kinds}
        if any(leaked.values()):
            problems.append(f"left behind: {leaked}")
    finally:
        stop.set()
        await responder
        pump.cancel()
        await asyncio.wait([pump])  # our own cancel: waited for, never raised into (or swallowed from) the run
        seconds = time.monotonic() - started
        code, _ = await client.close()
        if code != 0:
            problems.append(f"exit status {code}")
        problems += check_wire(client)
        problems += crossed_sessions(client, ids)
    chunks = sum(
        1
        for m in client.received
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )
    hand_overs = sum(
        1 for m in client.received if m.get("method") == "_scripted/probe" and m["params"]["event"] == "handed_over"
    )
    updates = sum(1 for m in rounds_received if m.get("method") == "session/update")
    server_cpu = (cpu_after - cpu_before) / CLOCK_TICKS
    return StressResult(prompts, chunks, seconds, cancel_ms, problems, hand_overs, sessions, rate, updates, server_cpu)


def main(argv: Sequence[str] | None = None) -> StressResult:
    parser = argparse.ArgumentParser(prog="python -m bench.stress", description=__doc__)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20.0, help="chunks/s per say/think step (0: unpaced)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-store", action="store_true", help="run the server without the session store")
    parser.add_argument("--validate", action="store_true", help="also check every message against the ACP schema")
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=1, help="the ACP version the client speaks")
    options = parser.parse_args(argv)
    result = asyncio.run(
        run(
            options.sessions,
            options.rounds,
            options.seed,
            validate=options.validate,
            rate=options.rate,
            store=not options.no_store,
            protocol=options.protocol,
        )
    )
    print(format_table(result.figures()))
    for problem in result.problems[:20]:
        print("PROBLEM:", problem)
    return result


if __name__ == "__main__":
    main()
