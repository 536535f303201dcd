#pragma once
namespace tf {
inline constexpr const char* kVersion = "0.1.0";
}
