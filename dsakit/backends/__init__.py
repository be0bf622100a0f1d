"""Real DSA / DeepSeek-V4 backends: forward batches, the harness, metadata invariants, the sparse MLA reference."""
