"""What the Kubernetes backend reads beyond its own namespace: API discovery, SelfSubjectAccessReviews,
nodes, and Kueue's cluster-scoped ClusterQueues, ResourceFlavors and AdmissionChecks.

Kept apart from service/adapters/k8s/ on purpose: that package's calls are what the namespaced Role
rljob-launcher grants (k8s/base/rbac.yaml; tests/deploy derives it from the code), and a Role cannot grant
cluster-scoped reads. Discovery and SelfSubjectAccessReview need no grant (every authenticated user has
them through system:discovery and system:basic-user); the rest is the ClusterRole rljob-cluster-reader of
the gke-kueue overlay (rbac_needs.py lists both, tests/k8s/test_rbac_needs.py checks them). Without it,
the submit-time flavor check and `rljob doctor` say they cannot look; nothing else changes.
"""
