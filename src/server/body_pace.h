// How fast a request body must arrive (request_body.h).
#pragma once

#include <chrono>
#include <cstdint>

namespace tf::server {

// As Apache's mod_reqtimeout asks (body=20,MinRate=500): within `grace` of the route's start,
// plus a second for every `min_rate` bytes received. The read timeout alone bounds only the gap
// between two reads, so a client sending a byte every 20 s held its connection and worker for
// as long as it liked.
struct BodyPace {
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  int64_t min_rate = 1024;  // bytes a second; <= 0: no pace
};

}  // namespace tf::server
