"""DSA top-k: the backend table, release flags, the resolution oracle, the target/draft matrix, cases, the one launch route, the one reference, checks and snapshots."""
