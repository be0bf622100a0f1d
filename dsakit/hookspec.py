"""dsakit's own pytest hook specs (registered by the plugin's `pytest_addhooks`, xdist newhooks-style).

Owns: the signature and contract of each dsakit hook. Never imports torch: implementations do.
"""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_dsakit_device_fault(item: pytest.Item) -> str | None:
    """After a test phase: the text of a sticky device error now pending in this process (e.g.
    "AcceleratorError: CUDA error: device-side assert triggered"), or None when the device is
    healthy or was never touched. Must not initialise CUDA. dsakit's own implementation
    (`dsakit.node.fault_isolation.pending_device_error`) synchronizes the current device when torch has
    initialised CUDA; a conftest may answer first (`tryfirst=True`) to simulate a fault."""
