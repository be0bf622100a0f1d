"""What dsakit reads from and does with the SGLang under test: its runtime context (`scope`:
SGLangScope), the source scans (`source_scan`), `dsakit contract check` (`contract_check`) and the
runner-site scan behind contracts/runner_sites.json (`runner_site_scan`), and the import hook that
patches SGLang's (and torch's, Triton's, the kernel libraries') modules the moment they import
(`import_hooks`: the simulation's probes and guards, the kernel-launch contracts). The release itself and
its files: dsakit.release; the device probes and their simulation: dsakit.simulation."""
