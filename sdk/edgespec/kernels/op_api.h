// The ExecuTorch kernel API edgespec's op files use (attention.cpp, block_linear.cpp,
// block_argmax.cpp, block_embedding.cpp, glue.cpp), included and named in one place.

#pragma once

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/kernel_includes.h>

namespace edgespec {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::KernelRuntimeContext;

}  // namespace edgespec
