// The TensorBoard writer's framing: TFRecord's CRC-32C and its mask (the event files themselves are read back by
// tensorboard's own reader in tests/tensorboard_test.py).
#include <catch2/catch.hpp>

#include <string>

#include "checkpoint/Crc32.h"
#include "train/TensorBoardWriter.h"

using namespace shadowgrad;

TEST_CASE("crc32c gives the Castagnoli check value, not zlib's CRC-32", "[tensorboard]") {
  const std::string check = "123456789";
  CHECK(train::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(checkpoint::crc32(check.data(), check.size()) != 0xE3069283u);  // control: the other polynomial
  const uint32_t crc = 0xE3069283u;
  CHECK(train::masked_crc32c(check.data(), check.size()) == ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
}
