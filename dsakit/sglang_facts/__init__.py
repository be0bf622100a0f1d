"""What dsakit reads from and does with the SGLang under test: its runtime context (`scope`:
SGLangScope), the source scans (`runner_source`: what the ModelRunner sets; `backend_reads`: what the backends read), `dsakit contract check` (`contract_check`) and the
runner-site scan behind contracts/runner_sites.json (`runner_site_scan`). The release itself, its
files and the import watcher: dsakit.stack; the device probes and their simulation: dsakit.simulation."""
