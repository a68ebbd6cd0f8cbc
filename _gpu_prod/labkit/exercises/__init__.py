"""Library exercises that are not part of the compiler (Triton kernels run in the interpreter)."""
