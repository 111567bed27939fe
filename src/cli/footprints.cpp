// The footprints of `footprint` and `compare`: models loaded with their exact KV bytes, and
// their JSON, tables and flat CSV.

#include "footprints.hpp"

#include <kvcalc/core/units.hpp>

namespace kvcalc::cli {

namespace {

double ratio(u64 a, u64 b) {
  return static_cast<double>(a) / static_cast<double>(b);
}

Json model_json(const Entry& e) {
  const Model& m = e.model;
  const Footprint& f = e.footprint;
  Json j = Json::object();
  j["name"] = m.name;
  j["display_name"] = m.display_name;
  j["source"] = m.source;
  j["attention"] = attention_label(m);
  j["attention_kind"] = std::string(attention_kind_name(m.attention.kind));
  j["layers"] = m.layers;
  j["kv_cache"]["dtype"] = std::string(dtype_name(f.format.dtype));
  j["kv_cache"]["scale"] = scale_name(f.format.scale);
  if (f.format.scale.granularity != ScaleGranularity::none) {
    j["kv_cache"]["scale_dtype"] = std::string(dtype_name(f.format.scale.dtype));
  }
  j["kv_cache"]["mla_format"] =
      f.format.mla ? Json(std::string(mla_format_name(f.format.mla_format))) : Json();
  j["kv_bytes_per_token_per_layer"] = f.bytes_per_token_per_layer;
  j["kv_bytes_per_token"] = f.bytes_per_token;
  j["state_bytes_per_sequence"] = f.state_bytes_per_sequence;
  Json groups = Json::array();
  for (const auto& g : f.groups) {
    const CacheSpec& spec = g.spec;
    bool windowed = spec.kind == CacheKind::sliding || spec.kind == CacheKind::chunked;
    Json gj = Json::object();
    gj["type"] = g.name;
    gj["layers"] = g.layers;
    gj["window"] = windowed ? Json(spec.window) : Json();
    gj["kv_bytes_per_token_per_layer"] = spec.bytes_per_token;
    gj["state_bytes_per_layer"] = spec.state_bytes;
    if (spec.kind == CacheKind::state) {
      gj["state_kind"] = std::string(k_state_kinds.name(spec.state_kind));
      Json tensors = Json::array();
      for (const auto& t : spec.state) {
        Json tj = Json::object();
        tj["name"] = t.name;
        Json shape = Json::array();
        for (u64 axis : t.shape) {
          shape.push_back(axis);
        }
        tj["shape"] = std::move(shape);
        tj["dtype"] = std::string(dtype_name(t.dtype));
        tj["bytes"] = t.bytes();
        tensors.push_back(std::move(tj));
      }
      gj["state"] = std::move(tensors);
    }
    groups.push_back(std::move(gj));
  }
  j["layer_groups"] = std::move(groups);
  j["block_size"] = f.block_size ? Json(f.block_size) : Json();
  Json contexts = Json::array();
  for (const auto& c : f.contexts) {
    Json cj = Json::object();
    cj["tokens"] = c.tokens;
    cj["kv_bytes"] = c.kv_bytes;
    if (f.block_size) {
      cj["paged_kv_bytes"] = c.paged_kv_bytes;
      cj["paging_waste_bytes"] = c.paged_kv_bytes - c.kv_bytes;
    }
    contexts.push_back(std::move(cj));
  }
  j["contexts"] = std::move(contexts);
  return j;
}

} // namespace

void footprint_tables(const Entry& e, std::vector<Table>& tables) {
  const Model& m = e.model;
  const Footprint& f = e.footprint;
  Table layers;
  layers.title = m.display_name + " (" + m.name + "): " + attention_detail(m) + ", " +
                 group_digits(m.layers) + " layers, KV cache " + describe(f.format);
  bool windowed = false;
  bool state = false;
  for (const auto& g : f.groups) {
    windowed = windowed || g.spec.window > 0;
    state = state || g.spec.kind == CacheKind::state;
  }
  layers.columns = {{"layers", "layer_type"}, {"count", "layers"}};
  if (windowed) {
    layers.columns.push_back({"window", "window_tokens"});
  }
  layers.columns.push_back({"KV/token/layer", "kv_bytes_per_token_per_layer"});
  layers.columns.push_back({"KV/token", "kv_bytes_per_token"});
  if (state) {
    layers.columns.push_back({"state/sequence", "state_bytes_per_sequence"});
  }
  auto add_row = [&](Cell type, u64 count, Cell window, Cell rate, Cell per_token, Cell held) {
    std::vector<Cell> row{std::move(type), Cell::count(count)};
    if (windowed) {
      row.push_back(std::move(window));
    }
    row.push_back(std::move(rate));
    row.push_back(std::move(per_token));
    if (state) {
      row.push_back(std::move(held));
    }
    layers.rows.push_back(std::move(row));
  };
  for (const auto& g : f.groups) {
    bool is_state = g.spec.kind == CacheKind::state;
    add_row(Cell::text(g.name), g.layers,
            g.spec.window > 0 ? Cell::count(g.spec.window) : Cell::empty(),
            is_state ? Cell::empty() : Cell::bytes_exact(g.spec.bytes_per_token),
            is_state ? Cell::empty() : Cell::bytes_exact(g.spec.bytes_per_token * g.layers),
            is_state ? Cell::bytes_exact(g.spec.state_bytes * g.layers) : Cell::empty());
  }
  // Layers that store nothing: those reading another layer's cache, and those without a
  // token mixer (MLP-only layers of a pattern).
  u64 stored = 0;
  u64 shared = 0;
  for (const auto& g : f.groups) {
    stored += g.spec.kind == CacheKind::indexer ? 0 : g.layers; // beside its layers' own cache
    shared += g.shared_layers;
  }
  if (shared > 0) {
    add_row(Cell::text("shared"), shared, Cell::empty(), Cell::empty(), Cell::bytes_exact(0),
            Cell::empty());
  }
  if (m.layers > stored + shared) {
    add_row(Cell::text("none"), m.layers - stored - shared, Cell::empty(), Cell::empty(),
            Cell::bytes_exact(0), Cell::empty());
  }
  if (layers.rows.size() > 1) {
    add_row(Cell::text("total"), m.layers, Cell::empty(), Cell::empty(),
            Cell::bytes_exact(f.bytes_per_token),
            f.state_bytes_per_sequence ? Cell::bytes_exact(f.state_bytes_per_sequence)
                                       : Cell::empty());
  }
  tables.push_back(std::move(layers));

  Table contexts;
  contexts.columns = {
      {"context", "context"}, {"tokens", "tokens"}, {"KV bytes", "kv_bytes"}, {"KV", "kv"}};
  if (f.block_size) {
    contexts.columns.push_back(
        {"paged KV (block " + group_digits(f.block_size) + ")", "paged_kv_bytes"});
    contexts.columns.push_back({"waste", "paging_waste_bytes"});
  }
  for (const auto& c : f.contexts) {
    std::vector<Cell> row{Cell::text(context_label(c.tokens)), Cell::count(c.tokens),
                          Cell::count(c.kv_bytes), Cell::bytes(c.kv_bytes)};
    if (f.block_size) {
      row.push_back(Cell::bytes(c.paged_kv_bytes));
      row.push_back(Cell::bytes(c.paged_kv_bytes - c.kv_bytes));
    }
    contexts.rows.push_back(std::move(row));
  }
  tables.push_back(std::move(contexts));
}

Table flat_table(const std::vector<Entry>& entries, const Entry* baseline) {
  Table t;
  t.columns = {{"", "name"},
               {"", "attention"},
               {"", "layers"},
               {"", "kv_dtype"},
               {"", "kv_bytes_per_token_per_layer"},
               {"", "kv_bytes_per_token"},
               {"", "state_bytes_per_sequence"}};
  if (baseline) {
    t.columns.push_back({"", "ratio_to_baseline"});
  }
  t.columns.push_back({"", "tokens"});
  t.columns.push_back({"", "kv_bytes"});
  bool paged = !entries.empty() && entries.front().footprint.block_size != 0;
  if (paged) {
    t.columns.push_back({"", "paged_kv_bytes"});
  }
  for (const auto& e : entries) {
    for (const auto& c : e.footprint.contexts) {
      std::vector<Cell> row{Cell::text(e.model.name),
                            Cell::text(attention_label(e.model)),
                            Cell::count(e.model.layers),
                            Cell::text(describe(e.footprint.format)),
                            Cell::count(e.footprint.bytes_per_token_per_layer),
                            Cell::count(e.footprint.bytes_per_token),
                            Cell::count(e.footprint.state_bytes_per_sequence)};
      if (baseline) {
        row.push_back(Cell::ratio(static_cast<double>(e.footprint.bytes_per_token) /
                                  static_cast<double>(baseline->footprint.bytes_per_token)));
      }
      row.push_back(Cell::count(c.tokens));
      row.push_back(Cell::count(c.kv_bytes));
      if (paged) {
        row.push_back(Cell::count(c.paged_kv_bytes));
      }
      t.rows.push_back(std::move(row));
    }
  }
  return t;
}

Table compare_table(const std::vector<Entry>& entries, const Entry& base) {
  Table t;
  t.title = "KV cache per sequence, baseline " + base.model.name;
  t.columns = {{"model", "name"},
               {"attention", "attention"},
               {"layers", "layers"},
               {"KV cache", "kv_cache"},
               {"KV/token/layer", "kv_bytes_per_token_per_layer"},
               {"vs base/layer", "layer_change"},
               {"KV/token", "kv_bytes_per_token"},
               {"vs base/token", "token_change"}};
  for (const auto& c : base.footprint.contexts) {
    t.columns.push_back({"KV @ " + context_label(c.tokens), "kv_bytes"});
  }
  if (base.capacity) {
    for (const auto& c : base.footprint.contexts) {
      t.columns.push_back({"seqs @ " + context_label(c.tokens), "max_sequences"});
    }
  }
  for (const auto& e : entries) {
    const Footprint& f = e.footprint;
    std::vector<Cell> row{
        Cell::text(e.model.name),
        Cell::text(attention_detail(e.model)),
        Cell::count(e.model.layers),
        Cell::text(describe(f.format)),
        Cell::bytes_exact(f.bytes_per_token_per_layer),
        Cell::percent(ratio(f.bytes_per_token_per_layer, base.footprint.bytes_per_token_per_layer) -
                      1.0),
        Cell::bytes_exact(f.bytes_per_token),
        Cell::percent(ratio(f.bytes_per_token, base.footprint.bytes_per_token) - 1.0)};
    for (const auto& c : f.contexts) {
      row.push_back(Cell::bytes(c.kv_bytes));
    }
    if (e.capacity) {
      for (const auto& c : e.capacity->contexts) {
        row.push_back(e.capacity->fits ? Cell::count(c.max_sequences) : Cell::text("no fit"));
      }
    }
    t.rows.push_back(std::move(row));
  }
  auto factor = [](u64 value, u64 reference) {
    if (value == reference) {
      return std::string("as much");
    }
    if (value < reference) {
      return format_cell(Cell::ratio(ratio(reference, value)), ByteUnits::iec) + " less";
    }
    return format_cell(Cell::ratio(ratio(value, reference)), ByteUnits::iec) + " more";
  };
  if (base.capacity) {
    const CapacityResult& c = *base.capacity;
    t.notes.push_back("max sequences on " + group_digits(c.parallel.gpus) + " × " + c.gpu +
                      ", tp " + group_digits(c.parallel.tp) + ", engine " +
                      std::string(engine_name(c.engine)) +
                      " (kvcalc capacity for the budget of each)");
  }
  // The headline compares what each model holds at the table's longest context, windows and
  // states included; the per-layer and full per-token rates follow.
  std::size_t longest = 0;
  for (std::size_t i = 0; i < base.footprint.contexts.size(); ++i) {
    if (base.footprint.contexts[i].tokens > base.footprint.contexts[longest].tokens) {
      longest = i;
    }
  }
  for (const auto& e : entries) {
    if (&e == &base || e.footprint.contexts.empty()) {
      continue;
    }
    const ContextFootprint& mine = e.footprint.contexts[longest];
    const ContextFootprint& theirs = base.footprint.contexts[longest];
    if (mine.kv_bytes == 0 || theirs.kv_bytes == 0) {
      continue;
    }
    std::string line = e.model.name + " holds " + factor(mine.kv_bytes, theirs.kv_bytes) +
                       (mine.kv_bytes == theirs.kv_bytes ? " as " : " than ") + base.model.name +
                       " at " + context_label(mine.tokens);
    std::vector<std::string> rates;
    const u64 layer = e.footprint.bytes_per_token_per_layer;
    const u64 base_layer = base.footprint.bytes_per_token_per_layer;
    if (layer > 0 && base_layer > 0) {
      rates.push_back("per layer " + factor(layer, base_layer));
    }
    if (e.footprint.bytes_per_token > 0 && base.footprint.bytes_per_token > 0) {
      rates.push_back("per token at the full rate " +
                      factor(e.footprint.bytes_per_token, base.footprint.bytes_per_token));
    }
    for (std::size_t i = 0; i < rates.size(); ++i) {
      line += (i == 0 ? "; " : ", ") + rates[i];
    }
    t.notes.push_back(line);
  }
  return t;
}

std::vector<Entry> footprint_entries(const std::vector<std::string>& specs,
                                     const FootprintOptions& options,
                                     std::vector<std::string>& warnings) {
  std::vector<Entry> entries;
  bool any_mla = false;
  for (Model& m : load_models(specs, warnings)) {
    any_mla = any_mla || m.attention.kind == AttentionKind::mla;
    Footprint f = compute_footprint(m, options);
    warnings.insert(warnings.end(), f.notes.begin(), f.notes.end());
    entries.push_back({std::move(m), std::move(f), std::nullopt});
  }
  if (!any_mla && options.cache.mla_format != MlaCacheFormat::latent) {
    warnings.push_back("--mla-cache applies only to MLA models; none was given");
  }
  return entries;
}

Json entry_json(const Entry& e, const Entry* base, bool explain) {
  Json mj = model_json(e);
  if (base) {
    mj["ratio_to_baseline"]["per_layer"] =
        ratio(e.footprint.bytes_per_token_per_layer, base->footprint.bytes_per_token_per_layer);
    mj["ratio_to_baseline"]["per_token"] =
        ratio(e.footprint.bytes_per_token, base->footprint.bytes_per_token);
  }
  if (e.capacity) {
    const CapacityResult& c = *e.capacity;
    Json cj = Json::object();
    cj["gpu"] = c.gpu;
    cj["gpus"] = c.parallel.gpus;
    cj["tp"] = c.parallel.tp;
    cj["engine"] = std::string(engine_name(c.engine));
    cj["fits"] = c.fits;
    cj["kv_pool_bytes_per_gpu"] = c.kv_pool_bytes_per_gpu;
    cj["kv_tokens"] = c.kv_tokens;
    Json contexts = Json::array();
    for (const auto& x : c.contexts) {
      Json xj = Json::object();
      xj["tokens"] = x.tokens;
      xj["max_sequences"] = x.max_sequences;
      xj["max_concurrency"] = x.max_concurrency;
      contexts.push_back(std::move(xj));
    }
    cj["contexts"] = std::move(contexts);
    mj["capacity"] = std::move(cj);
  }
  if (explain) {
    mj["derivation"] = string_array(render_derivation(e.footprint.derivation));
  }
  return mj;
}

void explain_lines(const Entry& e, std::vector<std::string>& lines) {
  lines.emplace_back();
  std::vector<std::string> derivation = render_derivation(e.footprint.derivation);
  lines.insert(lines.end(), derivation.begin(), derivation.end());
}

void add_footprint_options(CLI::App* cmd, std::vector<u64>& contexts, CacheRequest& cache,
                           std::optional<u64>& block_size) {
  add_counts(cmd, "--context", contexts,
             "Context lengths in tokens, comma-separated: 4096, 4k (= 4,096), 128k (= 131,072), "
             "1M (= 1,048,576) [default: 4k,32k,128k]")
      ->type_name("TOKENS,...")
      ->group(k_group_model);
  add_cache_options(cmd, cache);
  add_count(cmd, "--block-size", block_size,
            "Page size in tokens: round each layer's tokens up to whole blocks and report the "
            "waste [default: no paging]")
      ->type_name("TOKENS")
      ->group(k_group_model);
}

void add_explain_option(CLI::App* cmd, bool& explain) {
  cmd->add_flag("--explain", explain, "Print the derivation of every number, term by term")
      ->group(k_group_output);
}

} // namespace kvcalc::cli
