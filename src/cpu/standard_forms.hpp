// GAE and V-trace with next_values, sample_mask or leaky V-trace's alpha on
// the CPU engine (standard_forms.cpp); every layout and dtype.
#pragma once

#include <puffadv/conventions.hpp>

#include "cpu/engine.hpp"

namespace puffadv::detail {

/// Whether a call is GAE or V-trace in one of these forms.
bool is_standard_form(const engine::arrays& a, const standard_params& p);

/// Computes such a call (its arguments checked).
void standard_form_cpu(engine::arrays a, const standard_params& p);

}  // namespace puffadv::detail
