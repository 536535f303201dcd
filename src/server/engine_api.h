// The server talks to the engine only through EngineApi (engine/engine_api.h);
// its names are visible unqualified inside tf::server.
#pragma once

#include "engine/engine_api.h"

namespace tf::server {
using namespace tf::engine;  // NOLINT(google-build-using-namespace): the one door into the engine
}  // namespace tf::server
