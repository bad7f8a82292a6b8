"""What the sandbox takes from a command beyond Landlock's file rules (runtime/sandbox_exec.py), end to end: real
servers over stdio, run as root and as an unprivileged user, whose `run_command`s try to make a device node, read the
server's (and every ancestor's) environment, and change the metadata of a file outside the workspace; the kernel's own
answers (/proc/self/status, the files on disk) are the proof.

The unprivileged server is the same checkout run by `setpriv` as `nobody`, with an interpreter that user may run (the
test's own, or the system's of the same version with this checkout and its site-packages on PYTHONPATH), its state,
log and working directories its own. Both need root to set up: CI runs as root, so there they never skip.
"""

from __future__ import annotations

import functools
import os
import platform
import pwd
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from acp_server.runtime.sandbox import landlock_support, mount_isolation, network_isolation
from acp_server.runtime.sandbox_exec import KEPT_CAPABILITIES
from tests.conftest import StartServer
from tests.e2e.test_sandbox_e2e import run_all
from tests.support.harness import DEFAULT_ARGS, RawClient, isolated_env, scaled, server_command

ABI = landlock_support().abi
needs_landlock = pytest.mark.skipif(ABI < 1, reason=f"no Landlock on this machine: {landlock_support().reason}")
OUTSIDE_TMP = Path("/var/tmp")
CHECKOUT = str(Path(__file__).resolve().parents[2])


def require_root() -> None:
    """These cases need root (a root server, or root to start one as `nobody`): CI runs as root, so never skip there."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs the suite as root; this case needs root and must not skip there")
        pytest.skip("needs root: a root server, or root to start a server as an unprivileged user")


@dataclass(frozen=True)
class User:
    """Who runs the server: root (the test's own process) or `nobody`, through setpriv."""

    name: str
    uid: int
    gid: int
    prefix: tuple[str, ...] = ()  # what starts the server as this user
    env: tuple[tuple[str, str], ...] = ()  # what that needs in the environment

    def command(self, *args: str) -> list[str]:
        if not self.prefix:
            return server_command(*args)
        return [*self.prefix, "-m", "acp_server", *args]


@functools.cache
def _unprivileged() -> User | str:
    """`nobody` and an interpreter it can run this checkout with, or why there is none."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return "no user named nobody"
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "no setpriv"
    paths = sysconfig.get_paths()
    pythonpath = os.pathsep.join(dict.fromkeys([CHECKOUT, paths["purelib"], paths["platlib"]]))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [sys.executable, os.path.realpath(sys.executable), shutil.which(version, path="/usr/local/bin:/usr/bin")]
    as_nobody = [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--"]
    for python in dict.fromkeys(path for path in found if path):
        # Through a shell: setpriv may exec while it still holds root's capabilities, and the server must be able
        # to start this interpreter again (the sandbox's launcher) as nobody alone.
        probe = subprocess.run(
            [
                *as_nobody,
                "/bin/sh",
                "-c",
                'exec "$@"',
                "probe",
                python,
                "-c",
                "import acp_server.cli.deferred_side, landlockpy",
            ],
            env={"PYTHONPATH": pythonpath, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"},
            cwd="/",
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return User(
                "unprivileged", nobody.pw_uid, nobody.pw_gid, (*as_nobody, python), (("PYTHONPATH", pythonpath),)
            )
    return f"nobody can run none of {found} with this checkout ({CHECKOUT}) on its path"


def user_for(name: str) -> User:
    require_root()
    if name == "root":
        return User("root", 0, 0)
    found = _unprivileged()
    if isinstance(found, str):
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot run the server as an unprivileged user: {found}")
        pytest.skip(f"cannot run the server as an unprivileged user: {found}")
    return found


@dataclass
class Arena:
    """The directories of one server, owned by the user it runs as."""

    user: User
    root: Path  # the session's cwd
    extra: Path  # its additional directory
    home: Path
    elsewhere: Path  # no session names it
    temp: Path  # the server's TMPDIR
    state: Path
    logs: Path

    def env(self, **more: str) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "TMPDIR": str(self.temp),
            "ACP_SERVER_STATE_DIR": str(self.state),
            "ACP_SERVER_LOG_FILE": str(self.logs / "acp-server.log"),
            **dict(self.user.env),
            **more,
        }


@pytest.fixture(params=["root", "unprivileged"])
def arena(request: pytest.FixtureRequest) -> Iterator[Arena]:
    user = user_for(request.param)
    base = Path(tempfile.mkdtemp(prefix="acp-sandbox-privileges-", dir=OUTSIDE_TMP))
    os.chmod(base, 0o755)
    made = Arena(user, *(base / name for name in ("root", "extra", "home", "elsewhere", "temp", "state", "logs")))
    for path in (made.root, made.extra, made.home, made.elsewhere, made.temp, made.state, made.logs):
        path.mkdir()
    (made.root / "readme.txt").write_text("kept\n")
    for path in base.rglob("*"):
        os.chown(path, user.uid, user.gid)
    try:
        yield made
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def start(start_server: StartServer, arena: Arena, *args: str, wrapper: bool = False, **env: str) -> RawClient:
    """A server run as the arena's user; `wrapper`: behind a shell that stays its parent (and holds its environment)."""
    command = arena.user.command(*DEFAULT_ARGS, *args)
    if wrapper:
        head = len(arena.user.prefix) - 1 if arena.user.prefix else 0  # the shell runs as the user too
        command = [*command[:head], "/bin/sh", "-c", '"$@"; exit $?', "wrapper", *command[head:]]
    client = await start_server(env=arena.env(**env), cwd=str(arena.root), command=command)
    await client.initialize()
    return client


async def session_in(client: RawClient, root: Path, extra: Path) -> str:
    response = await client.call(
        "session/new", {"cwd": str(root), "additionalDirectories": [str(extra)], "mcpServers": []}
    )
    session_id: str = response["result"]["sessionId"]
    response = await client.call("session/set_mode", {"sessionId": session_id, "modeId": "bypass"})
    assert response.get("result") == {}, response
    return session_id


async def doctor_sandbox_line(prefix: Sequence[str], args: Sequence[str], env: dict[str, str]) -> str:
    """The one `sandbox:` line of `acp-server doctor ARGS`, run behind `prefix` (a wrapper such as the seccomp one)."""
    with anyio.fail_after(scaled(60)):
        report = await anyio.run_process(
            [*prefix, *server_command("doctor", "--timeout", "1", *args)],
            env={**os.environ, **isolated_env(), **env},
            check=False,
        )
    lines = report.stderr.decode(errors="replace").splitlines()
    (line,) = [line for line in lines if line.startswith(("OK   sandbox:", "WARN sandbox:", "FAIL sandbox:"))]
    return line


def _status(text: str) -> dict[str, int]:
    """The capability and no_new_privs lines of /proc/self/status, as numbers."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"):
            found[key] = int(value.strip(), 16 if key.startswith("Cap") else 10)
    return found


def _own_bounding_set() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    return 0


@needs_landlock
@pytest.mark.timeout(60)
async def test_a_root_servers_command_cannot_make_a_device_node_and_keeps_only_the_capabilities_files_need(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Issue 20 item 2: `mknod n c 1 3` (the harmless /dev/null's numbers; no device is ever written) is refused, and
    the command holds, in every set and the bounding set, only CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID
    and CAP_NET_BIND_SERVICE, with no_new_privs. FIFOs may still be made in the workspace."""
    user_for("root")
    base = Path(tempfile.mkdtemp(prefix="acp-sandbox-privileges-", dir=OUTSIDE_TMP))
    try:
        root, extra = base / "root", base / "extra"
        root.mkdir()
        extra.mkdir()
        client = await start_server(*DEFAULT_ARGS, env={"TMPDIR": str(tmp_path)}, cwd=str(root))
        await client.initialize()
        session_id = await session_in(client, root, extra)
        device, status, fifo = await run_all(
            client,
            session_id,
            [
                "mknod n c 1 3",
                "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status",
                "mkfifo p && test -p p && echo fifo made",
            ],
        )
        # Refused by Landlock first (EACCES: no MAKE_CHAR granted), before the kernel's CAP_MKNOD check (EPERM).
        assert device[0] not in (0, None) and "Permission denied" in device[1], device
        assert not (root / "n").exists() and not (root / "n").is_char_device()
        kept = sum(1 << cap for cap in KEPT_CAPABILITIES) & _own_bounding_set()
        assert status[0] == 0, status
        assert _status(status[1]) == {
            "CapInh": 0,
            "CapPrm": kept,
            "CapEff": kept,
            "CapBnd": kept,
            "CapAmb": 0,
            "NoNewPrivs": 1,
        }, status
        assert fifo[0] == 0 and "fifo made" in fifo[1], fifo
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_landlock
@pytest.mark.timeout(60)
async def test_a_command_cannot_read_the_environment_of_the_server_or_of_any_ancestor(
    start_server: StartServer, arena: Arena
) -> None:
    """Issue 20 item 3: the key is in the environment the server (and a wrapper shell above it) started with; the
    command walks its ancestors up to init and reads each one's /proc/PID/environ: every read is refused, the key
    never shows (reversed, so the server's redaction of output cannot hide it). Root: the command has no
    CAP_SYS_PTRACE (and fewer capabilities than its ancestors); both: the server is not dumpable, and Landlock keeps
    the command from reading processes outside its domain."""
    key = f"sk-test-{uuid.uuid4().hex}"
    client = await start(start_server, arena, wrapper=True, OPENAI_API_KEY=key)
    session_id = await session_in(client, arena.root, arena.extra)
    walk = (
        "p=$PPID; while [ \"$p\" -gt 1 ]; do echo \"ancestor $p\"; tr '\\0' '\\n' < /proc/$p/environ | rev; "
        "p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2); done; echo walked"
    )
    (code, text), status = await run_all(
        client, session_id, [walk, "grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status"]
    )
    # No CAP_SYS_PTRACE, nor any other the launcher does not keep; a non-root server's command holds none at all.
    kept = sum(1 << cap for cap in KEPT_CAPABILITIES) & _own_bounding_set()
    assert _status(status[1]) == {"CapEff": kept if arena.user.uid == 0 else 0, "CapBnd": kept, "NoNewPrivs": 1}
    assert "walked" in text, text
    # Reversed: the server redacts a secret it knows from what a command prints, but a command can encode it.
    assert key not in text and key[::-1] not in text, text
    ancestors = [int(line.split()[1]) for line in text.splitlines() if line.startswith("ancestor ")]
    wrapper = client.process.pid
    assert len(ancestors) >= 2 and ancestors[1] == wrapper, (ancestors, wrapper, text)  # the server, then its shell
    for pid in ancestors:
        assert f"/proc/{pid}/environ: Permission denied" in text, (pid, text)
    # The server made itself non-dumpable before its first command: its /proc files then belong to root, whoever
    # it runs as (ptrace(2)), and a process of its uid without CAP_SYS_PTRACE may not read them.
    assert os.stat(f"/proc/{ancestors[0]}/environ").st_uid == 0
    assert code == 0, text


@needs_landlock
@pytest.mark.timeout(90)
async def test_a_command_cannot_change_the_metadata_of_a_file_outside_the_directories_it_may_write(
    start_server: StartServer, arena: Arena
) -> None:
    """Issue 20 item 5: Landlock does not govern chmod, chown or utime; the read-only mount namespace does. Outside
    the writable directories they are refused (EROFS) and the file is as it was; inside, they work as before, and so
    do /dev/null, the temp directory and the additional directory. In read-only, the roots' metadata is kept too."""
    if not mount_isolation(landlock_support().package_dir).ok:
        pytest.fail(f"no mount namespace here: {mount_isolation(landlock_support().package_dir).reason}")
    victim = arena.elsewhere / "victim"
    victim.write_text("mine\n")
    os.chown(victim, arena.user.uid, arena.user.gid)
    os.chmod(victim, 0o644)
    os.utime(victim, (1_000_000_000, 1_000_000_000))
    before = victim.stat()
    owner = "65534" if arena.user.uid == 0 else f"{arena.user.uid}:{arena.user.gid}"
    client = await start(start_server, arena)
    session_id = await session_in(client, arena.root, arena.extra)
    outcomes = await run_all(
        client,
        session_id,
        [
            f"chmod 4666 {victim}",
            f"chown {owner} {victim}",
            f"touch -d 2001-02-03 {victim}",
            f"echo evil >> {victim}",
            f"echo evil > {arena.home}/.bashrc",
            # Undoing the read-only mounts first does not help: no capability, and a Landlocked process may not mount.
            f"mount -o remount,rw / ; mount -o remount,bind,rw {arena.elsewhere} ; chmod 4666 {victim}",
            "chmod 600 readme.txt && touch -d 2001-02-03 readme.txt && stat -c %a readme.txt",
            f"echo x > /dev/null && echo made > {arena.temp}/f && mkdir {arena.extra}/d && echo fine",
        ],
    )
    *outside, inside, others = outcomes
    for code, text in outside:
        assert code not in (0, None) and "Read-only file system" in text, text
        assert "it ran in the workspace-write sandbox" in text, text  # the model is told why
    assert victim.read_text() == "mine\n" and not (arena.home / ".bashrc").exists()
    after = victim.stat()
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_mtime) == (
        before.st_mode,
        before.st_uid,
        before.st_gid,
        before.st_mtime,
    )
    assert inside[0] == 0 and inside[1].startswith("600"), inside
    assert (arena.root / "readme.txt").stat().st_mtime != before.st_mtime
    assert others[0] == 0 and "fine" in others[1], others
    assert (arena.temp / "f").read_text() == "made\n" and (arena.extra / "d").is_dir()

    code, _ = await client.close()
    assert code == 0
    read_only = await start(start_server, arena, "--sandbox", "read-only")
    session_id = await session_in(read_only, arena.root, arena.extra)
    ((code, text),) = await run_all(read_only, session_id, ["chmod 644 readme.txt"])
    assert code not in (0, None) and "Read-only file system" in text, text
    assert (arena.root / "readme.txt").stat().st_mode & 0o777 == 0o600


@needs_landlock
@pytest.mark.timeout(60)
async def test_what_the_sandbox_leaves_open_stays_open_as_docs_sandbox_md_says(
    start_server: StartServer, arena: Arena
) -> None:
    """The other side of docs/sandbox.md: a command still reads any file its user can (a key in a config file), may
    set the set-user-ID bit on a file it made in the workspace, and as a non-root server's sees files of other users
    as owned by the overflow uid (65534) in its user namespace. And a cost: link(2) and rename(2) from one writable
    directory to another fail (EXDEV), as between two file systems; `mv` copies instead."""
    secret = arena.elsewhere / "config.toml"
    key = f"sk-file-{uuid.uuid4().hex}"
    secret.write_text(f'api_key = "{key}"\n')
    os.chown(secret, arena.user.uid, arena.user.gid)
    os.chmod(secret, 0o600)
    client = await start(start_server, arena)
    session_id = await session_in(client, arena.root, arena.extra)
    read, setuid, owner, moved, linked, proc = await run_all(
        client,
        session_id,
        [
            f"rev {secret}",
            "cp /bin/true ./t && chmod 4755 ./t && stat -c %a t",
            "stat -c %u /",
            f"echo moved > {arena.temp}/m && mv {arena.temp}/m m && cat m",
            f"echo linked > {arena.temp}/l && ln {arena.temp}/l l",
            "unshare -Ur true",
        ],
    )
    # /proc is not writable (Landlock refused it before; now a read-only mount too): no nested user namespace.
    assert proc[0] not in (0, None) and "uid_map: Read-only file system" in proc[1], proc
    # Each writable directory is a mount of its own: mv copies across them, a hard link (or a bare rename) cannot.
    assert moved[0] == 0 and "moved" in moved[1], moved
    assert linked[0] not in (0, None) and "Invalid cross-device link" in linked[1], linked
    assert read[0] == 0 and key[::-1] in read[1], read
    assert setuid[0] == 0 and setuid[1].startswith("4755"), setuid
    assert (arena.root / "t").stat().st_mode & 0o4000
    assert owner[0] == 0 and owner[1].startswith("0" if arena.user.uid == 0 else "65534"), owner


# Starts its arguments with unshare(2) refused (EPERM), as a container's seccomp profile may (Docker's default does
# for a process without CAP_SYS_ADMIN): a seccomp filter, inherited by everything the program starts. x86_64 only.
REFUSE_UNSHARE = """
import ctypes, os, struct, sys
LD, JEQ, RET = 0x20, 0x15, 0x06
program = [(LD, 0, 0, 4), (JEQ, 0, 3, 0xC000003E), (LD, 0, 0, 0), (JEQ, 0, 1, 272), (RET, 0, 0, 0x00050000 | 1),
           (RET, 0, 0, 0x7FFF0000)]
code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in program))
fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(code))
fprog_buf = ctypes.create_string_buffer(fprog)
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(22, 2, fprog_buf, 0, 0) != 0:
    sys.exit("seccomp: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"""


@needs_landlock
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter below is written for x86_64")
@pytest.mark.timeout(90)
async def test_where_the_kernel_refuses_a_mount_namespace_commands_run_as_before_and_the_log_and_doctor_say_so(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The fallback of issue 20 item 5: with unshare(2) refused (a root server in a container whose seccomp profile
    refuses it), commands still run, Landlock still refuses writes outside the workspace (EACCES) and the capabilities
    are still dropped, but chmod outside it works: the server's log says so once, and `doctor` warns, with why."""
    user_for("root")
    base = Path(tempfile.mkdtemp(prefix="acp-sandbox-privileges-", dir=OUTSIDE_TMP))
    try:
        root, extra, elsewhere = base / "root", base / "extra", base / "elsewhere"
        for path in (root, extra, elsewhere):
            path.mkdir()
        victim = elsewhere / "victim"
        victim.write_text("mine\n")
        os.chmod(victim, 0o644)
        refused = [sys.executable, "-c", REFUSE_UNSHARE]
        env = {"TMPDIR": str(tmp_path)}
        client = await start_server(env=env, cwd=str(root), command=[*refused, *server_command(*DEFAULT_ARGS)])
        await client.initialize()
        session_id = await session_in(client, root, extra)
        write, chmod, status = await run_all(
            client,
            session_id,
            [f"echo x > {elsewhere}/f", f"chmod 600 {victim}", "grep -E '^CapEff:' /proc/self/status"],
        )
        assert write[0] not in (0, None) and "Permission denied" in write[1], write
        assert not (elsewhere / "f").exists()
        assert chmod[0] == 0 and victim.stat().st_mode & 0o777 == 0o600, chmod  # what stays open without it
        kept = sum(1 << cap for cap in KEPT_CAPABILITIES) & _own_bounding_set()
        assert _status(status[1]) == {"CapEff": kept}, status
        code, _ = await client.close()
        assert code == 0
        said = "sandbox: no read-only mount namespace for commands (unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not"
        assert client.stderr_text.count(said) == 1, client.stderr_text

        line = await doctor_sandbox_line(refused, DEFAULT_ARGS, env)
        assert line.startswith("WARN sandbox:") and "metadata NOT protected outside the writable directories" in line
        assert "Operation not permitted" in line, line
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_landlock
@pytest.mark.timeout(60)
async def test_a_writable_directory_a_command_replaced_by_a_link_gives_no_rights_where_the_link_leads(
    start_server: StartServer, arena: Arena
) -> None:
    """An additional directory inside the session's cwd (`a/b`) lies in a writable directory, so a command can swap a
    directory on its way for a link to anywhere (`mv a old; ln -s /etc a`; the directory itself, a mount point in the
    command's namespace, cannot be removed); Landlock's rule and the bind mount for the next command would follow
    the link and grant writes where it leads. The launcher drops a writable directory reached through another one:
    its real contents stay writable through the outer one, the link's target gets nothing, and the output says why."""
    nested = arena.root / "a" / "b"
    target = arena.elsewhere / "b"
    for path in (nested.parent, nested, target):
        path.mkdir()
        os.chown(path, arena.user.uid, arena.user.gid)
        os.chmod(path, 0o755)
    client = await start(start_server, arena)
    session_id = await session_in(client, arena.root, nested)
    real, plant, escape = await run_all(
        client,
        session_id,
        [
            f"echo ok > {nested}/f && cat {nested}/f",
            f"mv {arena.root}/a {arena.root}/old && ln -s {arena.elsewhere} {arena.root}/a && echo planted",
            f"echo evil > {nested}/g; chmod 777 {nested}",
        ],
    )
    assert real[0] == 0 and "ok" in real[1], real
    assert plant[0] == 0 and "planted" in plant[1], plant
    assert escape[0] not in (0, None), escape
    assert f"{nested} is NOT writable: it lies inside {arena.root}" in escape[1], escape
    assert list(target.iterdir()) == []
    assert target.stat().st_mode & 0o777 == 0o755


@needs_landlock
@pytest.mark.timeout(60)
async def test_a_writable_directory_reached_through_a_link_is_pinned_where_it_led_when_the_session_was_made(
    start_server: StartServer, arena: Arena
) -> None:
    """The reviewer's escape: the additional directory (`extra/shared`) is a link into the cwd (`root/vendor/shared`),
    which the user made: commands write there through it. A command then swaps a directory on the way for a real one
    holding a link to anywhere (`mv vendor vendor.old; mkdir vendor; ln -s elsewhere vendor/shared`). The server
    resolved the session's directories when the session was made, and the launcher reaches each without following a
    link: the next command may not write in, nor chmod, where the link now leads, and its output says why."""
    shared = arena.root / "vendor" / "shared"
    link = arena.extra / "shared"
    for path in (shared.parent, shared):
        path.mkdir()
        os.chown(path, arena.user.uid, arena.user.gid)
    link.symlink_to(shared)
    os.chown(link, arena.user.uid, arena.user.gid, follow_symlinks=False)
    os.chmod(arena.elsewhere, 0o755)
    client = await start(start_server, arena)
    session_id = await session_in(client, arena.root, link)
    legit, plant, escape = await run_all(
        client,
        session_id,
        [
            f"echo ok > {link}/f && cat {link}/f",
            f"mv vendor vendor.old && mkdir vendor && ln -s {arena.elsewhere} vendor/shared && echo planted",
            f"echo evil > {link}/g; chmod 777 {link}/; echo evil > {arena.elsewhere}/h",
        ],
    )
    assert legit[0] == 0 and "ok" in legit[1], legit
    assert (arena.root / "vendor.old" / "shared" / "f").read_text() == "ok\n"
    assert plant[0] == 0 and "planted" in plant[1], plant
    assert escape[0] not in (0, None), escape
    assert f"{shared} is NOT writable" in escape[1], escape
    assert list(arena.elsewhere.iterdir()) == []
    assert arena.elsewhere.stat().st_mode & 0o777 == 0o755


@needs_landlock
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter below is written for x86_64")
@pytest.mark.timeout(90)
async def test_without_a_mount_namespace_a_writable_directory_swapped_for_a_link_gives_no_rights_where_it_leads(
    start_server: StartServer, tmp_path: Path
) -> None:
    """As above where the kernel refuses a mount namespace (a root server under a seccomp profile refusing
    unshare(2)): nothing is a mount point, so a plain `rm -r` then `ln -s` swaps the linked-to directory itself; the
    launcher, reaching it without following a link, grants no write where the link leads (chmod is not governed
    there without the namespace, as doctor says)."""
    user_for("root")
    base = Path(tempfile.mkdtemp(prefix="acp-sandbox-privileges-", dir=OUTSIDE_TMP))
    try:
        root, extra, elsewhere = base / "root", base / "extra", base / "elsewhere"
        for path in (root, extra, elsewhere):
            path.mkdir()
        os.chmod(elsewhere, 0o755)
        shared = root / "vendor" / "shared"
        shared.mkdir(parents=True)
        link = extra / "shared"
        link.symlink_to(shared)
        refused = [sys.executable, "-c", REFUSE_UNSHARE]
        client = await start_server(
            env={"TMPDIR": str(tmp_path)}, cwd=str(root), command=[*refused, *server_command(*DEFAULT_ARGS)]
        )
        await client.initialize()
        session_id = await session_in(client, root, link)
        legit, plant, escape = await run_all(
            client,
            session_id,
            [
                f"echo ok > {link}/f && cat {link}/f",
                f"rm -r vendor/shared && ln -s {elsewhere} vendor/shared && echo planted",
                # No chmod: without the mount namespace, metadata is not protected anywhere (see above).
                f"echo evil > {link}/g; echo evil > {elsewhere}/h",
            ],
        )
        assert legit[0] == 0 and "ok" in legit[1], legit
        assert plant[0] == 0 and "planted" in plant[1], plant
        assert escape[0] not in (0, None), escape
        assert f"{shared} is NOT writable" in escape[1], escape
        assert list(elsewhere.iterdir()) == []
        code, _ = await client.close()
        assert code == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Listeners:
    """What a command without the network must not reach, all the test's own: a UDP server and a TCP listener on
    127.0.0.1, a Unix socket under an abstract name (per network namespace) and one by path (a file: still reached)."""

    udp: socket.socket
    tcp: socket.socket
    abstract: socket.socket
    abstract_name: str
    by_path: socket.socket
    path: Path

    def received_udp(self) -> list[bytes]:
        """The datagrams that arrived (a datagram over loopback is queued before the sender's sendto returns)."""
        found = []
        while True:
            try:
                found.append(self.udp.recv(4096))
            except BlockingIOError:
                return found

    def accepted(self, listener: socket.socket) -> bool:
        try:
            listener.accept()[0].close()
        except BlockingIOError:
            return False
        return True


@pytest.fixture
def listeners(arena: Arena) -> Iterator[Listeners]:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    name = f"acp-test-{uuid.uuid4().hex}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0{name}")
    abstract.listen(4)
    path = arena.elsewhere / "s.sock"
    by_path = socket.socket(socket.AF_UNIX)
    by_path.bind(str(path))
    by_path.listen(4)
    os.chmod(path, 0o777)  # connecting needs write permission on the socket file, for `nobody` too
    made = Listeners(udp, tcp, abstract, name, by_path, path)
    for sock in (udp, tcp, abstract, by_path):
        sock.setblocking(False)
    try:
        yield made
    finally:
        for sock in (udp, tcp, abstract, by_path):
            sock.close()


def _python(user: User) -> str:
    """An interpreter the arena's user may run (the server's own)."""
    return user.prefix[-1] if user.prefix else sys.executable


def _unix_connect(python: str, address: str) -> str:
    return f"{python} -c \"import socket; socket.socket(socket.AF_UNIX).connect({address!r}); print('connected')\""


# Inside the command: a UDP server on its own 127.0.0.1 and a datagram to it (the loopback the launcher brings up).
OWN_LOOPBACK = (
    "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', 0)); "
    "s.settimeout(5); s.sendto(b'own', s.getsockname()); print('loopback', s.recv(9).decode())"
)


@needs_landlock
@pytest.mark.timeout(90)
async def test_without_the_network_a_command_reaches_no_udp_tcp_or_abstract_unix_socket_and_with_it_udp_arrives(
    start_server: StartServer, arena: Arena, listeners: Listeners
) -> None:
    """`--no-sandbox-network`: the command runs in a network namespace of its own (Landlock ABI 7 cannot refuse UDP):
    a datagram to the test's UDP server on 127.0.0.1 (bash's /dev/udp, as DNS would go) never arrives, a TCP
    connection and one to the test's abstract Unix socket are refused, a Unix socket by path is still reached (a
    path is a file, not a network name: as docs/sandbox.md says), and the command's own loopback carries UDP (TCP
    stays refused by Landlock, even there). With the
    network, the same datagram arrives. `doctor` names each of these."""
    if not network_isolation(landlock_support().package_dir).ok:
        pytest.fail(f"no network namespace here: {network_isolation(landlock_support().package_dir).reason}")
    python = _python(arena.user)
    port = listeners.udp.getsockname()[1]
    send_udp = f"bash -c 'echo leak > /dev/udp/127.0.0.1/{port}'; echo ran"
    closed = await start(start_server, arena, "--no-sandbox-network")
    session_id = await session_in(closed, arena.root, arena.extra)
    udp, tcp, abstract, by_path, own, own_tcp = await run_all(
        closed,
        session_id,
        [
            send_udp,
            f"bash -c 'echo leak > /dev/tcp/127.0.0.1/{listeners.tcp.getsockname()[1]}'",
            _unix_connect(python, f"\0{listeners.abstract_name}"),
            _unix_connect(python, str(listeners.path)),
            f'{python} -c "{OWN_LOOPBACK}"',
            f"{python} -c \"import socket; socket.socket().bind(('127.0.0.1', 0)); print('bound')\"",
        ],
    )
    assert "ran" in udp[1], udp
    assert listeners.received_udp() == [], udp
    assert tcp[0] not in (0, None) and not listeners.accepted(listeners.tcp), tcp
    assert abstract[0] not in (0, None) and not listeners.accepted(listeners.abstract), abstract
    assert by_path[0] == 0 and "connected" in by_path[1] and listeners.accepted(listeners.by_path), by_path
    assert own[0] == 0 and "loopback own" in own[1], own
    # TCP stays Landlock's to refuse, even on the command's own loopback (a test suite's local server cannot listen).
    assert own_tcp[0] not in (0, None) and "PermissionError" in own_tcp[1], own_tcp
    code, _ = await closed.close()
    assert code == 0
    assert "no network namespace" not in closed.stderr_text, closed.stderr_text

    with anyio.fail_after(scaled(60)):
        report = await anyio.run_process(
            arena.user.command("doctor", "--timeout", "1", "--no-sandbox-network", *DEFAULT_ARGS),
            env={**os.environ, **isolated_env(), **arena.env()},
            cwd=str(arena.root),
            check=False,
        )
    lines = report.stderr.decode(errors="replace").splitlines()
    (line,) = [line for line in lines if line.startswith(("OK   sandbox:", "WARN sandbox:", "FAIL sandbox:"))]
    assert "network off: UDP (DNS included), TCP and abstract Unix sockets reach nothing outside" in line, line
    assert "Unix sockets by path are still reached" in line and "UDP NOT restricted" not in line, line

    opened = await start(start_server, arena)
    (sent,) = await run_all(opened, await session_in(opened, arena.root, arena.extra), [send_udp])
    assert "ran" in sent[1] and listeners.received_udp() == [b"leak\n"], sent


@needs_landlock
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter below is written for x86_64")
@pytest.mark.timeout(90)
async def test_where_the_kernel_refuses_a_network_namespace_tcp_is_still_refused_and_the_log_and_doctor_say_udp_is_not(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The fallback: with unshare(2) refused (a root server in a container whose seccomp profile refuses it), a
    command without the network still runs and Landlock still refuses TCP, but its datagram arrives: the server's log
    says so once, and `doctor` warns, with why."""
    user_for("root")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    try:
        udp.bind(("127.0.0.1", 0))
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        udp.settimeout(scaled(5))
        refused = [sys.executable, "-c", REFUSE_UNSHARE]
        env = {"TMPDIR": str(tmp_path)}
        args = (*DEFAULT_ARGS, "--no-sandbox-network")
        client = await start_server(env=env, cwd=str(tmp_path), command=[*refused, *server_command(*args)])
        await client.initialize()
        session_id = await session_in(client, tmp_path, tmp_path)
        sent, connect = await run_all(
            client,
            session_id,
            [
                f"bash -c 'echo gap > /dev/udp/127.0.0.1/{udp.getsockname()[1]}'",
                f"bash -c 'echo leak > /dev/tcp/127.0.0.1/{tcp.getsockname()[1]}'",
            ],
        )
        assert sent[0] == 0 and udp.recv(4096) == b"gap\n", sent  # what stays open without the namespace
        assert connect[0] not in (0, None) and "Permission denied" in connect[1], connect
        code, _ = await client.close()
        assert code == 0
        said = "sandbox: no network namespace for commands (unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not"
        assert client.stderr_text.count(said) == 1, client.stderr_text

        line = await doctor_sandbox_line(refused, args, env)
        assert line.startswith("WARN sandbox:") and "network off (TCP connections and listening refused)" in line
        assert "UDP NOT restricted (DNS included)" in line and "Operation not permitted" in line, line
    finally:
        udp.close()
        tcp.close()
