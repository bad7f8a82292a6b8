"""The PostgreSQL store's URL as a setting (settings/store_url.py): a wrong one is refused without ever repeating it
(it may carry a password), a wrong one in the config file keeps sessions in memory rather than in a local file no
other replica sees, its password is one of the secrets the server holds (redacted from transcripts), and the URL's
variable and libpq's password variables never reach a child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from acp_server.runtime.child_env import ChildEnvPolicy, child_environment
from acp_server.settings.command_line import load
from acp_server.settings.store_url import redact_store_url, store_url_passwords

pytestmark = pytest.mark.timeout(30)

SECRET = "hunter2-very-secret"


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--store-url", f"mysql://root:{SECRET}@db/acp"], {}, "--store-url"),
        ([], {"ACP_SERVER_STORE_URL": f"sqlite:///x?password={SECRET}"}, "ACP_SERVER_STORE_URL"),
        ([], {"ACP_SERVER_STORE_URL": f"postgresql://u:{SECRET}@db:port/acp"}, "ACP_SERVER_STORE_URL"),
    ],
    ids=["flag", "variable", "port"],
)
def test_a_wrong_store_url_is_a_usage_error_that_never_repeats_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], env: dict[str, str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        load(flags, env={"ACP_SERVER_CONFIG": str(tmp_path / "none.toml"), **env})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "postgresql://" in err
    assert SECRET not in err


def test_a_wrong_store_url_in_the_file_is_reported_and_keeps_sessions_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'store_url = "mysql://root:{SECRET}@db/acp"\n')
    loaded = load([], env={"ACP_SERVER_CONFIG": str(path)})
    assert (loaded.config.store, loaded.config.store_url) == (False, None)
    [problem] = loaded.file.problems
    assert problem.key == "store_url" and "kept in memory only" in problem.message
    assert SECRET not in str(problem)


def test_the_password_is_held_as_a_secret_and_the_store_variables_never_reach_a_child(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'store_url = "postgresql://acp:{SECRET}-file@db/acp"\n')
    env = {
        "ACP_SERVER_CONFIG": str(path),
        "ACP_SERVER_STORE_URL": f"postgresql://acp:{SECRET}-env@db/acp",
        "PGPASSWORD": f"{SECRET}-libpq",
        "PGPASSFILE": "/home/someone/.pgpass",
        "PGHOST": "db.internal",
    }
    config = load(["--store-url", f"postgresql://acp:{SECRET}%2Dflag@db/acp"], env=env).config
    assert config.store_url == f"postgresql://acp:{SECRET}%2Dflag@db/acp"
    held = set(config.held_secrets)
    assert {f"{SECRET}-file", f"{SECRET}-env", f"{SECRET}-libpq", f"{SECRET}-flag", f"{SECRET}%2Dflag"} <= held
    assert "store_url=" not in repr(config)  # a Config in a log line or a traceback shows no URL
    child = child_environment(ChildEnvPolicy.from_config(config), env)
    assert set(child) == {"ACP_SERVER_CONFIG", "PGHOST"}


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://acp:pa%40ss@db:5432/acp", "postgresql://acp:***@db:5432/acp"),
        ("postgresql://acp@db/acp?sslmode=require&password=x1", "postgresql://acp@db/acp?sslmode=require&password=***"),
        ("postgresql://db/acp", "postgresql://db/acp"),
        ("postgresql://[::1]:5432/acp", "postgresql://[::1]:5432/acp"),
    ],
)
def test_a_store_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redact_store_url(url) == shown


def test_every_form_of_the_password_is_found() -> None:
    assert store_url_passwords("postgresql://u:a%40b@h/d?password=c") == ["a%40b", "a@b", "c"]
    assert store_url_passwords("postgresql://u@h/d") == []


def test_reading_a_store_url_imports_no_database_driver() -> None:
    code = (
        "import sys\n"
        "from acp_server.settings.command_line import load\n"
        "load(['--store-url', 'postgresql://acp@db/acp'], env={'ACP_SERVER_CONFIG': '/nonexistent/config.toml'})\n"
        "print(','.join(m for m in ('psycopg', 'psycopg_pool', 'acp_server.store') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert result.stdout.strip() == ""
