// FunctionRef<R(Args...)>: a non-owning reference to a callable, for callbacks that are called
// right away and never stored (the pieces of a pre-tokenizer, the segments of the added-token
// matcher). Unlike std::function it never allocates, so handing one down per piece costs nothing.
// The referenced callable must outlive the FunctionRef: bind it to a named lambda or pass a lambda
// directly as a function argument.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace tf::text {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  // Implicit, so that a lambda can be passed where a FunctionRef is expected.
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor)
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace tf::text
