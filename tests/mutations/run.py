"""Re-check that every hand-made cancel bug in this folder still turns its tests red.

Each `NN-slug.patch` starts with free text (what the bug is, which invariant) and lines `Tests: path::name`, then a
plain `git diff` of the bug (`git apply` skips the leading text). For each patch the runner applies it to the working
tree, runs the named tests with this interpreter, expects them to fail, and reverts the patch whatever happened.

    python -m tests.mutations.run          # every patch
    python -m tests.mutations.run 03 07    # only these
    python -m tests.mutations.run --baseline   # first check each patch's tests pass without the bug

One line per patch: CAUGHT (the tests failed), MISSED (they passed with the bug in: the proof is gone), DOES NOT
APPLY (the code moved; refresh the patch), and with `--baseline` RED WITHOUT THE BUG (the tests fail anyway, e.g. on
a machine too loaded for their safety bounds, so a failure would prove nothing). Exit status 1 unless every patch
was caught. Not part of CI: it runs the named tests once per patch (twice with `--baseline`), and refuses to go on
while acp_server/ has uncommitted changes, since reverting a patch must give back exactly the committed code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CODE = "acp_server"


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def tests_of(patch: Path) -> list[str]:
    """The `Tests:` lines of the patch's leading text (everything before the diff)."""
    tests = []
    for line in patch.read_text().splitlines():
        if line.startswith("diff --git"):
            break
        if line.startswith("Tests:"):
            tests.append(line.removeprefix("Tests:").strip())
    return tests


def code_is_clean() -> bool:
    status = git("status", "--porcelain", "--", CODE)
    return status.returncode == 0 and not status.stdout.strip()


def run_tests(tests: list[str]) -> bool:
    """True if the tests pass."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *tests]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False).returncode == 0


def check(patch: Path, baseline: bool) -> str:
    tests = tests_of(patch)
    if not tests:
        return "DOES NOT APPLY (no Tests: line)"
    if baseline and not run_tests(tests):
        return "RED WITHOUT THE BUG"
    if git("apply", "--check", str(patch)).returncode != 0:
        return "DOES NOT APPLY"
    if git("apply", str(patch)).returncode != 0:
        return "DOES NOT APPLY"
    try:
        passed = run_tests(tests)
    finally:
        reverted = git("apply", "-R", str(patch))
        if reverted.returncode != 0:
            raise SystemExit(f"{patch.name}: could not revert the patch: {reverted.stderr.strip()}")
    return "MISSED" if passed else "CAUGHT"


def main(argv: list[str]) -> int:
    baseline = "--baseline" in argv
    argv = [arg for arg in argv if arg != "--baseline"]
    patches = sorted(HERE.glob("[0-9][0-9]-*.patch"))
    if argv:
        wanted = set(argv)
        patches = [p for p in patches if p.name[:2] in wanted]
        unknown = wanted - {p.name[:2] for p in patches}
        if unknown:
            print(f"no patch numbered {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    failed = False
    for patch in patches:
        if not code_is_clean():  # checked before every patch: a revert must give back exactly the committed code
            print(f"{CODE}/ has uncommitted changes: commit or stash them first", file=sys.stderr)
            return 2
        outcome = check(patch, baseline)
        failed |= outcome != "CAUGHT"
        print(f"{patch.name}: {outcome}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
