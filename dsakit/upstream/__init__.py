"""What dsakit does with the SGLang under test: the configuration scope, source scans, device probes and
simulation, `dsakit contract check` (the release and its feature probes: dsakit.sglang_release)."""
