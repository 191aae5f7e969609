"""edgespec's own ExecuTorch kernels (C++), built on first use against the installed
ExecuTorch wheel and registered in its runtime.

`attention.cpp`: `edgespec::attention.out`, attention over the KV cache whose per-row
arithmetic does not depend on the number of rows in a call (what makes a speculative step
bitwise equal to one-token decoding). Its op schema for `torch.export` is in `ops.py`;
`library.py` compiles and loads the shared library for the runtime.
"""
