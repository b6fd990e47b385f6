#pragma once
// A bf16 tensor's storage as the 16-bit patterns src/kernels takes, for the autograd nodes that call the kernels
// (model/*Function.cpp, train/TokenLoss.cpp). data_ptr<at::BFloat16>() checks the dtype.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

inline uint16_t* bf16_bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

} // namespace shadowgrad::model
