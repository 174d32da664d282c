"""The launcher's Role grants exactly the verbs service/adapters/k8s/ uses, derived from its code."""

from __future__ import annotations

import pytest

from tests.deploy.deploy_support import K8S, ROOT, one, render
from tests.deploy.k8s_api_scan import role_rules, scan_package, scan_source

LAUNCHER_PKG = ROOT / "service" / "adapters" / "k8s"


def test_launcher_role_matches_the_calls_in_the_kubernetes_backend(kubectl):
    if not LAUNCHER_PKG.is_dir() or not any(LAUNCHER_PKG.rglob("*.py")):
        pytest.skip("service/adapters/k8s/ does not exist yet (issue 4); the scanner is tested below")
    scan = scan_package(LAUNCHER_PKG)
    assert not scan.problems, "the scan cannot derive every verb:\n" + "\n".join(scan.problems)
    assert scan.rules(), "no kubernetes client call found in service/adapters/k8s/"
    role = one(render(kubectl, K8S / "base"), "Role", "rljob-launcher")
    granted = role_rules(role)
    needed = scan.rules()
    fmt = lambda rules: "\n".join(f"  {g or 'core'} {r} {v}" for g, r, v in sorted(rules))  # noqa: E731
    assert granted == needed, (
        f"k8s/base/rbac.yaml differs from what the code calls.\nmissing (the code needs them):\n{fmt(needed - granted)}"
        f"\nunused (remove them):\n{fmt(granted - needed)}\nevidence:\n  " + "\n  ".join(scan.evidence)
    )


def test_role_has_no_wildcards_or_cluster_scope(kubectl):
    objs = render(kubectl, K8S / "base")
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for g, r, v in role_rules(one(objs, "Role", "rljob-launcher")):
        assert "*" not in (g, r, v), f"wildcard in rule {g}/{r}/{v}"


SAMPLE = """
from kubernetes import client, watch

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_PLURAL = "jobsets"
JOBSET = dict(group=JOBSET_GROUP, version="v1alpha2", plural=JOBSET_PLURAL)

class K8sClient:
    def __init__(self, core: client.CoreV1Api, batch: client.BatchV1Api, custom: client.CustomObjectsApi):
        self.core, self.batch, self.custom = core, batch, custom

    def launch(self, ns, job, cm, js):
        self.core.create_namespaced_config_map(ns, cm)
        self._retry(self.batch.create_namespaced_job, namespace=ns, body=job)
        self.custom.create_namespaced_custom_object(JOBSET_GROUP, "v1alpha2", ns, JOBSET_PLURAL, js)

    def mirror(self, ns, name, patch):
        self.batch.patch_namespaced_job(name, ns, patch)
        self.custom.patch_namespaced_custom_object(**JOBSET, namespace=ns, name=name, body=patch)

    def cancel(self, ns, name):
        self.batch.delete_namespaced_job(name, ns, propagation_policy="Foreground")

    def why(self, ns, name):
        self.core.list_namespaced_pod(ns, label_selector=f"job-name={name}")
        self.core.list_namespaced_event(ns)
        return self.core.read_namespaced_pod_log(name, ns, tail_lines=100)

    def watch_jobs(self, ns):
        return watch.Watch().stream(self.batch.list_namespaced_job, ns, resource_version="1")

    def watch_any(self, fn, ns):
        return watch.Watch().stream(fn, ns)

    def watch_jobsets(self, ns):
        return self.watch_any(self.custom.list_namespaced_custom_object, ns)
"""


def test_scanner_derives_verbs_from_typical_launcher_code():
    """The scanner itself, on code shaped like a launcher: constants, **dict kwargs, wrappers that
    receive the method, a direct Watch stream and a helper that streams whatever it is given."""
    scan = scan_source(SAMPLE)
    # watch_any(self.custom.list_namespaced_custom_object, ns): the plural is not in that call, which
    # the scan reports rather than guesses.
    assert any("cannot resolve group/plural" in p for p in scan.problems)
    assert scan.rules() == {
        ("", "configmaps", "create"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "patch"),
        ("batch", "jobs", "delete"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "watch"),
        ("jobset.x-k8s.io", "jobsets", "create"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
        ("", "pods", "list"),
        ("", "events", "list"),
        ("", "pods/log", "get"),
    }


def test_scanner_watch_via_keyword_and_custom_list_with_constants():
    scan = scan_source(
        "from kubernetes import client\n"
        "P = 'jobsets'\n"
        "def f(c: client.CustomObjectsApi, b: client.BatchV1Api, ns):\n"
        "    b.list_namespaced_job(ns, watch=True)\n"
        "    c.list_namespaced_custom_object(group='jobset.x-k8s.io', version='v1alpha2', namespace=ns, plural=P)\n"
        "    c.get_namespaced_custom_object_status('jobset.x-k8s.io', 'v1alpha2', ns, P, 'x')\n"
    )
    assert not scan.problems
    assert scan.rules() == {
        ("batch", "jobs", "list"),
        ("batch", "jobs", "watch"),
        ("jobset.x-k8s.io", "jobsets", "list"),
        ("jobset.x-k8s.io", "jobsets/status", "get"),
    }


def test_scanner_refuses_what_a_role_cannot_grant_or_it_cannot_see():
    scan = scan_source(
        "def f(b, core, api_client):\n"
        "    b.list_job_for_all_namespaces()\n"
        "    core.list_namespaced_event('ns')\n"  # CoreV1Api or EventsV1Api: not named anywhere
        "    api_client.call_api('/apis/x', 'GET')\n"
    )
    text = "\n".join(scan.problems)
    assert "cluster-scoped" in text and "EventsV1Api" in text and "call_api" in text
    assert not scan.rules()


def test_scanner_derives_a_raw_call_from_its_param_serialize():
    """A call_api for an aggregated API (Kueue's visibility) counts through the path it was built from;
    without a resolvable path it stays a problem."""
    scan = scan_source(
        "PATH = '/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{name}/pendingworkloads'\n"
        "def pending(api, ns, lq):\n"
        "    req = api.param_serialize(method='GET', resource_path=PATH, path_params={'namespace': ns, 'name': lq})\n"
        "    return api.call_api(*req)\n"
        "def unknown(api, path):\n"
        "    return api.call_api(*api.param_serialize(method='GET', resource_path=path))\n"
    )
    assert scan.rules() == {("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")}
    assert len(scan.problems) == 1 and scan.problems[0].startswith("<sample>:6: call_api")
