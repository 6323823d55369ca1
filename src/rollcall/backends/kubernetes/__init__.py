"""The kubernetes backend: an Indexed Job and its headless Service, or one JobSet, through the client.

Everything only Kubernetes needs lives in this wing, and nothing outside it but the session's choice of
backend (:mod:`rollcall.suite`, :mod:`rollcall.cli`) imports it:

- :mod:`.backend`: :class:`~.backend.KubernetesBackend` (connect, discover, launch; the session's sweep).
- :mod:`.job`: one launched Job: its wait over informers, fail-fast on broken pods, its logs.
- :mod:`.jobsets`: a run's JobSet (``--job-kind jobset``): created, watched, read until its Job is made.
- :mod:`.scheduling`: until every pod is scheduled: quota, capacity that arrives, ``--capacity-timeout``.
- :mod:`.deletion`: the run's objects deleted, by its clean-up or by someone else while it runs.
- :mod:`.snapshot`: a failed run's pods, Job and events saved as YAML.
- :mod:`.kube`: the API client, retries, deletions; :mod:`.api`: the API's operations, sent as raw JSON.
- :mod:`.watch`: :class:`~.watch.Informer` and :func:`~.watch.wait_for`.
- :mod:`.views`: small read-only views of pods, Jobs and events over the API's JSON.
- :mod:`.nodeviews`: views of nodes and their health, NodePools, device plugins' DaemonSets.
- :mod:`.kubeconfig`: which cluster configuration is used, and why.
- :mod:`.access`: the rights the run needs, checked before anything is created.
- :mod:`.placement`: the placement pipeline: the nodes there, else capacity that can arrive, the plugins.
- :mod:`.discovery`: what each node offers (accelerators, EFA, taints, device plugins).
- :mod:`.capacity`: capacity that can arrive (Karpenter NodePools, cluster-autoscaler).
- :mod:`.instances`: EC2 instance types: GPUs, Neuron devices and cores, EFA interfaces.
- :mod:`.pod_state`: what a Job's and its pods' status say: broken, disrupted, ended.
- :mod:`.waits`: what a run waited for before training (quota, nodes, image pulls).
- :mod:`.manifests`: the Namespace, Service and Job (or JobSet) rendered from ``manifests/``.
- :mod:`.podlogs`: each pod's log followed into the collector.
- :mod:`.efa`: what NCCL's log says of EFA: the clues, each pod's evidence, and the check over them.
- :mod:`.reaper`: a watchdog process that deletes the run's objects if the session dies.
"""
