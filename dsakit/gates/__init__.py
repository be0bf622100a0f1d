"""Capability gates: the device model, the gate table, markers, the skip inventory, `dsakit capabilities`."""
