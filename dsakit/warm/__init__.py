"""`dsakit warm`: the JIT targets a selection needs and their builds (`targets`), where each library
keeps its compiled kernels (`jit_caches`), the stamps that let a warm skip a build (`stamp`), the SGLang
import chain's bytecode (`bytecode`) and the cache tarball moved between nodes (`tarball`)."""
