"""The run's figures for monitoring: Prometheus' text format and its Pushgateway (:mod:`.prometheus`)."""
