"""The service around the supervisor: its main loop, systemd, metrics, logs."""
