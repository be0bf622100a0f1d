"""Whole-run device simulation: a test process that runs as another device from configure to unconfigure.

Owns the run-wide layer over `dsakit.simulate_device` (the probe patches): where tensors live
(`runtime`), what stops kernel launches (`kernels`), the pytest wiring (`whole_run`) and one run per
device (`fleet`). Nothing here is imported until `--dsakit-device` names a simulated device.
"""
