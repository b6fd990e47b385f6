#pragma once

#include <cstdint>

namespace shadowgrad::kernels {

// Cross-entropy over the rows of a [rows x vocab] logits buffer, in place. For each row with target t != ignore:
//   row_loss[r] = logsumexp(row) - row[t]   (fp32 math)
//   row         = softmax(row) - onehot(t)  (d loss / d logits, each entry rounded once into the buffer's type)
// Rows whose target is `ignore` (padding) become zeros with loss 0. Three passes over each row (max, sum of
// exponentials, write), with the row in cache: where log_softmax + exp made fp32 copies of the whole buffer.
// `grain` rows per task; the result does not depend on it or on the thread count.
void cross_entropy_rows(float* logits, const int64_t* targets, float* row_loss, int64_t rows, int64_t vocab,
                        int64_t ignore, int64_t grain);
// The same for bf16 logits, given as their 16-bit patterns.
void cross_entropy_rows(uint16_t* logits, const int64_t* targets, float* row_loss, int64_t rows, int64_t vocab,
                        int64_t ignore, int64_t grain);

} // namespace shadowgrad::kernels
