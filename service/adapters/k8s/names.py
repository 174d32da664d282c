"""Object names, label and annotation keys: one place, so the watcher finds what the builder made.

Names are derived from the job id alone (deterministic), which is what makes create idempotent:
a retried create that hits 409 finds its own object under the same name.
"""

from __future__ import annotations

import re

from trainer.contract.spec.dns_label import is_dns_label

from .errors import ManifestError

# JobSet names end up inside pod hostnames: <jobset>-<replicatedJob>-<jobIndex>-<podIndex>, which
# must stay a 63-character DNS label; 40 leaves room for "-slice-0-255" and the Job's own suffixes.
MAX_JOB_NAME = 63
MAX_JOBSET_NAME = 40

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_JOB_ID = "rljob.dev/job-id"
LABEL_TEAM = "rljob.dev/team"
LABEL_PHASE = "rljob.dev/phase"
# What a workload is, for `kubectl get jobs -L rljob.dev/kind,rljob.dev/eval-of`: a training job (train) or an eval
# job (eval); an eval job of a training job's checkpoint names that job. Its suite and checkpoint are annotations.
LABEL_KIND = "rljob.dev/kind"
KIND_TRAIN, KIND_EVAL = "train", "eval"
LABEL_EVAL_OF = "rljob.dev/eval-of"
ANNOTATION_EVAL_SUITE = "rljob.dev/eval-suite"
ANNOTATION_EVAL_CHECKPOINT = "rljob.dev/eval-checkpoint"
ANNOTATION_STAGE = "rljob.dev/stage"
ANNOTATION_PROGRESS = "rljob.dev/progress"
ANNOTATION_SPEC_HASH = "rljob.dev/spec-hash"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# While Kueue holds a job: its place in the LocalQueue and why (the status mirror writes them).
ANNOTATION_QUEUE_POSITION = "rljob.dev/queue-position"
ANNOTATION_QUEUE_REASON = "rljob.dev/queue-reason"
# The Kueue flavor (or, without Kueue, the kind of capacity) the job was admitted into: with a capacity set it is
# the pool's choice, and `kubectl get jobs -L rljob.dev/admitted-to` shows it.
LABEL_ADMITTED_TO = "rljob.dev/admitted-to"
JOBSET_EXCLUSIVE_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"

MANAGED_BY = "rljob"
# What every object rljob creates carries; the watcher lists and watches with this selector.
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
INITIAL_PHASE = "launching"

TRAINER_CONTAINER = "trainer"
SPEC_KEY = "spec.json"
SPEC_MOUNT_DIR = "/etc/rljob"


def check_dns_label(value: str, *, what: str, max_len: int = 63) -> str:
    if not is_dns_label(value, max_length=max_len):
        raise ManifestError(f"{what} {value!r} must be a DNS-1123 label of at most {max_len} characters (lowercase letters, digits, '-')")
    return value


def workload_name(job_id: str, *, multi_host: bool = False) -> str:
    """The Job's or JobSet's name: the job id itself (already `rl-` + 12 DNS-safe chars)."""
    return check_dns_label(job_id, what="workload name", max_len=MAX_JOBSET_NAME if multi_host else MAX_JOB_NAME)


def spec_configmap_name(job_id: str) -> str:
    return check_dns_label(f"{job_id}-spec", what="ConfigMap name")


def label_value(raw: str) -> str:
    """Coerce free text (a team name) into a valid label value: [A-Za-z0-9._-], <= 63, alnum ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", raw)[:63]
    return cleaned.strip("-._")


def job_selector(job_id: str) -> str:
    return f"{LABEL_JOB_ID}={job_id}"
