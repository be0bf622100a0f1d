"""What dsakit knows of the SGLang under test: release probes, the configuration scope, source scans, `dsakit contract check`."""
