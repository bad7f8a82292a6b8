"""The sandbox's decisions (runtime/sandbox.py) and its launcher (runtime/sandbox_exec.py) run for real: what is
chosen where no sandbox can be had, the launcher's command line, that it fails closed, and that nothing a command
leaves in its working directory can stand in for the real landlockpy."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import acp_server
from acp_server.errors import ToolError
from acp_server.runtime import sandbox as sandbox_module
from acp_server.runtime import sandbox_exec
from acp_server.runtime.local_commands import LocalCommandRunner
from acp_server.runtime.ports import CommandResult
from acp_server.runtime.processes import ProcessTable
from acp_server.runtime.sandbox import (
    Sandbox,
    Support,
    Unconfined,
    describe,
    landlock_support,
    mount_isolation,
    sandbox_for,
)
from acp_server.runtime.sandbox_exec import CANNOT_CONFINE, PROBE_REFUSED
from acp_server.runtime.tools.commands import _report
from acp_server.settings.config import Config, SandboxMode
from tests.support.harness import scaled

SUPPORTED = landlock_support()
needs_landlock = pytest.mark.skipif(SUPPORTED.abi < 1, reason=f"no Landlock on this machine: {SUPPORTED.reason}")
NONE = Support(0, "this kernel (4.19) has no Landlock")


def _lies_in_tmp(path: str) -> bool:
    return any(Path(form).is_relative_to("/tmp") for form in (os.path.abspath(path), os.path.realpath(path)))


# Whether what the launcher runs before it confines itself (this checkout or site-packages, the interpreter, the
# standard library) lies in /tmp, as in a CI clone there: the sandbox must then never let commands write /tmp.
_LAUNCHER_IN_TMP = any(
    _lies_in_tmp(path)
    for path in (sys.executable, str(Path(acp_server.__file__).parent.parent), os.path.dirname(os.__file__))
)


@pytest.fixture
def temp_dir_without_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """For tests about something else: a temp directory that holds none of the launcher's code, so that a checkout
    under /tmp (a CI clone) adds no warning of its own (that one has tests of its own, below)."""
    monkeypatch.setattr(sandbox_module, "_temp_dirs", lambda: [str(tmp_path)])


def test_where_the_kernel_has_no_landlock_commands_run_unconfined_and_the_log_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        assert sandbox_for(Config(), NONE) == Unconfined("this kernel (4.19) has no Landlock", refuse=False)
    (record,) = caplog.records
    assert "no sandbox for commands: this kernel (4.19) has no Landlock" in record.getMessage()
    assert "full rights" in record.getMessage()
    level, words = describe(Config(), NONE)
    assert level == "warn" and words.startswith("not possible here: this kernel (4.19) has no Landlock")


def test_a_sandbox_asked_for_by_name_that_cannot_be_had_refuses_commands(caplog: pytest.LogCaptureFixture) -> None:
    config = Config(sandbox=SandboxMode.READ_ONLY, sandbox_explicit=True)
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        chosen = sandbox_for(config, NONE)
    assert isinstance(chosen, Unconfined) and chosen.refuse
    assert "the read-only sandbox was asked for but cannot be had: this kernel (4.19) has no Landlock" in chosen.reason
    assert "no command is run" in chosen.reason
    assert "refuses every command" in caplog.records[0].getMessage()
    level, words = describe(config, NONE)
    assert level == "fail" and "the read-only sandbox was asked for but cannot be had" in words


def test_sandbox_off_is_no_sandbox_and_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        assert sandbox_for(Config(sandbox=SandboxMode.OFF), Support(7, package_dir="/x")) is None
    assert caplog.records == []
    assert describe(Config(sandbox=SandboxMode.OFF), Support(7)) == (
        "warn",
        "off: local commands run with your full rights",
    )


@pytest.mark.usefixtures("temp_dir_without_code")
def test_a_kernel_that_cannot_refuse_tcp_is_said_to_leave_the_network_open(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        sandbox = sandbox_for(Config(sandbox_network=False), Support(3, package_dir="/x"))
    assert isinstance(sandbox, Sandbox) and not sandbox.network
    assert "network NOT restricted" in caplog.records[0].getMessage()
    level, words = describe(Config(sandbox_network=False), Support(3, package_dir="/x"))
    assert (
        level == "warn" and "workspace-write through Landlock ABI 3" in words
    )  # doctor's WARN: half of what was asked
    assert "Unix sockets by path NOT restricted" in words and "D-Bus" in words


@pytest.mark.usefixtures("temp_dir_without_code")
def test_what_an_old_kernel_leaves_open_is_a_warning_naming_it() -> None:
    level, words = describe(Config(), Support(2, package_dir="/x"))
    assert level == "warn" and "truncating files" in words and "NOT controlled" in words
    assert "Unix sockets" not in words  # the network was not to be closed
    level, words = describe(Config(sandbox_network=False), Support(8, package_dir="/x"))
    assert level == "warn" and "Unix sockets by path NOT restricted (ABI 9 can)" in words and "truncat" not in words
    level, words = describe(Config(sandbox_network=False), Support(9, package_dir="/x"))
    assert level == "ok" and "NOT" not in words


def test_the_launcher_gets_the_roots_and_temp_dirs_in_workspace_write_and_nothing_in_read_only(tmp_path: Path) -> None:
    workspace = Sandbox(SandboxMode.WORKSPACE_WRITE, True, 7, "/pkgs").command(["/bin/sh", "-c", "x"], [tmp_path])
    assert workspace[1:3] == ["-I", "-S"]  # no environment, no site-packages, no current directory on its path
    assert f"--write={tmp_path}" in workspace
    # /tmp is writable unless this checkout (the launcher's code, its interpreter) lies in it: then never (fail closed).
    assert ("--write=/tmp" in workspace) is not _LAUNCHER_IN_TMP
    assert workspace[-4:] == ["--", "/bin/sh", "-c", "x"]
    assert "--no-network" not in workspace
    read_only = Sandbox(SandboxMode.READ_ONLY, False, 7, "/pkgs").command(["/bin/sh", "-c", "x"], [tmp_path])
    assert not [arg for arg in read_only if arg.startswith("--write")]
    assert "--no-network" in read_only
    # The mount namespace only when the runner was told the kernel allows one here (mount_isolation), in both modes.
    assert "--mounts" not in workspace and "--mounts" not in read_only
    isolated = Sandbox(SandboxMode.READ_ONLY, True, 7, "/pkgs").command(["/bin/sh", "-c", "x"], [tmp_path], mounts=True)
    assert "--mounts" in isolated and isolated[-4:] == ["--", "/bin/sh", "-c", "x"]


def test_the_launcher_fails_closed_the_command_is_not_run(tmp_path: Path) -> None:
    argv = Sandbox(SandboxMode.WORKSPACE_WRITE, True, 7, SUPPORTED.package_dir).command(
        ["/bin/sh", "-c", "touch ran"], [tmp_path]
    )
    broken = [*argv[:5], "--bogus", *argv[5:]]
    result = subprocess.run(broken, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(30), check=False)
    assert result.returncode == CANNOT_CONFINE
    assert "cannot confine the command, so it was not run: unknown argument '--bogus'" in result.stderr
    assert not (tmp_path / "ran").exists()


@needs_landlock
def test_a_landlockpy_planted_in_the_working_directory_or_pythonpath_does_not_replace_the_real_one(
    tmp_path: Path,
) -> None:
    root, elsewhere = tmp_path / "root", Path("/var/tmp")
    (root / "landlockpy").mkdir(parents=True)
    (root / "landlockpy" / "__init__.py").write_text("raise SystemExit('the planted landlockpy ran')\n")
    target = elsewhere / f"acp-sandbox-plant-{tmp_path.name}"
    sandbox = Sandbox(SandboxMode.WORKSPACE_WRITE, True, SUPPORTED.abi, SUPPORTED.package_dir)
    try:
        result = subprocess.run(
            sandbox.command(["/bin/sh", "-c", f"echo escaped > {target}"], [root]),
            cwd=root,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=scaled(30),
            check=False,
        )
        assert "the planted landlockpy ran" not in result.stderr
        assert result.returncode != 0 and "Permission denied" in result.stderr, result
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)


def test_a_refused_write_tells_the_model_it_was_the_sandbox() -> None:
    denied = CommandResult("sh: 1: cannot create /etc/x: Permission denied\n", 2, sandbox="workspace-write")
    assert "it ran in the workspace-write sandbox: only the session's directories" in _report(denied, 10, ".")
    other = CommandResult("no such file\n", 2, sandbox="workspace-write")
    assert "sandbox" not in _report(other, 10, ".")
    unconfined = CommandResult("Permission denied\n", 1)
    assert "sandbox" not in _report(unconfined, 10, ".")
    by_default = CommandResult("ok\n", 0, unconfined="the landlockpy package cannot be imported")
    assert "NOT sandboxed: it ran with the user's full rights (the landlockpy package" in _report(by_default, 10, ".")


@needs_landlock
def test_a_writable_directory_holding_the_launchers_interpreter_or_code_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A command that could rewrite what the launcher runs before it confines itself (its interpreter, the server's
    code, landlockpy) would run every later command unconfined: such a directory is dropped from the rules."""
    tools = tmp_path / "tools"  # as ~/.cache with a uvx install in ~/.cache/uv: the interpreter lives inside
    (tools / "bin").mkdir(parents=True)
    (tools / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    monkeypatch.setattr(sys, "executable", str(tools / "bin" / "python"))
    sandbox_module._launcher_code.cache_clear()
    sandbox_module._safe_writable.cache_clear()
    cache = tmp_path / "cache"
    cache.mkdir()
    try:
        package_parent = str(Path(SUPPORTED.package_dir).parent)  # a directory that holds landlockpy's
        sandbox = Sandbox(
            SandboxMode.WORKSPACE_WRITE, True, SUPPORTED.abi, SUPPORTED.package_dir, (str(tools), package_parent)
        )
        with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
            argv = sandbox.command(["/bin/sh", "-c", f"echo evil > {tools}/bin/planted; echo ok > {cache}/f"], [cache])
        assert f"--write={cache}" in argv
        assert not [arg for arg in argv if arg in (f"--write={tools}", f"--write={package_parent}")], argv
        said = " ".join(record.getMessage() for record in caplog.records)
        assert f"commands may NOT write in {tools}: it holds or lies inside the interpreter" in said
        assert f"commands may NOT write in {package_parent}" in said and "the landlockpy package" in said
        problems = " ".join(sandbox.problems())
        assert f"{tools} NOT writable" in problems and f"{package_parent} NOT writable" in problems
        result = subprocess.run(argv, cwd=cache, capture_output=True, text=True, timeout=scaled(30), check=False)
        assert "Permission denied" in result.stderr, result
        assert not (tools / "bin" / "planted").exists()
        assert (cache / "f").read_text() == "ok\n"  # the rest of the rules hold
    finally:
        sandbox_module._launcher_code.cache_clear()
        sandbox_module._safe_writable.cache_clear()


@pytest.mark.usefixtures("temp_dir_without_code")
def test_a_writable_directory_that_does_not_exist_is_named_at_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        sandbox_for(Config(sandbox_writable=("/nonexistent/acp-cache",)), Support(7, package_dir="/x"))
    assert "sandbox_writable /nonexistent/acp-cache does not exist" in caplog.records[0].getMessage()


@needs_landlock
@pytest.mark.skipif(SUPPORTED.abi < 6, reason=f"Landlock ABI {SUPPORTED.abi} cannot scope signals (ABI 6 can)")
def test_a_sandboxed_command_cannot_signal_a_process_outside_it_but_can_its_own(tmp_path: Path) -> None:
    outside = subprocess.Popen(["sleep", "60"])
    try:
        sandbox = Sandbox(SandboxMode.WORKSPACE_WRITE, True, SUPPORTED.abi, SUPPORTED.package_dir)
        line = f"kill -TERM {outside.pid}; echo outside=$?; sleep 60 & kill -TERM $!; echo own=$?"
        result = subprocess.run(
            sandbox.command(["/bin/sh", "-c", line], [tmp_path]),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=scaled(30),
            check=False,
        )
        assert "outside=1" in result.stdout and "own=0" in result.stdout, result
        assert "Operation not permitted" in result.stderr, result
        assert outside.poll() is None  # still running: the signal never reached it
    finally:
        outside.kill()
        outside.wait()


@needs_landlock
def test_without_network_the_session_bus_address_is_not_passed_on(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1/bus"}
    said = []
    for network in (True, False):
        sandbox = Sandbox(SandboxMode.WORKSPACE_WRITE, network, SUPPORTED.abi, SUPPORTED.package_dir)
        result = subprocess.run(
            sandbox.command(["/bin/sh", "-c", "echo ${DBUS_SESSION_BUS_ADDRESS-unset}"], [tmp_path]),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(30),
            check=False,
        )
        said.append(result.stdout.strip())
    assert said == ["unix:path=/run/user/1/bus", "unset"]


@pytest.fixture
def code_in_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A temp directory that holds the server's own code, as a checkout or venv under /tmp does on CI: (the temp
    directory, the code in it)."""
    temp, code = tmp_path / "tmp", tmp_path / "tmp" / "ci13"
    code.mkdir(parents=True)
    monkeypatch.setattr(sandbox_module, "_temp_dirs", lambda: [str(temp)])
    monkeypatch.setattr(sandbox_module, "_launcher_code", lambda package_dir: (("the server's code", str(code)),))
    sandbox_module._safe_writable.cache_clear()
    yield temp, code
    sandbox_module._safe_writable.cache_clear()


def test_a_temp_directory_holding_the_servers_code_is_named_at_start_with_what_it_holds(
    code_in_temp: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Fail closed refuses the whole temp directory; the start-up log says which, and why, before any command."""
    temp, code = code_in_temp
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        sandbox_for(Config(), Support(7, package_dir="/x"))
    said = " ".join(record.getMessage() for record in caplog.records)
    assert f"the temp directory {temp} NOT writable: it holds or lies inside the server's code ({code})" in said
    level, words = describe(Config(), Support(7, package_dir="/x"))
    assert level == "warn" and f"the temp directory {temp} NOT writable" in words


def test_a_write_refused_in_a_temp_directory_holding_the_servers_code_tells_the_model_why(
    code_in_temp: tuple[Path, Path], tmp_path: Path
) -> None:
    """The refused write reads as a plain EACCES in the temp directory, which the note says is writable: it also
    names the directory and what it holds. A session root that is fine is not named."""
    temp, code = code_in_temp
    work = tmp_path / "work"
    work.mkdir()
    refused = Sandbox(SandboxMode.WORKSPACE_WRITE, True, 7, "/x").refused([work])
    assert len(refused) == 1 and refused[0].startswith(f"{temp} is NOT writable: it holds or lies inside the server's")
    denied = CommandResult(
        f"touch: cannot touch '{temp}/x': Permission denied\n", 1, sandbox="workspace-write", refused=refused
    )
    report = _report(denied, 10, ".")
    assert f"{temp} is NOT writable: it holds or lies inside the server's code ({code})" in report
    assert str(work) not in report
    assert Sandbox(SandboxMode.READ_ONLY, True, 7, "/x").refused([work]) == ()


@needs_landlock
async def test_a_command_refused_the_temp_directory_that_holds_the_servers_code_is_told_why(
    code_in_temp: tuple[Path, Path], tmp_path: Path
) -> None:
    """For real: the runner's result carries the refused directory, so the model reads why its write failed."""
    temp, code = code_in_temp
    work = tmp_path / "work"
    work.mkdir()
    sandbox = Sandbox(SandboxMode.WORKSPACE_WRITE, True, SUPPORTED.abi, SUPPORTED.package_dir)
    runner = LocalCommandRunner(ProcessTable(), lambda: anyio.current_time() + scaled(5), sandbox, (work,))

    async def anchor(terminal_id: str) -> None:
        pass

    with anyio.fail_after(scaled(30)):
        result = await runner.run(f"touch {temp}/x", work, None, anchor)
    assert result.exit_code != 0 and not (temp / "x").exists()
    report = _report(result, 10, ".")
    # Refused by the read-only mount namespace where there is one (EROFS), else by Landlock (EACCES).
    assert ("Read-only file system" if mount_isolation(SUPPORTED.package_dir).ok else "Permission denied") in report
    assert f"{temp} is NOT writable: it holds or lies inside the server's code ({code})" in report


@pytest.fixture
def fresh_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """No probe's answer kept, none said yet: as in a new process."""
    monkeypatch.setattr(sandbox_module, "_probes", sandbox_module._Probes())


@pytest.mark.usefixtures("fresh_probes")
def test_a_probe_that_fails_for_now_is_asked_again_and_a_definitive_answer_is_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A probe that timed out (a loaded machine: here for real, with a bound nothing meets) or met the
    user-namespace limit does not lower the sandbox for the rest of the process: the next command asks again. A
    success or the kernel's definitive refusal is kept. The "no" is said once per process."""
    monkeypatch.setattr(sandbox_module, "_PROBE_TIMEOUT", 1e-6)
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        first = mount_isolation(SUPPORTED.package_dir)
        assert not first.ok and not first.lasting and "timed out" in first.reason
        answers = iter(
            [
                sandbox_module.Isolation(False, "unshare(CLONE_NEWUSER|CLONE_NEWNS): No space left on device", False),
                sandbox_module.Isolation(False, "unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted"),
            ]
        )
        asked: list[str] = []

        def probe(package_dir: str, flag: str) -> sandbox_module.Isolation:
            asked.append(flag)
            return next(answers)

        monkeypatch.setattr(sandbox_module, "_probe", probe)
        assert not mount_isolation(SUPPORTED.package_dir).lasting  # asked again: the limit, for now
        refused = mount_isolation(SUPPORTED.package_dir)  # asked again: refused for good
        assert not refused.ok and refused.lasting
        assert mount_isolation(SUPPORTED.package_dir) is refused  # kept: not asked again
    assert asked == ["--probe-mounts", "--probe-mounts"]
    warnings = [r.getMessage() for r in caplog.records if "mount namespace" in r.getMessage()]
    assert len(warnings) == 1 and "asked again for the next command" in warnings[0], warnings


def test_the_launchers_probe_says_which_refusals_are_for_good() -> None:
    """The launcher's exit status tells a definitive refusal (kept by the server) from a failure for now."""
    code = (
        "import errno, sys\n"
        "from acp_server.runtime import sandbox_exec\n"
        "def isolate(*args, **kwargs):\n"
        "    raise OSError(int(sys.argv[1]), 'unshare(...)')\n"
        "sandbox_exec.isolate = isolate\n"
        "sandbox_exec.probe('--probe-mounts')\n"
    )
    statuses = {
        number: subprocess.run([sys.executable, "-c", code, str(number)], capture_output=True, check=False).returncode
        for number in (errno.EPERM, errno.ENOSYS, errno.EAGAIN, errno.ENOSPC)
    }
    assert sandbox_module._PROBE_REFUSED == PROBE_REFUSED
    assert statuses == {errno.EPERM: PROBE_REFUSED, errno.ENOSYS: PROBE_REFUSED, errno.EAGAIN: 1, errno.ENOSPC: 1}


@pytest.mark.usefixtures("fresh_probes")
@pytest.mark.parametrize("network", [True, False])
async def test_a_sandbox_asked_for_by_name_refuses_a_command_whose_namespace_probe_failed_for_now(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, network: bool
) -> None:
    """Asked for by name, the sandbox does not run a command less confined than the machine allows because a probe
    failed for now (here the network namespace's when the network is off, else the mount namespace's): the tool
    says why. A definitive refusal is what the machine offers: the command runs without that namespace."""

    def probe(package_dir: str, flag: str) -> sandbox_module.Isolation:
        failing = "--probe-mounts" if network else "--probe-network"
        if flag == failing:
            return sandbox_module.Isolation(False, "the probe could not run: timed out after 30 seconds", False)
        return sandbox_module.Isolation(True)

    monkeypatch.setattr(sandbox_module, "_probe", probe)
    sandbox = Sandbox(SandboxMode.WORKSPACE_WRITE, network, SUPPORTED.abi, SUPPORTED.package_dir, explicit=True)
    runner = LocalCommandRunner(ProcessTable(), lambda: anyio.current_time() + scaled(5), sandbox, (tmp_path,))

    async def anchor(terminal_id: str) -> None:
        pass

    with anyio.fail_after(scaled(30)), pytest.raises(ToolError) as refused:
        await runner.run(f"touch {tmp_path}/x", tmp_path, None, anchor)
    what = "read-only mount namespace" if network else "network namespace"
    assert f"the workspace-write sandbox was asked for, and its {what} could not be had just now" in str(refused.value)
    assert "timed out" in str(refused.value) and "not run" in str(refused.value)
    assert not (tmp_path / "x").exists()
    assert sandbox_module._sandbox(Config(sandbox_explicit=True), SUPPORTED).explicit
    # The same failure, lasting, or the mode left at its default: no refusal.
    lasting = sandbox_module.Isolation(False, "Operation not permitted")
    assert sandbox.refusal(lasting, None if network else lasting) is None
    failed = sandbox_module.Isolation(False, "timed out", False)
    assert Sandbox(SandboxMode.WORKSPACE_WRITE, network, 7, "/x").refusal(failed, failed) is None


@needs_landlock
def test_the_launcher_itself_refuses_a_writable_directory_holding_its_code_whatever_it_was_passed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The server's check (`_safe_writable`) is on the paths it passes, once; the launcher repeats it on every launch
    on what it grants (`pinned`): a directory that holds landlockpy (site-packages) is not writable even if passed."""
    import landlockpy

    site = os.path.dirname(os.path.dirname(os.path.realpath(landlockpy.__file__)))
    work = str(tmp_path.resolve())
    kept = sandbox_exec.pinned([site, work])
    for _, handle in kept:
        os.close(handle)
    assert [path for path, _ in kept] == [work]
    said = capfd.readouterr().err
    assert f"{site} is NOT writable: it holds or lies inside " in said and f"the landlockpy package ({site})" in said


# --- reads confined (`serve`: REMOTE.md decision 5) ---

# CI runs where Landlock is: there these fail instead of skipping.
needs_landlock_in_ci = pytest.mark.skipif(
    SUPPORTED.abi < 1 and os.environ.get("CI") != "true", reason=f"no Landlock on this machine: {SUPPORTED.reason}"
)


def _confined_reads(hidden: list[str]) -> Sandbox:
    return Sandbox(
        SandboxMode.WORKSPACE_WRITE,
        True,
        SUPPORTED.abi,
        SUPPORTED.package_dir,
        reads=sandbox_module.system_reads(),
        hidden=sandbox_module._identities(hidden),
    )


def _run_in(sandbox: Sandbox, root: Path, line: str, *, mounts: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sandbox.command(["/bin/sh", "-c", line], [root], mounts=mounts),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=scaled(30),
        check=False,
    )


@needs_landlock_in_ci
def test_with_reads_confined_a_command_reads_its_root_and_the_system_but_not_elsewhere(tmp_path: Path) -> None:
    elsewhere = Path(tempfile.mkdtemp(prefix="acp-sandbox-reads-", dir="/var/tmp"))
    try:
        (elsewhere / "secret").write_text("elsewhere-secret\n")
        root = tmp_path / "root"
        root.mkdir()
        (root / "mine").write_text("mine\n")
        sandbox = _confined_reads([])
        mounts = mount_isolation(SUPPORTED.package_dir).ok
        assert _run_in(sandbox, root, "cat mine && head -c 1 /dev/urandom | wc -c", mounts=mounts).stdout == "mine\n1\n"
        refused = _run_in(sandbox, root, f"cat {elsewhere}/secret", mounts=mounts)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
        # Without `reads`, as on stdio, everything may be read.
        everything = Sandbox(SandboxMode.WORKSPACE_WRITE, True, SUPPORTED.abi, SUPPORTED.package_dir)
        assert _run_in(everything, root, f"cat {elsewhere}/secret", mounts=mounts).stdout == "elsewhere-secret\n"
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


@needs_landlock_in_ci
def test_a_hidden_path_a_command_moved_or_that_cannot_be_covered_stops_every_command(tmp_path: Path) -> None:
    """The server's own directory inside a root commands may write: covered while it is where the server found
    it; once moved (to read it under another name), no command runs; nor where no mount namespace can cover it."""
    root = tmp_path / "root"
    state = root / "state"
    state.mkdir(parents=True)
    (state / "serve-token").write_text("the-token\n")
    sandbox = _confined_reads([str(state)])
    if mount_isolation(SUPPORTED.package_dir).ok:
        covered = _run_in(sandbox, root, "ls -A state; cat state/serve-token", mounts=True)
        assert "the-token" not in covered.stdout and covered.stdout == "", covered
        moved = _run_in(sandbox, root, "mv state moved", mounts=True)
        assert moved.returncode != 0  # a mount point cannot be moved inside the command's namespace ...
        state.rename(root / "moved")  # ... but the server's own files may move all the same (by anyone outside)
        after = _run_in(sandbox, root, "cat moved/serve-token", mounts=True)
        assert after.returncode == CANNOT_CONFINE and "the-token" not in after.stdout, after
        assert "the server's own" in after.stderr and "moved" in after.stderr, after
        (root / "moved").rename(state)
    uncovered = _run_in(sandbox, root, "cat state/serve-token", mounts=False)
    assert uncovered.returncode == CANNOT_CONFINE and "the-token" not in uncovered.stdout, uncovered
    assert "cannot be hidden" in uncovered.stderr, uncovered


@needs_landlock_in_ci
def test_a_root_a_command_swapped_for_a_link_does_not_make_the_links_target_readable(tmp_path: Path) -> None:
    elsewhere = Path(tempfile.mkdtemp(prefix="acp-sandbox-reads-", dir="/var/tmp"))
    try:
        (elsewhere / "secret").write_text("elsewhere-secret\n")
        root = tmp_path / "root"
        (root / "sub").mkdir(parents=True)  # an additional directory inside the cwd
        sandbox = _confined_reads([])
        mounts = mount_isolation(SUPPORTED.package_dir).ok

        def run(line: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                sandbox.command(["/bin/sh", "-c", line], [root, root / "sub"], mounts=mounts),
                cwd=root,
                capture_output=True,
                text=True,
                timeout=scaled(30),
                check=False,
            )

        assert run(f"rmdir sub && ln -s {elsewhere} sub").returncode == 0
        after = run("cat sub/secret")
        assert after.returncode != 0 and "elsewhere-secret" not in after.stdout, after
        assert "NOT readable" in after.stderr, after
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
