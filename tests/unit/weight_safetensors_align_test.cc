// Found by the fuzzer: a valid safetensors file may place a tensor at an address
// that is not aligned for its dtype (unpadded header, odd data offset); the
// reader must still hand out correct, aligned data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/safetensors.h"

namespace tf {
namespace {

TEST(SafetensorsAlignment, MisalignedTensorsAreCopiedAligned) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tf_align_" + std::to_string(::getpid()) + ".safetensors")).string();
  // header of 85 bytes (not a multiple of 8) and a bf16 tensor at data offset 1
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[1,5]}})";
  ASSERT_NE(header.size() % 2, 8u);
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header;
  const uint16_t one = float_to_bf16(1.0f), minus_two = float_to_bf16(-2.0f);
  out.put(7);
  out.write(reinterpret_cast<const char*>(&one), 2);
  out.write(reinterpret_cast<const char*>(&minus_two), 2);
  out.close();
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().to_string();
  auto b = (*f)->tensor("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->raw()) % 2, 0u);
  EXPECT_EQ(b->to_vector(), (std::vector<float>{1.0f, -2.0f}));
  auto a = (*f)->tensor("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->to_vector(), (std::vector<float>{7.0f}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tf
