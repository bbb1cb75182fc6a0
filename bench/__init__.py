"""The benchmarks of bench/README.md, run from the project root as ``python -m bench.<name>``."""
