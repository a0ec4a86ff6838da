// The header, the CMake package and the library binary must describe the same
// build: version and GPU backends. Compiled with -Wpedantic -Werror by a plain
// C++17 compiler, which also proves the public headers need no CUDA/HIP.
#include <cstdio>

#include <puffadv/puffadv.hpp>

namespace {
constexpr bool same_text(const char* a, const char* b) {
    return *a == *b && (*a == '\0' || same_text(a + 1, b + 1));
}
}  // namespace

static_assert(same_text(PUFFADV_VERSION, PACKAGE_VERSION_STRING),
              "PUFFADV_VERSION in <puffadv/config.hpp> differs from puffadv_VERSION of the CMake package");
static_assert(PUFFADV_HAS_CUDA == PACKAGE_HAS_CUDA, "PUFFADV_HAS_CUDA differs from puffadv_HAS_CUDA");
static_assert(PUFFADV_HAS_HIP == PACKAGE_HAS_HIP, "PUFFADV_HAS_HIP differs from puffadv_HAS_HIP");

int main() {
    const puffadv::build_info info = puffadv::get_build_info();
    const bool cuda = PUFFADV_HAS_CUDA != 0, hip = PUFFADV_HAS_HIP != 0;
    if (info.version != PUFFADV_VERSION || info.has_cuda != cuda || info.has_hip != hip) {
        std::fprintf(stderr, "headers describe puffadv %s (cuda %d, hip %d) but the library is %s (cuda %d, hip %d)\n",
                     PUFFADV_VERSION, cuda, hip, info.version.c_str(), info.has_cuda, info.has_hip);
        return 1;
    }
    std::printf("puffadv %s: header, package and library agree (cuda %d, hip %d)\n", PUFFADV_VERSION, cuda, hip);
    return 0;
}
