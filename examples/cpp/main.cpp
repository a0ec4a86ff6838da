// Advantages of a tiny rollout buffer with the C++ API: 2 segments of 6 steps,
// PufferLib's indexing (rewards[t] and dones[t] belong to the step that led to t).
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include <puffadv/puffadv.hpp>

int main() {
    constexpr std::int64_t rows = 2, horizon = 6;
    const float values[rows * horizon] = {0.5f, 0.3f, -0.2f, 1.1f, 0.7f, 0.4f,
                                          1.0f, -0.6f, 0.5f, 0.1f, 2.0f, -0.3f};
    const float rewards[rows * horizon] = {0.0f, 1.0f, 0.4f, -1.0f, 2.0f, 0.3f,
                                           0.0f, 0.2f, 1.5f, 0.0f, -0.5f, 1.0f};
    const float dones[rows * horizon] = {0, 0, 0, 1, 0, 0,
                                         0, 0, 0, 0, 0, 1};
    // Ratios pi/mu; 6.0 exceeds rho_clip and is clipped to 5.
    const float importance[rows * horizon] = {1.0f, 0.5f, 2.0f, 1.0f, 6.0f, 1.0f,
                                              1.5f, 1.0f, 0.25f, 3.0f, 0.8f, 1.0f};
    float advantages[rows * horizon];

    try {
        puffadv::compute_puff_advantage_cpu(values, rewards, dones, importance, advantages, rows, horizon,
                                            /*gamma=*/0.99f, /*lambda=*/0.95f, /*rho_clip=*/5.0f,
                                            /*c_clip=*/1.0f);
    } catch (const std::invalid_argument& e) {  // bad shapes, aliasing, parameters
        std::fprintf(stderr, "puffadv: %s\n", e.what());
        return 1;
    }

    std::printf("advantages [%lld x %lld]:\n", static_cast<long long>(rows), static_cast<long long>(horizon));
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t t = 0; t < horizon; ++t) std::printf(" %+.4f", advantages[r * horizon + t]);
        std::printf("\n");
    }
    return 0;
}
