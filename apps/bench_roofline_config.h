// The roofline's model geometry (src/bench/roofline.h) from a parsed config.json.
//
// apps/ may see both src/model and src/bench; src/bench may not see src/model,
// so the translation lives here (and tests/unit/bench_roofline_test.cc compiles it too).
#pragma once

#include "bench/roofline.h"
#include "model/config.h"

namespace tf::apps {

// Layer kinds counted from the derived schedules (layer_types, mlp_layer_types,
// indexer_types); MTP layers are left out (plain decoding does not run them).
bench::RooflineModel roofline_model(const Glm5TextConfig& config);

}  // namespace tf::apps
