"""The environment variables the suite and the workload share: each declared once, here."""

from __future__ import annotations

#: The Kubernetes node the pod runs on (the Job's pod spec sets it from spec.nodeName).
NODE_NAME_ENV = "NODE_NAME"
#: The Slurm node a task runs on (slurmd sets it for each task).
SLURM_NODE_ENV = "SLURMD_NODENAME"
#: Each node rank's node in a larger world (``"2,3"``: node rank 0 is node 2), when the suite re-runs a
#: subset of the nodes.
NODE_IDS_ENV = "ROLLCALL_NODE_IDS"
#: The node's monitor directory, which the backend gives every rank of a node (:mod:`.heartbeat`).
MONITOR_DIR_ENV = "ROLLCALL_MONITOR_DIR"
#: The variable the suite marks every process of one run with (its launchers and their ranks inherit it).
RUN_ID_ENV = "ROLLCALL_RUN_ID"
#: ``1``: a line that breaks its record raises ``ContractError`` (the suite's tests set it); otherwise the
#: line is written as it is and the breach said once per kind on stderr (:func:`.line.check_event`).
STRICT_ENV = "ROLLCALL_CONTRACT_STRICT"
