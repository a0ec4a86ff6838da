// See cpu_threads.hpp.
#include "cpu_threads.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define PUFF_HAS_ATFORK 1
#else
#define PUFF_HAS_ATFORK 0
#endif

namespace puffadv::detail {
namespace {

// Workers wait on `wake` for a new generation; the owner (the call using the
// pool) waits on `finished` until every part it handed out is done.
struct pool {
    std::mutex owner;  // held by the one call that uses the workers, and across fork()
    std::mutex lock;   // guards everything below
    std::condition_variable wake, finished;
    std::vector<std::thread> workers;  // worker i runs part i + 1
    std::uint64_t generation = 0;      // one per job
    int parts = 0;                     // parts of the current job that workers run: [1, parts)
    int unfinished = 0;
    void (*task)(void*, int) = nullptr;
    void* context = nullptr;
};

// Created on first use and never destroyed: a static destructor would run while
// workers still wait on its condition variable. After fork() the child gets a
// fresh pool and abandons the old one, whose threads do not exist there (a
// condition variable that had waiters must not be used again either).
pool* the_pool = nullptr;
std::once_flag created;

void work(pool* p, int part) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> guard(p->lock);
    for (;;) {
        p->wake.wait(guard, [&] { return p->generation != seen; });
        seen = p->generation;
        if (part >= p->parts) continue;  // this job needs fewer threads
        auto* task = p->task;
        void* context = p->context;
        guard.unlock();
        task(context, part);
        guard.lock();
        if (--p->unfinished == 0) p->finished.notify_one();
    }
}

#if PUFF_HAS_ATFORK
// fork() waits for a call that is using the workers to finish (it holds `owner`),
// so the child never inherits a half-done job.
void before_fork() { the_pool->owner.lock(); }
void after_fork_in_parent() { the_pool->owner.unlock(); }
void after_fork_in_child() { the_pool = new pool; }  // the old one is abandoned, see above
#endif

pool& get_pool() {
    std::call_once(created, [] {
        the_pool = new pool;
#if PUFF_HAS_ATFORK
        pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
#endif
    });
    return *the_pool;
}

// Workers for parts [1, parts), as many as can be started; returns how many there are.
int grow(pool& p, int parts) {
    while (static_cast<int>(p.workers.size()) < parts - 1) {
        try {
            p.workers.emplace_back(work, &p, static_cast<int>(p.workers.size()) + 1);
        } catch (const std::system_error&) {  // out of threads: the caller does the rest
            break;
        }
    }
    return static_cast<int>(p.workers.size());
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
    int shared;  // parts [1, shared) go to workers; the rest stay on this thread
    {
        std::lock_guard<std::mutex> guard(p.lock);
        shared = std::min(parts, grow(p, parts) + 1);
        p.task = task;
        p.context = context;
        p.parts = shared;
        p.unfinished = shared - 1;
        ++p.generation;
    }
    if (shared > 1) p.wake.notify_all();
    task(context, 0);
    for (int part = shared; part < parts; ++part) task(context, part);
    std::unique_lock<std::mutex> guard(p.lock);
    p.finished.wait(guard, [&] { return p.unfinished == 0; });
}

}  // namespace puffadv::detail
