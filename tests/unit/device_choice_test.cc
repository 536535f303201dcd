// DEVICE=auto (engine/device_choice.h): a named device is kept; auto picks the GPU only when
// this build has CUDA and the GPU can run it, else the CPU, and always says why.
#include "engine/device_choice.h"

#include <gtest/gtest.h>

namespace tf::engine {
namespace {

TEST(DeviceChoice, ANamedDeviceIsKept) {
  for (const char* named : {"cpu", "cuda"}) {
    const DeviceChoice c = choose_device(named, 0);
    EXPECT_EQ(c.device, named);
    EXPECT_TRUE(c.reason.empty());
  }
}

TEST(DeviceChoice, AutoFallsBackToTheCpuWithoutThatGpu) {
  // No machine has 4,096 GPUs: the CPU, naming the GPU it could not use.
  const DeviceChoice c = choose_device("auto", 4095);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_NE(c.reason.find("GPU 4095"), std::string::npos) << c.reason;
  EXPECT_EQ(c.gpu_unusable, TF_HAVE_CUDA != 0);
}

TEST(DeviceChoice, AutoChoosesCpuOrCudaAndSaysWhy) {
  const DeviceChoice c = choose_device("auto", 0);
  EXPECT_TRUE(c.device == "cpu" || c.device == "cuda") << c.device;
  EXPECT_FALSE(c.reason.empty());
#if !TF_HAVE_CUDA
  EXPECT_EQ(c.device, "cpu");
  EXPECT_NE(c.reason.find("without CUDA"), std::string::npos) << c.reason;
#endif
}

}  // namespace
}  // namespace tf::engine
