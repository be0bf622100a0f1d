"""The role contract (declared data) and the contract suites that run against real SGLang.

Installed as `dsakit.contracts`; the test modules here form dsakit's main job (`pytest contracts`).
"""
