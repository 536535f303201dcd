// What an HTTP client's transport error means, in words (cpp-httplib's names are terse:
// "Connection"). Shared by `tensorfold bench`, `tui` and `check`.
#pragma once

#include <httplib.h>

#include <string>

namespace tf::bench {

inline std::string describe_transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection refused or host unreachable";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "reading the response failed (connection closed or read timeout)";
    case httplib::Error::Write:
      return "sending the request failed (connection closed)";
    default:
      return httplib::to_string(e);
  }
}

}  // namespace tf::bench
