"""Root conftest of the dsakit checkout: what dsakit's own suites need beyond the plugin.

The dsakit plugin itself loads through its pytest11 entry point (or `-p dsakit.plugin` on a node
without an install); nothing here may import torch or SGLang.
"""

pytest_plugins = ["pytester"]
