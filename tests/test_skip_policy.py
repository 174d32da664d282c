"""The skip policy (tests/skip_policy.py) run by a real pytest on small test files: an unallowed skip,
xfail or xpass fails the run and is named; allowed ones do not; "local" entries apply only when asked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.skip_policy import DEFAULT_ALLOW_LIST, PLUGIN_NAME, load_allow_list

REPO = Path(__file__).resolve().parents[1]

ALLOW_LIST = """
[[allow]]
test = "test_outcomes.py::test_allowed_everywhere"
reason = "no mount in this sandbox"
runs = "all"
why = "a fact of the machine"

[[allow]]
marker = "needs_tool"
reason = "the tool is missing"
runs = "local"
why = "CI installs the tool"

[[allow]]
test = "test_outcomes.py::test_x*"
reason = "known bug"
runs = "all"
why = "xfail allowed by the same list; an xpass never is"
"""

OUTCOMES = """
import pytest

def test_passes():
    pass

def test_allowed_everywhere():
    pytest.skip("no mount in this sandbox")

@pytest.mark.needs_tool
def test_allowed_locally():
    pytest.skip("the tool is missing")

def test_unallowed():
    pytest.skip("someone forgot to finish this")

@pytest.mark.needs_tool
def test_allowed_marker_other_reason():
    pytest.skip("the network is down")

@pytest.mark.xfail(reason="known bug")
def test_xfail_allowed():
    assert False

@pytest.mark.xfail(reason="not yet")
def test_unlisted_xfail():
    assert False

@pytest.mark.xfail(reason="known bug")
def test_xpass():
    pass
"""


def _pytest(tmp_path: Path, files: dict[str, str], *, mode: str, allow_list: str = ALLOW_LIST):
    for name, body in files.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    (tmp_path / "allowed.toml").write_text(allow_list)
    env = dict(os.environ, PYTHONPATH=str(REPO), RLJOB_SKIP_POLICY=mode, RLJOB_ALLOWED_SKIPS=str(tmp_path / "allowed.toml"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.skip_policy", "-p", "no:cacheprovider", "-q", *files],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _named(output: str) -> set[str]:
    """The node ids the policy's summary lists as unallowed."""
    section = output.split("skip policy: outcomes no entry of the allow-list permits", 1)[-1]
    return {
        line.split(" ", 2)[1].rstrip(":") for line in section.splitlines() if line.split(" ", 1)[0] in ("SKIPPED", "XFAILED", "XPASSED")
    }


def test_a_strict_run_fails_on_every_unallowed_outcome_and_names_each(tmp_path):
    done = _pytest(tmp_path, {"test_outcomes.py": OUTCOMES}, mode="strict")
    assert done.returncode == 1, done.stdout
    assert _named(done.stdout) == {
        "test_outcomes.py::test_allowed_locally",  # a "local" entry does not apply to a strict run
        "test_outcomes.py::test_unallowed",
        "test_outcomes.py::test_allowed_marker_other_reason",  # the marker matches, the reason does not
        "test_outcomes.py::test_unlisted_xfail",
        "test_outcomes.py::test_xpass",  # a stale xfail marker, whatever the list says
    }, done.stdout
    assert "5 unallowed (policy strict)" in done.stdout and "RLJOB_SKIP_POLICY=local" in done.stdout


def test_a_local_run_also_permits_local_entries(tmp_path):
    only_allowed = """
        import pytest

        def test_allowed_everywhere():
            pytest.skip("no mount in this sandbox")

        @pytest.mark.needs_tool
        def test_allowed_locally():
            pytest.skip("the tool is missing")
    """
    local = _pytest(tmp_path, {"test_outcomes.py": only_allowed}, mode="local")
    assert local.returncode == 0, local.stdout
    assert "2 skipped" in local.stdout and "skip policy" not in local.stdout
    strict = _pytest(tmp_path, {"test_outcomes.py": only_allowed}, mode="strict")
    assert strict.returncode == 1 and _named(strict.stdout) == {"test_outcomes.py::test_allowed_locally"}, strict.stdout


def test_a_module_level_skip_is_caught(tmp_path):
    module_skip = """
        import pytest

        pytest.importorskip("a_module_that_is_not_installed")

        def test_never_collected():
            pass
    """
    done = _pytest(tmp_path, {"test_gone.py": module_skip, "test_other.py": "def test_ok():\n    pass\n"}, mode="strict")
    assert done.returncode == 1, done.stdout
    assert _named(done.stdout) == {"test_gone.py"}, done.stdout


def test_a_failing_run_keeps_its_own_exit_status(tmp_path):
    failing = 'import pytest\n\ndef test_fails():\n    assert False\n\ndef test_skips():\n    pytest.skip("why not")\n'
    done = _pytest(tmp_path, {"test_outcomes.py": failing}, mode="strict")
    assert done.returncode == 1 and _named(done.stdout) == {"test_outcomes.py::test_skips"}, done.stdout


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ('[[allow]]\ntest = "x"\nreason = "r"\nruns = "ci"\nwhy = "w"\n', '`runs` must be "all" or "local"'),
        ('[[allow]]\ntest = "x"\nreason = "r"\nruns = "all"\n', "`reason` (a regex) and `why` are required"),
        ('[[allow]]\nreason = "r"\nruns = "all"\nwhy = "w"\n', "needs `test` (a node-id glob) or `marker`"),
        ('[[allow]]\ntest = "x"\nreason = "("\nruns = "all"\nwhy = "w"\n', "is not a regular expression"),
        ('[[allow]]\ntests = "x"\nreason = "r"\nruns = "all"\nwhy = "w"\n', "unknown keys ['tests']"),
    ],
)
def test_a_malformed_allow_list_entry_is_refused_by_name(tmp_path, entry, problem):
    with pytest.raises(pytest.UsageError, match="#1") as err:
        path = tmp_path / "allowed.toml"
        path.write_text(entry)
        load_allow_list(path)
    assert problem in str(err.value)


def test_an_unknown_policy_mode_stops_the_run(tmp_path):
    done = _pytest(tmp_path, {"test_outcomes.py": "def test_ok():\n    pass\n"}, mode="lenient")
    assert done.returncode != 0 and "RLJOB_SKIP_POLICY='lenient'" in done.stderr + done.stdout


def test_this_suite_runs_under_the_policy_with_the_repository_allow_list(pytestconfig):
    policy = pytestconfig.pluginmanager.get_plugin(PLUGIN_NAME)
    assert policy is not None, "tests/conftest.py no longer installs the skip policy"
    entries = load_allow_list(DEFAULT_ALLOW_LIST)
    assert {(a.test, a.marker, a.runs) for a in entries} == {
        ("tests/storage/test_preflight.py::test_read_only_local_output_is_refused", None, "all"),
        (None, "browser", "local"),
        (None, "postgres", "local"),
    }


def test_scripts_test_sh_runs_the_policy_strict():
    script = (REPO / "scripts" / "test.sh").read_text()
    assert "export RLJOB_SKIP_POLICY=strict" in script
