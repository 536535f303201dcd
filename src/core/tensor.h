// Tensor: a typed, strided view of memory on some device, owning or not.
//
// Owning tensors hold a shared Storage (freed when the last view goes); views
// made by slice/transpose/reshape share it. A non-owning tensor wraps memory
// someone else keeps alive (a memory-mapped checkpoint, a device arena).
// Strides are in elements. Device memory is allocated by the backend that owns
// the device and handed in as a Storage with its own deleter.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tf {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  static Device cpu() { return {DeviceKind::kCpu, 0}; }
  static Device cuda(int i) { return {DeviceKind::kCuda, i}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

using Shape = std::vector<int64_t>;
std::string shape_to_string(const Shape& s);
int64_t shape_numel(const Shape& s);

// A block of memory and how to free it.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage() { if (deleter_) deleter_(data_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  // 64-byte aligned host memory; zero-filled when asked.
  static std::shared_ptr<Storage> allocate_host(size_t bytes, bool zero = false);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

class Tensor {
 public:
  Tensor() = default;

  // Owning, contiguous, uninitialised (host).
  static Tensor empty(Shape shape, DType dtype);
  static Tensor zeros(Shape shape, DType dtype);
  // Owning host f32 tensor with the given values (for tests and small constants).
  static Tensor from_floats(Shape shape, const std::vector<float>& values);
  // Contiguous tensor over memory owned by `storage` (offset in bytes).
  static Tensor on_storage(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype);
  // Non-owning view over memory kept alive elsewhere.
  static Tensor view_of(void* data, Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor view_of(void* data, Shape shape, std::vector<int64_t> strides, DType dtype,
                        Device device = Device::cpu());

  bool is_null() const { return data_ == nullptr && shape_.empty(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  // size(-1) is the last dimension.
  int64_t size(int d) const { return shape_[norm_dim(d)]; }
  int64_t stride(int d) const { return strides_[norm_dim(d)]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  size_t element_size() const { return dtype_size(dtype_); }
  bool is_contiguous() const;
  bool owns_memory() const { return storage_ != nullptr; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw() const { return data_; }
  template <typename T> T* data() const { return static_cast<T*>(data_); }

  // Views (share memory).
  Tensor slice(int d, int64_t start, int64_t end) const;   // [start, end) along d
  Tensor select(int d, int64_t index) const;               // drops dimension d
  Tensor transpose(int a, int b) const;
  Tensor reshape(Shape shape) const;                       // contiguous only; one -1 allowed
  Tensor unsqueeze(int d) const;

  // Host copies.
  Tensor contiguous() const;                 // same dtype, packed
  Tensor to_f32() const;                     // any float/int dtype -> packed f32
  Tensor to_dtype(DType dtype) const;        // packed copy in another float dtype
  void copy_from(const Tensor& src);         // same shape and dtype, any strides (host)
  std::vector<float> to_vector() const;      // elements as floats, row-major

  std::string describe() const;  // "bf16[4, 128] cpu"

 private:
  int norm_dim(int d) const { return d < 0 ? d + dim() : d; }

  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  std::vector<int64_t> strides_;
  DType dtype_ = DType::kF32;
  Device device_;
};

std::vector<int64_t> contiguous_strides(const Shape& shape);

}  // namespace tf
