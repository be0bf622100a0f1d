"""Static audit of downstream suites: which mock model runners lack what a DSA / DSv4 backend reads."""
