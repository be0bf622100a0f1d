"""The software under test, as dsakit knows it without importing it: the SGLang release table and its
feature probes (`sglang_release`), the source index every scanner reads through (`sglang_source`),
whether the release's own import chain loads here (`import_chain`), one record per kernel library
(`kernel_libraries`) and the import watcher that patches SGLang, torch, Triton and the kernel
libraries the moment they import (`import_hooks`). Never imports SGLang to answer which release it is."""
