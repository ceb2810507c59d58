"""Every example runs (a smoke test), every complete program in the README and docs/ runs, and the README's
commands are the ones CI runs."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[3]

SMOKE = {
    "quickstart.py": (["--workers", "2"], "fib(10) = 55"),
    "embed_in_wool.py": (["--workers", "4", "--callers", "2", "--tasks", "10"], "20 tasks ran on 2 of 4 workers"),
    "executor.py": (["--workers", "2", "--items", "200"], "and the executor goes on: 6"),
    "joblib_sklearn.py": (["--workers", "2"], "on an executor of your own: [1, 2, 4, 8, 16]"),
}
NEEDS = {"embed_in_wool.py": "wool", "joblib_sklearn.py": "sklearn"}
SERVERS = {
    "api_server.py": "tests/integration/examples/test_api_server.py",
    "jobs_api.py": "tests/integration/examples/test_jobs_api.py",
}
"""Examples that serve until stopped; each has its own test over the network."""


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_example_should_run_to_completion(script):
    if script in NEEDS:
        pytest.importorskip(NEEDS[script], reason=f"{script} needs the {NEEDS[script]} extra")
    args, expected = SMOKE[script]
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout


def test_every_python_example_should_have_a_smoke_test():
    scripts = {p.name for p in (ROOT / "examples").glob("*.py")}
    assert scripts == set(SMOKE) | set(SERVERS)
    assert all((ROOT / test).exists() for test in SERVERS.values())


def test_ci_should_run_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    marker = "# install PostgreSQL (for the store tests) and the test extras"
    assert marker in readme
    assert (
        "awk '/^# install PostgreSQL \\(for the store tests\\) and the test extras/"
        in (ROOT / ".ci" / "run").read_text()
    )


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAMS = [
    pytest.param(body, id=f"{page.name}-{index}")
    for page in PAGES
    for index, body in enumerate(re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.MULTILINE | re.DOTALL))
    if "asyncio.run(" in body
]
"""Blocks that are whole programs (they call ``asyncio.run``); the others are fragments, compiled by test_readme."""


def test_the_readme_should_show_a_complete_program():
    assert any(p.id.startswith("README.md") for p in PROGRAMS)


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_complete_program_in_the_docs_should_run(program, tmp_path):
    script = tmp_path / "program.py"
    script.write_text(program)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
