"""Backends whose components run in Kubernetes clusters, one per site.

`names` (the objects' names, ports and paths), `manifests` (pure builders of what is applied), `handles`
(what the Grid facade gets back), `tools` (kubectl and friends, checked), `mirror` (local overlays copied
into pods), `backend` (everything the cluster backends share), `kind` (clusters made for the run, with
their chaos), `existing` (clusters a user already has), `operator_workload` (the operator's Deployment,
wherever its descriptor says it runs) and `control` (the operator under test, reached through the API).
"""
