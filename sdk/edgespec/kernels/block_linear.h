// edgespec's linear kernels over GGUF-style weight blocks, with no ExecuTorch dependency
// (block_linear.cpp wraps them as the op `edgespec::block_linear`). One header per part, as
// torchao and ggml-cpu lay out their kernels:
//   block_linear/contract.h     the arithmetic contract, the packed layout, the activation quantizer
//   block_linear/portable.h     the reference path (plain C++)
//   block_linear/x86_avx2.h     AVX2 and AVX-VNNI (256-bit)
//   block_linear/x86_avx512.h   AVX-512 VNNI (512-bit, up to 16 rows per read of a tile)
//   block_linear/neon.h         Arm NEON dot-product and i8mm, and the feature checks
//   block_linear/dispatch.h     the path per call and the walk over tiles and rows
//   block_linear/screen.h       a Q8_0 head's 5-bit screen: proven intervals for an exact argmax (edgespec::block_argmax)
// The self-test (every path against the portable one, natively and under qemu-aarch64) is
// tests/kernels/block_linear_selftest.cpp.

#pragma once

#include "block_linear/dispatch.h"
#include "block_linear/screen.h"
