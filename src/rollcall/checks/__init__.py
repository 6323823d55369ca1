"""What the judge's checks read in a roll call beyond which events each rank said.

Pure analyses over :mod:`rollcall.ranklog`'s reports, each feeding checks of :data:`rollcall.judge.CHECKS`:

- :mod:`.hangs`: a stalled rank's stack dumps: hung in its own code, or waiting in a collective.
- :mod:`.proofs`: that every rank trained correctly: replicas agree, all-reduces are exact, the loss falls.
- :mod:`.fitness`: each node's facts: its unfit devices, drift between nodes, the golden configuration.
- :mod:`.floors`: the published bus-bandwidth floors of instance types, and the groups below them.
"""
