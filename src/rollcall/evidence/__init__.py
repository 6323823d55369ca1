"""What the checks read in a roll call beyond which events each rank said: typed evidence, no judgement.

Pure analyses over :mod:`rollcall.ranklog`'s reports and the backend's observations; each feeds one or more
checks of :mod:`rollcall.checks`, which turn what they find into problems:

- :mod:`.hangs`: a stalled rank's stack dumps: hung in its own code, or waiting in a collective.
- :mod:`.rootcause`: the ranks' errors and the runtime's terminations in time order: the first failure.
- :mod:`.endings`: how a pod or a process ended where no rank said why (terminations, disruptions).
- :mod:`.proofs`: that every rank trained correctly: replicas agree, all-reduces are exact, the loss falls.
- :mod:`.perf`: each rank's compute time and each group's all-reduce bus bandwidth, and the slow ones.
- :mod:`.floors`: the published bus-bandwidth floors of instance types, and the groups below them.
- :mod:`.nodefacts`: each node's facts, and its devices'.
- :mod:`.fitness`: the rules a device and a node are held to: the unfit ones.
- :mod:`.drift`: drift between nodes, and the golden configuration (``--expect``).
- :mod:`.baseline` and :mod:`.reference`: a configuration's accepted figures, and the history they come from.
- :mod:`.versions` and :mod:`.kernels`: the workload's versions, and the kernels it ran or dropped.
"""
