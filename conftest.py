"""Root conftest: the rollcall plugin is registered through its pytest11 entry point; nothing else here."""
