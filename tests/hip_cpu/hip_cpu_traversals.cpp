// The hip_cpu tests' record of the traversal each launch took (see hip_cpu_cases.hpp).
#include <hip/hip_runtime.h>

#include <map>
#include <set>
#include <string>

#include "gpu/vendor.cuh"
#include "hip_cpu_cases.hpp"

namespace hip_cpu_test {

std::map<std::string, std::set<std::string>>& traversals_reached() {
    static std::map<std::string, std::set<std::string>> reached;
    return reached;
}

std::string traversal_of(const std::string& kernel, const std::string& site) {
    const bool vec = site.find("bool Vec = true") != std::string::npos;
    const bool flat = site.find("bool Flat = true") != std::string::npos;
    // The policy's steps per thread and threads per block.
    std::string items = "?", threads = "256";
    const std::string policy = "row_scan_policy<";
    if (const auto at = site.find("Policy = "); at != std::string::npos) {
        const auto p = site.find(policy, at);
        if (p != std::string::npos) {
            const auto args = site.substr(p + policy.size(), site.find('>', p) - p - policy.size());
            items = args.substr(0, args.find(','));
            std::size_t comma = 0;
            for (int i = 0; i < 3 && comma != std::string::npos; ++i) comma = args.find(", ", comma + 1);
            if (comma != std::string::npos) threads = args.substr(comma + 2, args.find(',', comma + 2) - comma - 2);
        }
    }
    const std::string loads = (threads == "128" ? "long" : flat ? "flat" : vec ? "vector" : "scalar") + ("-" + items);
    auto is = [&](const char* name) { return kernel.rfind(name, 0) == 0; };
    if (is("scan_whole_rows_kernel")) return "whole rows, " + loads;
    if (is("scan_row_groups_kernel")) return "row groups, " + loads;
    if (is("reduce_segments_kernel") || is("scan_segments_kernel") || is("carry_segments_kernel"))
        return "split rows, " + loads;
    if (is("scan_strided_rows_kernel")) return "strided (time-major)";
    if (is("row_sums_kernel")) return "row sums";
    if (is("n_step_vector_kernel")) {  // launched as n_step_vector_kernel<N, ...> with N = integral_constant's
        const std::string n_is = "integral_constant<int, ";
        const auto at = site.find(n_is);
        const std::string n = at == std::string::npos ? "?" : site.substr(at + n_is.size(), 1);
        return "n-step window, " + n + " steps";
    }
    if (is("n_step_kernel")) return "n-step, one thread per output";
    return kernel;
}

void observe_launches_as(const std::string& estimator) {
    puffadv::gpu::hip_cpu::launch_observer() = [estimator](const puffadv::gpu::hip_cpu::launch_record& r) {
        traversals_reached()[estimator].insert(traversal_of(r.kernel, r.site));
    };
}

}  // namespace hip_cpu_test
