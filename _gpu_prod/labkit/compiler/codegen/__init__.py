"""Code generators: C++ (OpenMP + SIMD) and Triton, sharing codegen/common.py."""
