// Every bad argument of the public C++ API is an exception that names the
// argument, thrown before anything is written: puffadv::type_error (TypeError in
// Python) for the wrong kind of array, std::invalid_argument (ValueError) otherwise.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference.hpp"

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class error_kind { value, type };

/// `call` must throw the given kind of error, with every word of `words` in its message.
template <typename F>
void expect_error(error_kind kind, F&& call, std::initializer_list<std::string> words) {
    try {
        call();
        ADD_FAILURE() << "no exception; expected one naming '" << *words.begin() << "'";
    } catch (const std::invalid_argument& e) {
        const bool is_type_error = dynamic_cast<const puffadv::type_error*>(&e) != nullptr;
        EXPECT_EQ(is_type_error, kind == error_kind::type)
            << (is_type_error ? "type_error" : "value error") << " where the other was expected: " << e.what();
        for (const std::string& word : words)
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos)
                << "message does not mention '" << word << "': " << e.what();
    }
}

// ---------------------------------------------------------------- typed CPU entry point

/// Valid buffers of a contiguous [4, 6] call; the output starts as NaN.
template <typename T>
struct host_call {
    static constexpr std::int64_t rows = 4, horizon = 6, n = rows * horizon;
    std::vector<T> values = std::vector<T>(n, T(0.5)), rewards = std::vector<T>(n, T(1)),
                   dones = std::vector<T>(n, T(0)), importance = std::vector<T>(n, T(1)),
                   advantages = std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
    const T *v = values.data(), *r = rewards.data(), *d = dones.data(), *i = importance.data();
    T* out = advantages.data();
    std::int64_t call_rows = rows, call_horizon = horizon;
    double gamma = 0.99, lambda = 0.95, rho_clip = 1.0, c_clip = 1.0;

    void operator()() const {
        puffadv::compute_puff_advantage_cpu(v, r, d, i, out, call_rows, call_horizon, T(gamma), T(lambda),
                                            T(rho_clip), T(c_clip));
    }
    bool output_untouched() const {
        for (T x : advantages)
            if (!std::isnan(x)) return false;
        return true;
    }
};

template <typename T>
void expect_host_error(const host_call<T>& call, std::initializer_list<std::string> words) {
    expect_error(error_kind::value, call, words);
    EXPECT_TRUE(call.output_untouched()) << "advantages written despite the error";
}

template <typename T>
void expect_bad_sizes_rejected() {
    host_call<T> call;
    call.call_rows = -1;
    expect_host_error(call, {"rows", "-1"});
    call = host_call<T>();
    call.call_horizon = -3;
    expect_host_error(call, {"horizon", "-3"});
}
TEST(CpuEntryPointArguments, NegativeSizes) {
    expect_bad_sizes_rejected<float>();
    expect_bad_sizes_rejected<double>();
}

template <typename T>
void expect_null_pointers_rejected() {
    const std::pair<const char*, int> names[] = {{"values", 0}, {"rewards", 1}, {"dones", 2}, {"importance", 3},
                                                 {"advantages", 4}};
    for (auto [name, which] : names) {
        host_call<T> call;
        if (which == 0) call.v = nullptr;
        if (which == 1) call.r = nullptr;
        if (which == 2) call.d = nullptr;
        if (which == 3) call.i = nullptr;
        if (which == 4) call.out = nullptr;
        expect_error(error_kind::value, call, {name, "null"});
    }
}
TEST(CpuEntryPointArguments, NullPointers) {
    expect_null_pointers_rejected<float>();
    expect_null_pointers_rejected<double>();
}

template <typename T>
void expect_bad_parameters_rejected() {
    for (double bad : {-0.1, 1.5, kNaN, kInf}) {
        host_call<T> call;
        call.gamma = bad;
        expect_host_error(call, {"gamma"});
    }
    for (double bad : {-0.5, 1.01, kNaN, -kInf}) {
        host_call<T> call;
        call.lambda = bad;
        expect_host_error(call, {"gae_lambda"});
    }
    for (double bad : {-1.0, kNaN, kInf}) {
        host_call<T> call;
        call.rho_clip = bad;
        expect_host_error(call, {"rho_clip"});
    }
    for (double bad : {-1e-3, kNaN, -kInf}) {
        host_call<T> call;
        call.c_clip = bad;
        expect_host_error(call, {"c_clip"});
    }
}
TEST(CpuEntryPointArguments, ParametersOutOfRange) {
    expect_bad_parameters_rejected<float>();
    expect_bad_parameters_rejected<double>();
}

template <typename T>
void expect_aliased_output_rejected() {
    host_call<T> call;
    const std::vector<T> original = call.values;
    call.out = call.values.data();
    expect_error(error_kind::value, call, {"advantages", "values"});
    EXPECT_EQ(call.values, original) << "values overwritten despite the error";
    call = host_call<T>();
    call.out = call.importance.data();
    expect_error(error_kind::value, call, {"advantages", "importance"});
    // A partial overlap counts too: the output starts inside rewards.
    std::vector<T> wide(3 * host_call<T>::n, T(1));
    call = host_call<T>();
    call.r = wide.data();
    call.out = wide.data() + host_call<T>::n / 2;
    expect_error(error_kind::value, call, {"advantages", "rewards"});
}
TEST(CpuEntryPointArguments, OutputAliasingAnInput) {
    expect_aliased_output_rejected<float>();
    expect_aliased_output_rejected<double>();
}

// ---------------------------------------------------------------- strided entry point

/// A valid float32 [5, 7] call through puff_arrays; each test breaks one thing.
struct strided_call {
    static constexpr std::int64_t rows = 5, horizon = 7;
    puff_test::strided_array<float> values{rows, horizon, puff_test::layout::row_major},
        rewards{rows, horizon, puff_test::layout::row_major}, dones{rows, horizon, puff_test::layout::row_major},
        importance{rows, horizon, puff_test::layout::row_major},
        advantages{rows, horizon, puff_test::layout::row_major};
    puffadv::puff_arrays arrays;
    puffadv::puff_params params{};

    strided_call() {
        for (auto* a : {&values, &rewards, &dones, &importance}) a->fill_from(puff_test::grid(rows, horizon, 0.25));
        arrays = {values.view, rewards.view, dones.view, importance.view, advantages.view};
    }
    puffadv::matrix& operator[](const std::string& name) {
        if (name == "values") return arrays.values;
        if (name == "rewards") return arrays.rewards;
        if (name == "dones") return arrays.dones;
        if (name == "importance") return arrays.importance;
        return arrays.advantages;
    }
    void operator()() const { puffadv::compute_puff_advantage(arrays, params); }
};

const char* const kNames[] = {"values", "rewards", "dones", "importance", "advantages"};

TEST(StridedArguments, ValidCallPasses) {
    strided_call call;
    ASSERT_NO_THROW(call());  // so every failure below is the one thing each test breaks
    EXPECT_FALSE(puffadv::find_puff_problem(call.arrays, call.params));
}

TEST(StridedArguments, WrongNumberOfDimensions) {
    for (const char* name : kNames) {
        for (int ndim : {1, 3}) {
            strided_call call;
            call[name].ndim = ndim;
            expect_error(error_kind::value, call, {name, "2-D", std::to_string(ndim) + "-D"});
        }
    }
}

TEST(StridedArguments, ShapesThatDiffer) {
    for (const char* name : {"rewards", "dones", "importance", "advantages"}) {
        strided_call call;
        call[name].rows = 4;
        expect_error(error_kind::value, call, {name, "[4, 7]", "values", "[5, 7]"});
        call = strided_call();
        call[name].cols = 6;
        expect_error(error_kind::value, call, {name, "[5, 6]"});
    }
}

TEST(StridedArguments, NegativeShapes) {
    strided_call call;
    for (const char* name : kNames) call[name].rows = -5;
    expect_error(error_kind::value, call, {"values", "-5"});
    call = strided_call();
    for (const char* name : kNames) call[name].cols = -1;
    expect_error(error_kind::value, call, {"values", "-1"});
}

TEST(StridedArguments, NonFloatOrMixedDtypes) {
    for (puffadv::dtype bad : {puffadv::dtype::uint8, puffadv::dtype::boolean}) {
        strided_call call;
        for (const char* name : kNames) call[name].type = bad;
        expect_error(error_kind::type, call, {"values", "float32", puffadv::dtype_name(bad)});
    }
    for (const char* name : {"rewards", "dones", "importance", "advantages"}) {
        strided_call call;
        call[name].type = puffadv::dtype::float64;
        expect_error(error_kind::type, call, {name, "float64", "float32"});
    }
}

TEST(StridedArguments, MixedDevices) {
    strided_call call;
    call["importance"].device = {puffadv::device_type::cuda, 0};
    expect_error(error_kind::value, call, {"importance", "cuda:0", "values", "cpu"});
    call = strided_call();
    for (const char* name : kNames) call[name].device = {puffadv::device_type::cuda, 0};
    call["advantages"].device = {puffadv::device_type::cuda, 1};
    expect_error(error_kind::value, call, {"advantages", "cuda:1", "cuda:0"});
}

TEST(StridedArguments, DeviceThisBuildCannotUse) {
    // Valid arrays on a device this build cannot use: an error (never a result)
    // that names the device and the remedy. Its type is the fallback's business.
    std::string remedy = "PUFF_CUDA=ON";
    if (PUFFADV_HAS_CUDA) {
        if (puffadv::query_gpu(puffadv::device_type::cuda).device_count > 0)
            GTEST_SKIP() << "a CUDA device is present: the GPU tests cover this build";
        remedy = "no usable device";
    }
    strided_call call;  // pointers are never dereferenced: the call stops at dispatch
    for (const char* name : kNames) call[name].device = {puffadv::device_type::cuda, 0};
    try {
        call();
        ADD_FAILURE() << "no exception for CUDA arrays this build cannot compute on";
    } catch (const std::exception& e) {
        for (const std::string& word : {std::string("values"), std::string("cuda:0"), remedy})
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
}

TEST(StridedArguments, ReadOnlyOutput) {
    strided_call call;
    call["advantages"].writable = false;
    expect_error(error_kind::value, call, {"advantages", "read-only"});
}

TEST(StridedArguments, OutputWithRepeatedElements) {
    strided_call call;
    call["advantages"].row_stride = 0;  // every row is the same memory
    expect_error(error_kind::value, call, {"advantages", "overlapping"});
    call = strided_call();
    call["advantages"].col_stride = 0;
    expect_error(error_kind::value, call, {"advantages", "overlapping"});
    call = strided_call();
    call["advantages"].row_stride = 3;  // rows of 7 steps 3 apart share elements
    expect_error(error_kind::value, call, {"advantages", "overlapping"});
}

TEST(StridedArguments, OutputOverlappingAnInput) {
    for (const char* name : {"values", "rewards", "dones", "importance"}) {
        strided_call call;
        call["advantages"] = call[name];
        call["advantages"].writable = true;
        expect_error(error_kind::value, call, {"advantages", "overlaps", name});
    }
    // Interleaved with values (every other float): distinct elements, but the check
    // is by address range, so it is refused rather than risked.
    std::vector<float> shared(2 * strided_call::rows * strided_call::horizon, 0.5f);
    strided_call call;
    call["values"].data = shared.data();
    call["values"].row_stride = 2 * strided_call::horizon, call["values"].col_stride = 2;
    call["advantages"] = call["values"];
    call["advantages"].data = shared.data() + 1;
    expect_error(error_kind::value, call, {"advantages", "overlaps", "values"});
}

TEST(StridedArguments, ParametersOutOfRange) {
    const std::pair<const char*, double puffadv::puff_params::*> fields[] = {
        {"gamma", &puffadv::puff_params::gamma},
        {"gae_lambda", &puffadv::puff_params::gae_lambda},
        {"rho_clip", &puffadv::puff_params::rho_clip},
        {"c_clip", &puffadv::puff_params::c_clip}};
    for (auto [name, field] : fields) {
        for (double bad : {-0.25, kNaN, kInf}) {
            strided_call call;
            call.params.*field = bad;
            expect_error(error_kind::value, call, {name});
        }
    }
}

}  // namespace
