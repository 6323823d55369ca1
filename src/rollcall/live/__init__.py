"""What a run shows while its job runs: the live roll call (:mod:`.view`)."""
