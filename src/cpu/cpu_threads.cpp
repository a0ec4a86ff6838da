// See cpu_threads.hpp.
#include "cpu/cpu_threads.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <signal.h>
#define PUFF_POSIX_THREADS 1
#else
#define PUFF_POSIX_THREADS 0
#endif

namespace puffadv::detail {
namespace {

// How long a worker keeps polling for the next job, and the owner for the
// workers, before sleeping: back-to-back calls then skip the wake-up (a futex
// and a trip through the scheduler). On this project's loaded 2-core machine a
// 50 us poll let the threads fall asleep in turn, and each wake-up cost more
// than a 1024 x 128 call; 200 us kept them awake. GNU libgomp polls likewise,
// for milliseconds (GOMP_SPINCOUNT), after every parallel region.
constexpr auto kPoll = std::chrono::microseconds(200);

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Polls until done() or kPoll has passed; true when done.
template <typename Done>
bool poll(const Done& done) {
    const auto deadline = std::chrono::steady_clock::now() + kPoll;
    for (int i = 1;; ++i) {
        if (done()) return true;
        relax();
        if (i % 256 == 0 && std::chrono::steady_clock::now() > deadline) return false;
    }
}

// The current job in one atomic word: its generation, its number of parts, and
// the next part nobody has claimed. Every thread, the owner included, claims
// parts from it until none is left, so a worker the scheduler is slow to run
// delays nothing: the owner does its part too (with static parts, a call on the
// loaded machine waited up to a scheduler tick for one late worker).
struct job_word {
    static constexpr int kBits = 16;  // parts <= 1024 (cpu_thread_count's cap) fit
    static constexpr std::uint64_t kMask = (std::uint64_t{1} << kBits) - 1;
    std::uint64_t word;
    std::uint32_t generation() const { return static_cast<std::uint32_t>(word >> (2 * kBits)); }
    int parts() const { return static_cast<int>((word >> kBits) & kMask); }
    int next() const { return static_cast<int>(word & kMask); }
    static std::uint64_t make(std::uint32_t generation, int parts) {
        return std::uint64_t{generation} << (2 * kBits) | static_cast<std::uint64_t>(parts) << kBits;
    }
};

// A job is published by storing a new word (under `lock`, so that a worker
// going to sleep cannot miss it). task and context are written before it and
// read only after a part is claimed; the owner writes the next job only when
// every claimed part has finished.
struct pool {
    std::mutex owner;  // held by the one call that uses the workers, and across fork()
    std::mutex lock;   // for sleeping and waking
    std::condition_variable wake, finished;
    std::vector<std::thread> workers;  // only the owner touches this
    int sleepers = 0;                  // workers waiting on `wake` (under `lock`)
    std::uint32_t generation = 0;      // the owner's count of jobs (wrapping)
    std::atomic<std::uint64_t> job{0};
    std::atomic<int> unfinished{0};   // parts not yet done
    std::atomic<bool> polling{true};  // false once there are more threads than cores
    void (*task)(void*, int) = nullptr;
    void* context = nullptr;
};

// Created on first use and never destroyed: a static destructor would run while
// workers still wait on its condition variable. After fork() the child gets a
// fresh pool and abandons the old one, whose threads do not exist there (a
// condition variable that had waiters must not be used again either).
pool* the_pool = nullptr;
std::once_flag created;

// Claims and runs parts of job `generation` until none is left.
void run_claimed(pool& p, std::uint32_t generation) {
    job_word w{p.job.load(std::memory_order_acquire)};
    for (;;) {
        if (w.generation() != generation || w.next() >= w.parts()) return;
        if (!p.job.compare_exchange_weak(w.word, w.word + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
            continue;  // w now holds the current word
        p.task(p.context, w.next());
        if (p.unfinished.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> guard(p.lock);
            p.finished.notify_one();
        }
        w.word = p.job.load(std::memory_order_acquire);
    }
}

void work(pool* p, std::uint32_t seen) {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "puffadv-cpu");  // as top -H and /proc show it
#endif
    for (;;) {
        auto published = [&] {
            return job_word{p->job.load(std::memory_order_acquire)}.generation() != seen;
        };
        if (!p->polling.load(std::memory_order_relaxed) || !poll(published)) {
            std::unique_lock<std::mutex> guard(p->lock);
            ++p->sleepers;
            p->wake.wait(guard, published);
            --p->sleepers;
        }
        seen = job_word{p->job.load(std::memory_order_acquire)}.generation();
        run_claimed(*p, seen);
    }
}

#if PUFF_POSIX_THREADS
// fork() waits for a call that is using the workers to finish (it holds `owner`),
// so the child never inherits a half-done job.
void before_fork() { the_pool->owner.lock(); }
void after_fork_in_parent() { the_pool->owner.unlock(); }
void after_fork_in_child() { the_pool = new pool; }  // the old one is abandoned, see above
#endif

pool& get_pool() {
    std::call_once(created, [] {
        the_pool = new pool;
#if PUFF_POSIX_THREADS
        pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
#endif
    });
    return *the_pool;
}

// At least `count` workers if they can be started (out of threads, the owner
// does more of the parts itself).
void grow(pool& p, int count) {
    if (static_cast<int>(p.workers.size()) >= count) return;
#if PUFF_POSIX_THREADS
    // Workers start with every signal blocked (a thread inherits its creator's
    // mask): signal handlers, Python's included, run on the callers' threads.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
#endif
    while (static_cast<int>(p.workers.size()) < count) {
        try {
            p.workers.emplace_back(work, &p, p.generation);
        } catch (const std::system_error&) {
            break;
        }
    }
#if PUFF_POSIX_THREADS
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
#endif
    // Polling threads beyond the cores would take turns with the ones doing the work.
    static const unsigned cores = std::thread::hardware_concurrency();
    p.polling.store(cores == 0 || p.workers.size() < cores, std::memory_order_relaxed);
}

}  // namespace

void run_parts(int parts, void (*task)(void*, int), void* context) {
    if (parts <= 1) {
        if (parts == 1) task(context, 0);
        return;
    }
    pool& p = get_pool();
    std::unique_lock<std::mutex> own(p.owner, std::try_to_lock);
    if (!own.owns_lock()) {  // another call has the workers: compute here, alone
        for (int part = 0; part < parts; ++part) task(context, part);
        return;
    }
    grow(p, parts - 1);
    std::uint32_t generation;
    {
        std::lock_guard<std::mutex> guard(p.lock);
        p.task = task;
        p.context = context;
        p.unfinished.store(parts, std::memory_order_relaxed);
        generation = ++p.generation;
        p.job.store(job_word::make(generation, parts), std::memory_order_release);
        if (p.sleepers > 0) p.wake.notify_all();
    }
    run_claimed(p, generation);
    auto done = [&] { return p.unfinished.load(std::memory_order_acquire) == 0; };
    if (!poll(done)) {
        std::unique_lock<std::mutex> guard(p.lock);
        p.finished.wait(guard, done);
    }
}

}  // namespace puffadv::detail
