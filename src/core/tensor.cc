#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/status.h"

namespace tf {

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::string shape_to_string(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

std::shared_ptr<Storage> Storage::allocate_host(size_t bytes, bool zero) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw StatusError(resource_exhausted("host allocation of " + std::to_string(bytes) + " bytes failed"));
  if (zero && p) std::memset(p, 0, rounded);
  return std::make_shared<Storage>(p, bytes, Device::cpu(), [](void* q) { std::free(q); });
}

Tensor Tensor::on_storage(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype) {
  Tensor t;
  t.data_ = static_cast<char*>(storage->data()) + byte_offset;
  t.device_ = storage->device();
  t.storage_ = std::move(storage);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return on_storage(Storage::allocate_host(bytes), 0, std::move(shape), dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return on_storage(Storage::allocate_host(bytes, /*zero=*/true), 0, std::move(shape), dtype);
}

Tensor Tensor::from_floats(Shape shape, const std::vector<float>& values) {
  Tensor t = empty(std::move(shape), DType::kF32);
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    throw StatusError(invalid_argument("from_floats: " + std::to_string(values.size()) +
                                       " values for shape " + shape_to_string(t.shape())));
  }
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::view_of(void* data, Shape shape, DType dtype, Device device) {
  auto strides = contiguous_strides(shape);
  return view_of(data, std::move(shape), std::move(strides), dtype, device);
}

Tensor Tensor::view_of(void* data, Shape shape, std::vector<int64_t> strides, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  d = norm_dim(d);
  if (d < 0 || d >= dim() || start < 0 || end > shape_[d] || start > end) {
    throw StatusError(out_of_range("slice [" + std::to_string(start) + ", " + std::to_string(end) +
                                   ") of dim " + std::to_string(d) + " of " + describe()));
  }
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[d] * static_cast<int64_t>(element_size());
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  d = norm_dim(d);
  Tensor t = slice(d, index, index + 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  a = norm_dim(a);
  b = norm_dim(b);
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw StatusError(invalid_argument("reshape: more than one -1 in " + shape_to_string(shape)));
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known > 0) shape[infer] = numel() / known;
  if (shape_numel(shape) != numel() || !is_contiguous()) {
    throw StatusError(invalid_argument("reshape " + describe() + " to " + shape_to_string(shape) +
                                       (is_contiguous() ? ": element count differs" : ": not contiguous")));
  }
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  if (d < 0) d += dim() + 1;
  Tensor t = *this;
  const int64_t st = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  return t;
}

namespace {
// Calls fn(element_offset) for every element in row-major order.
template <typename Fn>
void for_each_offset(const Shape& shape, const std::vector<int64_t>& strides, Fn fn) {
  const int n = static_cast<int>(shape.size());
  if (shape_numel(shape) == 0) return;
  std::vector<int64_t> idx(n, 0);
  int64_t off = 0;
  while (true) {
    fn(off);
    int d = n - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) { off += strides[d]; break; }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_ || src.dtype_ != dtype_ || !device_.is_cpu() || !src.device_.is_cpu()) {
    throw StatusError(invalid_argument("copy_from " + src.describe() + " into " + describe()));
  }
  const size_t es = element_size();
  if (is_contiguous() && src.is_contiguous()) {
    std::memcpy(data_, src.data_, nbytes());
    return;
  }
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(numel()));
  for_each_offset(src.shape_, src.strides_, [&](int64_t o) { offsets.push_back(o); });
  size_t i = 0;
  for_each_offset(shape_, strides_, [&](int64_t o) {
    std::memcpy(static_cast<char*>(data_) + o * es, static_cast<const char*>(src.data_) + offsets[i++] * es, es);
  });
}

Tensor Tensor::contiguous() const {
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to_f32() const {
  Tensor packed = is_contiguous() ? *this : contiguous();
  Tensor out = empty(shape_, DType::kF32);
  convert_to_f32(packed.raw(), dtype_, out.data<float>(), static_cast<size_t>(numel()));
  return out;
}

Tensor Tensor::to_dtype(DType dtype) const {
  if (dtype == dtype_) return contiguous();
  Tensor f = to_f32();
  Tensor out = empty(shape_, dtype);
  convert_from_f32(f.data<float>(), out.raw(), dtype, static_cast<size_t>(numel()));
  return out;
}

std::vector<float> Tensor::to_vector() const {
  Tensor f = to_f32();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_to_string(shape_) + " " + device_.to_string();
}

}  // namespace tf
