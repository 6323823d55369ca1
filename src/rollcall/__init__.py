"""rollcall: prove a Kubernetes cluster can train, by making every rank answer the roll call."""

__version__ = "0.2.0"
