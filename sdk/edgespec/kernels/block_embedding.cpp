// edgespec::block_embedding.out — an embedding table read from packed weight blocks (the op
// schema is in edgespec/kernels/ops.py):
//
//   ids [...] int64, weight uint8 [2 ceil(N / 16) * K / 32 * tile_bytes] (a BlockLinear's
//   packed matrix), format, N, K: out [..., K] fp32, row i = matrix row ids[i] dequantized.
//
// A tied model's lm head computes with the file's blocks of its embedding (Q8_0 for SmolLM2 and
// Gemma 3); looking rows up in those same bytes stores the table once (the program's constants
// are deduplicated by content) where an fp32 copy of it was 1.15x the whole GGUF. Each row is
// contract.h's dequantize_row: w = d q (+ m), the file's values, bitwise what
// BlockCodes.dequantize gives in eager code. A row is 32 K / 32 blocks of a few multiplies: a
// token's lookup costs microseconds.

#include <limits>

#include "op_api.h"

#include "block_linear/contract.h"

namespace edgespec {
namespace {

namespace B = edgespec::blocks;

Tensor& block_embedding_out(KernelRuntimeContext& ctx, const Tensor& ids, const Tensor& weight, int64_t format, int64_t n, int64_t k, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, ids.scalar_type() == ScalarType::Long && ids.dim() <= 7, InvalidArgument, out,
                      "edgespec::block_embedding: ids must be int64 of at most 7 dimensions");
  ET_KERNEL_CHECK_MSG(ctx, B::tile_bytes(format) > 0, InvalidArgument, out, "edgespec::block_embedding: unknown weight format %d",
                      static_cast<int>(format));
  ET_KERNEL_CHECK_MSG(ctx, n > 0 && n <= std::numeric_limits<SizesType>::max() && k > 0 && k % B::kBlock == 0 && k <= std::numeric_limits<SizesType>::max(),
                      InvalidArgument, out, "edgespec::block_embedding: N must be 1 to 2^31 - 1 and K a positive multiple of 32");
  const int64_t G = k / B::kBlock;
  ET_KERNEL_CHECK_MSG(ctx, weight.scalar_type() == ScalarType::Byte && weight.numel() == B::packed_bytes(n, G, format), InvalidArgument, out,
                      "edgespec::block_embedding: packed weight size does not match N, K and the format");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Float, InvalidArgument, out, "edgespec::block_embedding: out must be fp32");
  SizesType sizes[8];
  for (int64_t i = 0; i < ids.dim(); ++i) sizes[i] = static_cast<SizesType>(ids.size(i));
  sizes[ids.dim()] = static_cast<SizesType>(k);
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, {sizes, static_cast<size_t>(ids.dim() + 1)}) == executorch::runtime::Error::Ok,
                  InvalidArgument, out);
  const int64_t* id = ids.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    ET_KERNEL_CHECK_MSG(ctx, id[i] >= 0 && id[i] < n, InvalidArgument, out, "edgespec::block_embedding: id %lld is not a row of the table (0 to %lld)",
                        static_cast<long long>(id[i]), static_cast<long long>(n - 1));
  const uint8_t* w = weight.const_data_ptr<uint8_t>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < ids.numel(); ++i) B::dequantize_row(w, format, id[i], G, o + i * k);
  return out;
}

}  // namespace
}  // namespace edgespec

EXECUTORCH_LIBRARY(edgespec, "block_embedding.out", edgespec::block_embedding_out);
