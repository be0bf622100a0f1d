"""The GPU node's processes: one GPU per xdist worker (`gpu_pinning`), a kernel fault kept to its test
(`fault_isolation`), `dsakit rerun-test` (`rerun`), process groups (`process_group`), per-run folders
(`run_dirs`) and how to start pytest with the plugin (`pytest_invocation`)."""
