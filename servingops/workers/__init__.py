"""Workers: wire workflows and activities to task queues and hold the process settings."""
