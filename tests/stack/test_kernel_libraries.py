"""The kernel-library table (dsakit.stack.kernel_libraries): every list of kernel libraries dsakit keeps
derives from its records, so adding a library is one record (CONTRIBUTING.md, "Adding a kernel library")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsakit.errors import UsageError
from dsakit.stack.kernel_libraries import KERNEL_LIBRARIES, installed_on, kernel_library

_ADDED = r"""
import json
from dsakit.stack import kernel_libraries as k
k.KERNEL_LIBRARIES["fakekern"] = k.KernelLibrary(
    "fakekern", "fake-kern", ("fake-kern-python", "fake-kern-cubin"), ("nvidia",),
    gate_covered_by="the torch reference covers the fake kernels", toolchain="fake-kern's JIT",
    caches=(k.LibraryCache("fake-kern", "FAKE_KERN_CACHE_DIR", "~/.cache/fake-kern", sglang_redirect="fake-kern"),),
    warm_key=True)

from dsakit.compare.recorder import KERNEL_PACKAGES
from dsakit.gates.device_model import simulated_model
from dsakit.gates.table import gate_table
from dsakit.simulation import kernels
from dsakit.simulation.kernel_archs import toolchain_of
from dsakit.topk import launch_guard
from dsakit.topk.backends import TopkBackend
from dsakit.warm import jit_caches, tarball
from dsakit.warm.targets import JIT_TARGETS

gate = gate_table()["module:fakekern"]
roots = jit_caches.cache_roots({"HOME": "/home/u"}, redirects=False)
redirected = jit_caches.env_after_sglang_import({"HOME": "/home/u"}, redirects=True)
tool = toolchain_of("/site-packages/fakekern/jit/build.py")
print(json.dumps({
    "stand_in": "fakekern" in kernels.absent_libraries(simulated_model("sm90")),
    "not_on_amd": "fakekern" in kernels.absent_libraries(simulated_model("gfx942")),
    "machinery": ["/fakekern/" in kernels._MACHINERY, "/fakekern/" in launch_guard._MACHINERY],
    "toolchain": [tool.key, tool.what] if tool else None,
    "gate": [gate.kind, gate.covered_by],
    "cache": [str(roots["fake-kern"].path), roots["fake-kern"].moved_by],
    "redirect": redirected.get("FAKE_KERN_CACHE_DIR"),
    "warm": "fake-kern" in JIT_TARGETS["triton-kernels"].caches,
    "key": tarball.DISTRIBUTIONS.get("fakekern"),
    "fingerprint": [name for name in KERNEL_PACKAGES if name.startswith("fake-kern")],
    "backend": TopkBackend("fake", "fakekern", ("cuda", "module:fakekern"), ()).kernel_library.name,
}))
"""


def test_a_library_is_one_record_every_list_derives_from_it() -> None:
    """A record added to the table (and nothing else) gives the library its stand-in under a simulation
    of its vendor, its frames in both launch machineries and the toolchain, its module gate, its cache
    root and SGLang's redirect of it, its place in the warm target that writes every cache, in the warm
    cache's key and in the pr-vs-base fingerprint, and a top-k backend that names it."""
    done = subprocess.run([sys.executable, "-c", _ADDED], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "stand_in": True, "not_on_amd": False, "machinery": [True, True],
        "toolchain": ["fake-kern", "fake-kern's JIT"],
        "gate": ["module", "the torch reference covers the fake kernels"],
        "cache": ["/home/u/.cache/fake-kern", "FAKE_KERN_CACHE_DIR"],
        "redirect": "/home/u/.cache/sglang/fake-kern",
        "warm": True, "key": "fake-kern-python", "fingerprint": ["fake-kern-python", "fake-kern-cubin"],
        "backend": "fake-kern",
    }


def test_every_module_gate_and_topk_library_is_a_record() -> None:
    from dsakit.gates.table import gate_table
    from dsakit.topk.backends import TOPK_BACKENDS

    module_gates = {code for code, gate in gate_table().items() if gate.kind == "module" and "." not in code}
    records = {library.gate for library in KERNEL_LIBRARIES.values() if library.gate is not None}
    assert records <= module_gates
    assert {b.library for b in TOPK_BACKENDS.values() if b.library is not None} <= set(KERNEL_LIBRARIES)
    assert installed_on("amd") == ("sgl_kernel", "tilelang", "aiter")


def test_no_record_is_a_usage_error_naming_the_known_libraries() -> None:
    with pytest.raises(UsageError, match=r"kernel library 'cutlass' has no dsakit KernelLibrary record .*known: sgl_kernel, "):
        kernel_library("cutlass")
