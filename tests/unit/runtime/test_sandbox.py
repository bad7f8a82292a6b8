"""The sandbox's decisions (runtime/sandbox.py) and its launcher (runtime/sandbox_exec.py) run for real: what is
chosen where no sandbox can be had, the launcher's command line, that it fails closed, and that nothing a command
leaves in its working directory can stand in for the real landlockpy."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from acp_server.runtime.ports import CommandResult
from acp_server.runtime.sandbox import Sandbox, Support, describe, landlock_support, sandbox_for
from acp_server.runtime.sandbox_exec import CANNOT_CONFINE
from acp_server.runtime.tools.commands import _report
from acp_server.settings.config import Config, SandboxMode
from tests.support.harness import scaled

SUPPORTED = landlock_support()
needs_landlock = pytest.mark.skipif(SUPPORTED.abi < 1, reason=f"no Landlock on this machine: {SUPPORTED.reason}")
NONE = Support(0, "this kernel (4.19) has no Landlock")


def test_where_the_kernel_has_no_landlock_commands_run_unconfined_and_the_log_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        assert sandbox_for(Config(), NONE) is None
    (record,) = caplog.records
    assert "no sandbox for commands: this kernel (4.19) has no Landlock" in record.getMessage()
    assert "full rights" in record.getMessage()
    active, words = describe(Config(), NONE)
    assert not active and words.startswith("not possible here: this kernel (4.19) has no Landlock")


def test_sandbox_off_is_no_sandbox_and_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        assert sandbox_for(Config(sandbox=SandboxMode.OFF), Support(7, package_dir="/x")) is None
    assert caplog.records == []
    assert describe(Config(sandbox=SandboxMode.OFF), Support(7)) == (
        False,
        "off: local commands run with your full rights",
    )


def test_a_kernel_that_cannot_refuse_tcp_is_said_to_leave_the_network_open(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="acp_server.runtime.sandbox"):
        sandbox = sandbox_for(Config(sandbox_network=False), Support(3, package_dir="/x"))
    assert sandbox is not None and not sandbox.network
    assert "network NOT restricted" in caplog.records[0].getMessage()
    complete, words = describe(Config(sandbox_network=False), Support(3, package_dir="/x"))
    assert not complete and "workspace-write through Landlock ABI 3" in words  # doctor's WARN: half of what was asked


def test_the_launcher_gets_the_roots_and_temp_dirs_in_workspace_write_and_nothing_in_read_only(tmp_path: Path) -> None:
    workspace = Sandbox(SandboxMode.WORKSPACE_WRITE, True, 7, "/pkgs").command(["/bin/sh", "-c", "x"], [tmp_path])
    assert workspace[1:3] == ["-I", "-S"]  # no environment, no site-packages, no current directory on its path
    assert f"--write={tmp_path}" in workspace and "--write=/tmp" in workspace
    assert workspace[-4:] == ["--", "/bin/sh", "-c", "x"]
    assert "--no-network" not in workspace
    read_only = Sandbox(SandboxMode.READ_ONLY, False, 7, "/pkgs").command(["/bin/sh", "-c", "x"], [tmp_path])
    assert not [arg for arg in read_only if arg.startswith("--write")]
    assert "--no-network" in read_only


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
