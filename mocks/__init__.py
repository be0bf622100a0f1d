"""Strict mocks built from the declared contracts (installed as `dsakit.mocks`).

Import them through `dsakit` (`dsakit.MockModelRunner`), not through this package's name.
"""
