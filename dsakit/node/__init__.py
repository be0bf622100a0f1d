"""GPU-node workflows: GPU pinning, `dsakit warm`, bytecode, `dsakit rerun-test`, `dsakit compare`."""
