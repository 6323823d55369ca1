"""The roll call itself, installed with the package: ``pytest --pyargs rollcall.e2e`` or ``rollcall run``."""
