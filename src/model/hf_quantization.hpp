#pragma once
// A checkpoint's weight quantization, read from its `quantization_config` (or ModelOpt's
// hf_quant_config.json) into Model::weight_formats, tensor by tensor (private to model).

#include <yaml-cpp/yaml.h>

#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::model {

/// Fills m.weight_formats, m.quantization and m.weight_dtype from `config` (the
/// quantization_config map; for ModelOpt's legacy file its `quantization` map), for the
/// tensors of the finished model `m`. A method or layout kvcalc does not model is a warning
/// that names --weight-dtype, and leaves the weights in the model dtype.
void read_quantization(const YAML::Node& config, Model& m, Diagnostics& diag);

} // namespace kvcalc::model
