"""The bad node isolated (``--isolate``): short bandwidth-only runs on halves of the nodes, recursively.

:mod:`rollcall.isolation.bisect` is the search, pure: which groups of nodes to try, given what the tries so
far showed. :mod:`rollcall.isolation.probe` runs each try through any backend (a
:class:`~rollcall.jobspec.JobSpec` of fewer nodes naming their places in the world, the workload with
``--bandwidth-only``), judges it, and adds what it found to the deciding verdict.
"""
