"""Scheduling targets: the checker drives each target through the driver and findings; isolate/worker run --run targets in child processes."""
