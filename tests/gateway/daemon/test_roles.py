"""What one `system start` runs (issue 38, "Roles"): `--role api|workers|scheduler|housekeeping`,
repeated or comma-separated, every role by default, and the `--no-…` flags taking one away; a
worker node's `--group` handed to its runworkers. In-process: the command's refusals and the
children `plan` gives the supervisor (tests/processes/test_nodes_browser.py starts a group node)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from gateway.daemon.supervisor import ROLES, Supervisor, parse_roles, plan
from gateway.runtime import RUNTIME
from tests.support.runtime import installed_runtime


@pytest.fixture
def runtime(config_dir):
    config_dir.service["worker_groups"] = {"media": ["echo", "probe"]}
    config_dir.extra["api"] = {"enabled": True, "listen": "127.0.0.1:1"}
    with installed_runtime(config_dir) as holder:
        yield holder.get()


def start(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with pytest.raises(SystemExit) as ended:
        call_command("system", "start", *args, stdout=io.StringIO(), stderr=err)
    return int(ended.value.code or 0), err.getvalue()


def test_roles_are_repeated_or_comma_separated_and_default_to_all():
    assert parse_roles([]) == frozenset(ROLES) == {"api", "workers", "scheduler", "housekeeping"}
    assert parse_roles(["api, scheduler", "workers"]) == {"api", "scheduler", "workers"}
    with pytest.raises(ValueError, match="unknown role 'gpu': the roles are api, workers, scheduler, housekeeping"):
        parse_roles(["workers,gpu"])


def test_a_worker_node_runs_its_group_and_no_listener(runtime):
    children = plan(runtime, runtime.config.config_dir, listen=False, group="media", scheduler=False)
    assert [c.name for c in children] == ["runworkers"]
    assert children[0].argv[-2:] == ["--group", "media"]
    # Every role: the API, the workers (every plugin), the scheduler on a thread of its own.
    everything = plan(runtime, runtime.config.config_dir)
    assert [c.name for c in everything] == ["api", "runworkers", "runscheduler"]
    assert "--group" not in everything[1].argv


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--role", "gpu"], "--role: unknown role 'gpu'"),
        (["--role", "api", "--group", "media"], "--group names the workers' group, but this node runs no workers"),
        (["--no-workers", "--group", "media"], "--group names the workers' group, but this node runs no workers"),
        (["--group", "gpu"], "--group: unknown worker group 'gpu' (configured groups: media)"),
    ],
)
def test_start_refuses_a_role_or_group_it_cannot_run_with_exit_2(runtime, args, says):
    code, err = start(*args)
    assert code == 2 and says in err, err


@pytest.mark.django_db
@pytest.mark.parametrize(("listen", "started"), [(True, ["api"]), (False, [])])
def test_a_reload_starts_the_listeners_only_on_a_node_with_the_api_role(runtime, listen, started):
    """A worker node started without listeners (`--role workers`) must not grow an API at its
    first SIGHUP: the reload matches the listeners to the config only where the api role runs."""
    supervisor = Supervisor([], RUNTIME, install_signals=False, listen=listen)
    supervisor._reload()
    assert [child.name for child in supervisor.children] == started
