"""Device simulation: SGLang's probes answer as another device, for a block, a test or a whole run.

Owns the probe rows per SGLang release (`probes`), `dsakit.simulate_device` and its patches
(`probe_patches`), and the run-wide layer over them: where tensors live (`runtime`), what stops
kernel launches (`kernels`, `kernel_archs`), the pytest wiring (`whole_run`, `watchdog`,
`explain`) and one run per device (`fleet`); the import hook it patches through is SGLang-facts'
(`dsakit.stack.import_hooks`, shared with the kernel-launch contracts). Nothing here is imported until a
simulation is asked for.
"""
