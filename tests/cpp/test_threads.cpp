// CPU threads: calls from many threads at once, and fork() after and during a
// threaded call (issue 15: GNU OpenMP's pool did not survive fork, and a child
// hung for ever at its next call). Each result is checked against the reference.
#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>
#define PUFF_TEST_FORK 1
#endif

#include "reference.hpp"

namespace {

using puff_test::grid;
using puff_test::inputs;

const puffadv::puff_params kParams{0.99, 0.95, 2.0, 1.0};
constexpr std::int64_t kRows = 512, kSteps = 257;  // 131584 elements: work for 4 threads

struct call_case {
    inputs in;
    grid want;
    std::vector<float> v, r, d, i;
};

call_case make_case(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    call_case c{puff_test::random_inputs<float>(kRows, kSteps, rng), grid(0, 0), {}, {}, {}, {}};
    c.want = puff_test::reference_puff(c.in, kParams);
    for (auto [from, to] : {std::pair{&c.in.values, &c.v}, std::pair{&c.in.rewards, &c.r},
                            std::pair{&c.in.dones, &c.d}, std::pair{&c.in.importance, &c.i}})
        to->assign(from->data.begin(), from->data.end());
    return c;
}

// One call through the public entry point; its relative error against the reference.
double error_of_one_call(const call_case& c) {
    std::vector<float> out(c.v.size(), std::numeric_limits<float>::quiet_NaN());
    puffadv::compute_puff_advantage_cpu(c.v.data(), c.r.data(), c.d.data(), c.i.data(), out.data(), kRows,
                                        kSteps, kParams.gamma, kParams.gae_lambda, kParams.rho_clip,
                                        kParams.c_clip);
    return puff_test::relative_error(std::vector<double>(out.begin(), out.end()), c.want);
}

class PoolThreads : public ::testing::Test {
protected:
    void SetUp() override {
        const char* saved = std::getenv("PUFFADV_NUM_THREADS");
        saved_ = saved ? saved : "";
        had_ = saved != nullptr;
        setenv("PUFFADV_NUM_THREADS", "4", 1);
    }
    void TearDown() override {
        if (had_) setenv("PUFFADV_NUM_THREADS", saved_.c_str(), 1);
        else unsetenv("PUFFADV_NUM_THREADS");
    }
    std::string saved_;
    bool had_ = false;
};

TEST_F(PoolThreads, ManyCallersAtOnce) {
    const call_case c = make_case(1);
    std::vector<double> errors(8, -1.0);
    std::vector<std::thread> callers;
    for (int k = 0; k < 8; ++k)
        callers.emplace_back([&, k] {
            double worst = 0.0;
            for (int n = 0; n < 5; ++n) worst = std::max(worst, error_of_one_call(c));
            errors[static_cast<std::size_t>(k)] = worst;
        });
    for (auto& t : callers) t.join();
    for (double e : errors) EXPECT_LE(e, 1e-5);
}

#if PUFF_TEST_FORK
// Forks; the child makes one threaded call and exits 0 when it is right. The
// parent waits at most `seconds` (then kills it: a hang fails instead of stalling ctest).
int fork_one_call(const call_case& c, int seconds = 60) {
    const pid_t pid = fork();
    if (pid == 0) _exit(error_of_one_call(c) <= 1e-5 ? 0 : 2);
    for (int waited_ms = 0; waited_ms < seconds * 1000; waited_ms += 10) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;  // hung
}

TEST_F(PoolThreads, ForkAfterAThreadedCall) {
    const call_case c = make_case(2);
    ASSERT_LE(error_of_one_call(c), 1e-5);  // the pool now has threads
    EXPECT_EQ(fork_one_call(c), 0) << "-1: the child hung";
    EXPECT_LE(error_of_one_call(c), 1e-5);  // and the parent goes on
}

TEST_F(PoolThreads, ForkWhileAnotherThreadComputes) {
    const call_case c = make_case(3);
    std::atomic<bool> stop{false};
    std::atomic<int> wrong{0}, calls{0};
    std::thread busy([&] {
        while (!stop) {
            if (error_of_one_call(c) > 1e-5) ++wrong;
            ++calls;
        }
    });
    std::vector<int> codes;
    for (int k = 0; k < 4; ++k) codes.push_back(fork_one_call(c));
    stop = true;
    busy.join();
    for (int code : codes) EXPECT_EQ(code, 0) << "-1: the child hung";
    EXPECT_GT(calls.load(), 0);
    EXPECT_EQ(wrong.load(), 0);
}
#endif

}  // namespace
