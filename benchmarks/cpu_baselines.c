/* Baselines for bench_cpu.py, compiled by it with -O3 -fopenmp:
 * PufferLib 3's CPU loop (one row at a time, one dependent chain) and a
 * multi-threaded memcpy for the machine's copy bandwidth. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* As pufferlib/extensions/pufferlib.cpp's puff_advantage_row, row by row. */
void naive_puff_advantage(const float* values, const float* rewards, const float* dones,
                          const float* importance, float* advantages, int64_t rows, int64_t horizon,
                          float gamma, float lambda, float rho_clip, float c_clip) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* v = values + r * horizon;
        const float* rw = rewards + r * horizon;
        const float* d = dones + r * horizon;
        const float* imp = importance + r * horizon;
        float* adv = advantages + r * horizon;
        float last = 0;
        for (int64_t t = horizon - 2; t >= 0; t--) {
            float next_non_terminal = 1.0f - d[t + 1];
            float rho_t = fminf(imp[t], rho_clip);
            float c_t = fminf(imp[t], c_clip);
            float delta = rho_t * (rw[t + 1] + gamma * v[t + 1] * next_non_terminal - v[t]);
            last = delta + gamma * lambda * c_t * last * next_non_terminal;
            adv[t] = last;
        }
        adv[horizon - 1] = 0;
    }
}

/* memcpy split into one contiguous piece per thread. */
void parallel_memcpy(void* dst, const void* src, int64_t bytes, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < threads; ++i) {
        int64_t lo = bytes * i / threads, hi = bytes * (i + 1) / threads;
        memcpy((char*)dst + lo, (const char*)src + lo, (size_t)(hi - lo));
    }
}
