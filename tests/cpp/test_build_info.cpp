// build_info, cpu_thread_count and query_gpu describe this build truthfully.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include <puffadv/puffadv.hpp>

namespace {

TEST(BuildInfo, MatchesTheHeaders) {
    const puffadv::build_info info = puffadv::get_build_info();
    EXPECT_EQ(info.version, PUFFADV_VERSION);
    EXPECT_EQ(info.version, std::to_string(PUFFADV_VERSION_MAJOR) + "." + std::to_string(PUFFADV_VERSION_MINOR) +
                                "." + std::to_string(PUFFADV_VERSION_PATCH));
    EXPECT_EQ(info.has_cuda, PUFFADV_HAS_CUDA != 0);
    EXPECT_EQ(info.has_hip, PUFFADV_HAS_HIP != 0);
    EXPECT_EQ(info.gpu_architectures.empty(), !info.has_cuda && !info.has_hip);
    EXPECT_FALSE(info.compiler.empty());
}

TEST(BuildInfo, GpuStatusOfMissingBackends) {
    const puffadv::gpu_status cpu = puffadv::query_gpu(puffadv::device_type::cpu);
    EXPECT_TRUE(cpu.compiled);
    EXPECT_EQ(cpu.device_count, 1);
    const puffadv::gpu_status cuda = puffadv::query_gpu(puffadv::device_type::cuda);
    EXPECT_EQ(cuda.compiled, PUFFADV_HAS_CUDA != 0);
    if (!cuda.compiled) {
        EXPECT_EQ(cuda.device_count, 0);
        EXPECT_NE(cuda.error.find("no cuda backend"), std::string::npos) << cuda.error;
    }
    const puffadv::gpu_status hip = puffadv::query_gpu(puffadv::device_type::rocm);
    EXPECT_EQ(hip.compiled, PUFFADV_HAS_HIP != 0);
    if (!hip.compiled) {
        EXPECT_EQ(hip.device_count, 0);
    }
}

TEST(BuildInfo, ThreadCountHonoursEnvironment) {
    const char* saved = std::getenv("PUFFADV_NUM_THREADS");
    const std::string restore = saved ? saved : "";
    unsetenv("PUFFADV_NUM_THREADS");
    const int all_cores = puffadv::cpu_thread_count();
    EXPECT_GE(all_cores, 1);
    setenv("PUFFADV_NUM_THREADS", "3", 1);
    EXPECT_EQ(puffadv::cpu_thread_count(), 3);
    for (const char* ignored : {"0", "-2", "two", ""}) {  // invalid: fall back to all cores
        setenv("PUFFADV_NUM_THREADS", ignored, 1);
        EXPECT_EQ(puffadv::cpu_thread_count(), all_cores) << "PUFFADV_NUM_THREADS='" << ignored << "'";
    }
    saved ? setenv("PUFFADV_NUM_THREADS", restore.c_str(), 1) : unsetenv("PUFFADV_NUM_THREADS");
}

}  // namespace
