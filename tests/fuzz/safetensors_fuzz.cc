// libFuzzer target for the safetensors reader (issue 2): the input is a whole
// .safetensors file (8-byte little-endian header length, JSON header, data).
// It goes through parse_safetensors_header (with the data size the file implies,
// a different one, and the whole input read as JSON) and through
// SafetensorsFile::open on a temp file, whose tensors are then read in full so
// that any offset the validation let through is touched under ASan. Any crash,
// sanitizer report or leak is a bug; errors returned as Status are expected.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "model/safetensors.h"

namespace {

const std::string& temp_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/tf_fuzz_" + std::to_string(::getpid()) + ".safetensors";
  }();
  return path;
}

void read_all(const tf::SafetensorsFile& file) {
  for (const tf::TensorEntry& e : file.entries()) {
    tf::Expected<tf::Tensor> t = file.tensor(e.name);
    if (!t.has_value() || t->numel() > (1 << 16)) continue;
    if (tf::dtype_is_float(t->dtype()) || t->dtype() == tf::DType::kI32 || t->dtype() == tf::DType::kU8) {
      volatile float sink = 0;
      for (float v : t->to_vector()) sink = sink + v;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(data[i]) << (8 * i);
    if (n <= size - 8) {
      const std::string_view header = all.substr(8, n);
      const size_t data_size = size - 8 - n;
      std::map<std::string, std::string> meta;
      (void)tf::parse_safetensors_header(header, data_size, "fuzz", &meta);
      (void)tf::parse_safetensors_header(header, data_size * 3 + (n & 0xff), "fuzz");
    }
  }
  (void)tf::parse_safetensors_header(all, size, "fuzz");

  FILE* f = std::fopen(temp_path().c_str(), "wb");
  if (f == nullptr) return 0;
  const size_t written = std::fwrite(data, 1, size, f);
  std::fclose(f);
  if (written != size) return 0;
  tf::Expected<std::unique_ptr<tf::SafetensorsFile>> file = tf::SafetensorsFile::open(temp_path());
  if (file.has_value()) read_all(**file);
  return 0;
}
