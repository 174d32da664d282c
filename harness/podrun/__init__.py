"""A kubelet and the Job/JobSet controllers for tests, on this machine: what we deploy, run.

There is no Kubernetes here. kmock plays the API server; this package plays the rest, so that the Job
the service creates gets pods, the pods run the containers their manifests describe as local processes,
and the statuses, events and logs the service reads are written the way a cluster writes them.

By what each part plays (a folder imports only the ones above it in this list):
    pods/           running one pod's containers on this machine
        runner.py       PodRunner: one pod (volumes, then init containers in order, then the regular ones; deletion)
        container_loop.py   one container's attempts: env, process, probes, restarts with back-off
        termination.py  stopping containers: SIGTERM, SIGKILL after the grace period, sidecars after the rest
        status.py       the pod's status and phase (the kubelet's getPhase), pure
        plan.py         one container's process: argv, env, cwd, the path mapping, user, ports
        process.py, ns_exec.py   the process: user + mount namespaces with bind mounts (proot where refused)
        envvars.py      env, envFrom, valueFrom (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)
        volumes.py      emptyDir (Memory: /dev/shm), secret, configMap, downwardAPI, projected, hostPath
        guard.py        read-only mounts and readOnlyRootFilesystem for Python code
        probes.py       httpGet startup/liveness/readiness probes with the kubelet's timing
        images.py       ENTRYPOINT/CMD/WORKDIR/ENV/USER read from docker/*.Dockerfile
        quantity.py     Kubernetes quantities (`500m`, `16Gi`)
    api/            the API server's side that kmock lacks
        kapi.py         reading and writing kmock from the controllers' event loop
        admission.py    mutating webhooks, failurePolicy Fail and dryRun in front of kmock's store
        api_tls.py      the API over HTTPS with a CA and service-account token, for in-cluster clients
    controllers/    what watches the API and acts
        job_controller.py, jobset_controller.py   the controllers' decisions (pure)
        jobset_pod_webhook.py   JobSet v0.12.0's pod webhook: which followers of an exclusive-placement slice are admitted
        scheduling.py, scheduler.py, kubelet.py   the nodes and the scheduler's fit checks (pure), the scheduler, the kubelet
    kueue/          Kueue's controllers, webhook and visibility API (its __init__ lists the modules)
    cluster.py      EmulatedCluster: all of the above on one kmock
    manifests.py    the service's rendered trainer workloads with a tiny fake command, for Job semantics in seconds
    __main__.py     `python -m harness.podrun FILE... --run KIND/NAME`: run one pod from rendered YAML

Emulated (each has a test in tests/podrun, tests/k8s or tests/deploy):
- containers: `command`/`args` as written, else the image's ENTRYPOINT/CMD; `$(VAR)` expansion; WORKDIR,
  ENV, USER and HOME from our Dockerfiles, the project venv standing in for the image's VIRTUAL_ENV;
  a missing executable is StartError (exit 128); runAsUser/runAsNonRoot (a root user is refused);
- env: literal values, envFrom (prefix, optional), secretKeyRef/configMapKeyRef (missing object or key
  without optional -> waiting CreateContainerConfigError, retried as the kubelet does), fieldRef
  (metadata.name/namespace/uid/labels['k']/annotations['k'], spec.nodeName/serviceAccountName,
  status.podIP/hostIP = 127.0.0.1), resourceFieldRef (divisor; an unset limit reads as the node's
  allocatable), HOSTNAME, service links and KUBERNETES_SERVICE_HOST/PORT;
- volumes at their literal mountPath (bind mounts; native code sees them too; a mount point this machine
  lacks is made on a tmpfs in the container's mount namespace, never on the host): emptyDir per pod (Memory on
  the host's /dev/shm tmpfs; sizeLimit -> eviction), secret/configMap/downwardAPI/projected files with
  items and modes, read-only; hostPath (this machine is the node); subPath; the automounted
  service-account token volume (token, ca.crt, namespace) unless automountServiceAccountToken is false;
  a missing Secret/ConfigMap volume -> FailedMount, pod Pending;
- readOnlyRootFilesystem and read-only mounts: EROFS for writes made through Python (open for writing,
  mkdir, rename, remove, chmod, SQLite connect, ...) in every Python process of the container;
- probes: httpGet startup/liveness/readiness with initialDelaySeconds, periodSeconds, timeoutSeconds,
  successThreshold, failureThreshold; startup gates the others; liveness/startup failure kills the
  container (restartPolicy decides); readiness drives the Ready condition; declared ports get free
  loopback ports, told to the process by rewriting `--port N`/`--port=N` and *PORT env values
  (`--host 0.0.0.0` -> 127.0.0.1);
- lifecycle: restartPolicy Never/OnFailure/Always with CrashLoopBackOff back-off; deletion sends SIGTERM
  to PID 1 only and SIGKILLs every process after terminationGracePeriodSeconds (at least 2 s, as the
  kubelet's killContainer); exit by signal = 128+N;
  phases Pending/Running/Succeeded/Failed, conditions, containerStatuses (state, lastState,
  restartCount, ready, started), events (Started, Killing, Unhealthy, FailedMount, FailedScheduling...);
  the pod log endpoint (follow, tailLines, container, previous; a regular or init container by name, none
  when the pod has one regular container, else 400 as the API server answers);
- init containers (kuberuntime_container.go computeInitContainerActions): one at a time in their order
  before the regular containers; a plain one must exit 0 (a failure restarts it, or under restartPolicy
  Never fails the pod, whose regular containers then never start); env, volumes, securityContext, the
  service-account token and resourceFieldRef work for them as for regular containers;
  initContainerStatuses, the Initialized condition, PodInitializing for what waits;
- native sidecars (an init container with restartPolicy Always, KEP-753): the next container starts once
  the sidecar runs and is started (an httpGet startupProbe passed, if it has one); it is restarted with
  back-off whenever it exits, whatever the pod's restartPolicy; liveness/readiness probes as for regular
  containers (readiness counts in Ready); once every regular container has ended for good, the sidecars
  are no longer restarted and are stopped in reverse order of declaration (each SIGTERM only after the
  later ones exited, SIGKILL after the grace period); deletion stops them after the regular containers;
  the pod stays Running while a sidecar runs and its phase is the regular containers' (a sidecar's exit
  code never fails the pod); requests count sidecars and the largest init container for scheduling and
  Kueue (component-helpers AggregateContainerRequests);
- Job controller: parallelism/completions, NonIndexed and Indexed (index label/annotation, hostname,
  JOB_COMPLETION_INDEX, in init containers too), job-name/controller-uid labels, ownerReferences, the
  job-tracking finalizer, podFailurePolicy (FailJob, Ignore, Count; onExitCodes over regular then init
  containers' statuses, sidecars included; onPodConditions), backoffLimit with a doubling
  back-off, podReplacementPolicy, activeDeadlineSeconds, suspend/resume, SuccessCriteriaMet/FailureTarget
  then Complete/Failed (1.31+), ttlSecondsAfterFinished, missing ServiceAccount -> FailedCreate;
- JobSet controller: one child Job per replicated job replica, failurePolicy (maxRestarts, FailJobSet on
  reasons), suspend, ttlSecondsAfterFinished; garbage collection of owned Jobs and pods;
- JobSet's pod webhook at v0.12.0 when asked (`jobset_pod_webhook=`): a follower waits for its leader to be
  scheduled, takes its node pool, and is refused while two leaders exist (a Failed one beside its retry);
  a refusal is a FailedCreate event on the Job;
- the kubelet ending a node's pods itself (`shut_down_node`): DisruptionTarget, Failed, not deleted;
- scheduler: nodeSelector, taints/tolerations, requests against allocatable (limits where requests are
  unset); the node is this machine (no TPU), a fake TPU node for fake commands, or several nodes with GKE's
  labels and taints (controllers/scheduling.py, Node.gke_tpu / Node.gke_cpu), all running their pods on this machine;
- evict(): DisruptionTarget condition then a graceful delete (PodDisruptionBudgets are not consulted).

Not emulated (needs a real cluster): image builds and pulls (images map to our Dockerfiles; an unknown
image is ErrImagePull); a container root filesystem (the host's is visible apart from the bound paths,
so a pod can read host files a real container could not, and only Python writes are policed); network
namespaces, pod IPs, cluster DNS, Services and NetworkPolicy (every pod shares 127.0.0.1; hostNetwork
changes nothing); cgroups: CPU/memory limits are not enforced, so OOMKilled never happens; file
ownership (the container's uid is mapped to this machine's user in a user namespace, or only reported
through proot, so files are reached as that user, not as the pod's); RBAC and admission (Pod
Security, webhooks, defaulting, validation; kmock stores what it is sent); exec/tcpSocket/grpc probes
(refused: a sidecar's startupProbe must be httpGet), lifecycle hooks (postStart, preStop: ignored, so a
sidecar counts as started without its postStart), probe-level terminationGracePeriodSeconds, a changed
container definition restarting a sidecar, pod-level resources and overhead in requests; under proot, a
unix socket in a disk emptyDir whose host path passes 108 bytes is not seen by the other containers at
its path (Memory emptyDirs, on /dev/shm, and namespaces isolation have no such limit); PersistentVolumeClaims, node affinity and topology
spread, priorities and preemption, PodDisruptionBudgets, backoffLimitPerIndex, successPolicy, the JobSet
webhook's exclusive pod (anti-)affinities and its pod reconciler, and DNS. Kueue is emulated when a test asks for it (kueue/, following
kueue v0.19.2's flavor assigner and scheduler; its docstring lists what is not).
"""
