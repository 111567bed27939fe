#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <sys/stat.h>

#include <kvcalc/cli/app.hpp>
#include <kvcalc/core/error.hpp>
#include <kvcalc/core/version.hpp>

#include "../../src/cli/command.hpp"
#include "../../src/cli/sweep.hpp"
#include <kvcalc/measure/measure.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>

using namespace kvcalc;
using namespace kvcalc::measure;
using namespace kvcalc::model;

namespace {

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

Run invoke(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"kvcalc"};
  for (const auto& a : args) {
    argv.push_back(a.c_str());
  }
  std::ostringstream out;
  std::ostringstream err;
  Run r;
  r.code = kvcalc::cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("kvcalc-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

} // namespace

TEST_CASE("import -o writes a YAML that loads back to the same footprint", "[cli]") {
  auto dir = temp_dir();
  auto yaml = dir / "my-model.yaml";
  Run r = invoke({"import", std::string(KVCALC_SOURCE_DIR) + "/tests/data/hf/gemma-2-9b.json", "-o",
                  yaml.string()});
  CHECK(r.code == 0);
  CHECK(r.out.empty());
  CHECK(r.err.find("wrote " + yaml.string()) != std::string::npos);
  Diagnostics d;
  Model m = load_model(yaml.string(), d);
  CHECK(d.warnings.empty());
  const Model* zoo = find_builtin_model("gemma-2-9b");
  REQUIRE(zoo != nullptr);
  CHECK(m.layer_types == zoo->layer_types);
  Run a = invoke({"footprint", yaml.string(), "--format", "csv", "--context", "8k"});
  Run b = invoke({"footprint", "gemma-2-9b", "--format", "csv", "--context", "8k"});
  // Same bytes; only the name column differs.
  CHECK(a.out.substr(a.out.find(",hybrid")) == b.out.substr(b.out.find(",hybrid")));
  std::filesystem::remove_all(dir);
}

TEST_CASE("an output file holds exactly what stdout would carry", "[cli]") {
  auto dir = temp_dir();
  auto file = dir / "out.json";
  Run to_file =
      invoke({"compare", "llama-3.1-8b", "deepseek-v3", "--format", "json", "-o", file.string()});
  Run to_stdout = invoke({"compare", "llama-3.1-8b", "deepseek-v3", "--format", "json"});
  CHECK(to_file.out.empty());
  CHECK(slurp(file) == to_stdout.out);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the version line says whether CUDA support is built in", "[cli]") {
  Run r = invoke({"--version"});
  CHECK(r.code == 0);
  CHECK(r.out.find("kvcalc " + std::string(version())) == 0);
  CHECK(r.out.find(built_with_cuda() ? "CUDA support: built in" : "CUDA support: not built") !=
        std::string::npos);
}

TEST_CASE("usage errors are InputErrors with exit code 2", "[cli]") {
  try {
    (void)invoke({"footprint"});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_input);
    CHECK(std::string(e.what()).find("model is required") != std::string::npos);
  }
  CHECK_THROWS_AS(invoke({"footprint", "llama-3.1-8b", "-o", "/nonexistent-dir/x.txt"}), Error);
}

TEST_CASE("a failing plan exits 3, appends its report and writes its JSON", "[cli][plan]") {
  auto dir = temp_dir();
  std::string plan = std::string(KVCALC_SOURCE_DIR) + "/tests/plans/failing.yaml";
  {
    std::ofstream summary(dir / "report.md");
    summary << "earlier step\n";
  }
  Run r = invoke({"plan", plan, "--report", (dir / "report.md").string(), "--format", "json", "-o",
                  (dir / "result.json").string()});
  CHECK(r.code == 3);
  std::string md = slurp(dir / "report.md");
  CHECK(md.starts_with("earlier step\n# Capacity plan: ")); // appended, as a job summary is
  CHECK(md.find("## llama-3.1-70b on two H100: FAIL") != std::string::npos);
  CHECK(md.find("**1 of 2 requirements hold: plan FAILED**") != std::string::npos);
  CHECK(md.find("_kvcalc " + std::string(version()) + ", `kvcalc plan " + plan + "`_") !=
        std::string::npos);
  std::string json = slurp(dir / "result.json");
  CHECK(json.find("\"passed\": false") != std::string::npos);
  // Thresholds and actual values are numbers, the display text beside them.
  CHECK(json.find("\"kind\": \"min_sequences\"") != std::string::npos);
  CHECK(json.find("\"actual_text\": ") != std::string::npos);
  CHECK_THROWS_WITH(invoke({"plan", plan, "--json", "x.json"}),
                    Catch::Contains("--json FILE is now --format json -o FILE"));
  Run ok = invoke({"plan", std::string(KVCALC_SOURCE_DIR) + "/tests/plans/passing.yaml"});
  CHECK(ok.code == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("measure on the CPU: checked kernels, sane figures, a profile the roofline reads",
          "[cli][measure]") {
  auto dir = temp_dir();
  auto profile = dir / "cpu.yaml";
  Run r = invoke({"measure", "--backend", "cpu", "--quick", "--heads", "2", "--batch", "1",
                  "--context", "256", "--profile", profile.string(), "--format", "json"});
  CHECK(r.code == 0);
  CHECK(r.out.find("\"name\": \"mla_decode.absorbed\"") != std::string::npos);
  CHECK(r.out.find("\"name\": \"mla_decode.naive\"") != std::string::npos);
  // The absorbed kernel's page was timed at its two query rows, and bounds it in the profile.
  CHECK(r.out.find("\"absorbed_page_2_rows_flops_per_s\": {") != std::string::npos);
  std::string yaml = slurp(profile);
  CHECK(yaml.find("backend: cpu") != std::string::npos);
  CHECK(yaml.find("  absorbed_page_2_rows_flops_per_s: {median: ") != std::string::npos);
  // A named GPU gets the measured ceilings, with a warning that they are not its own.
  Run roof =
      invoke({"roofline", "llama-3.1-8b", "--gpu", "h100", "--device-profile", profile.string()});
  CHECK(roof.code == 0);
  CHECK(roof.out.find("device profile " + profile.string() + " (cpu") != std::string::npos);
  std::string mismatch = "h100-sxm takes the ceilings the cpu backend measured on ";
  CHECK(roof.err.find(mismatch) != std::string::npos);
  CHECK(roof.err.find("use --gpu auto to model the measured device") != std::string::npos);
  // So does the MLA crossover, which returns early.
  Run crossover = invoke({"roofline", "deepseek-v3", "--mla-crossover", "--gpu", "h100",
                          "--device-profile", profile.string()});
  CHECK(crossover.code == 0);
  CHECK(crossover.err.find(mismatch) != std::string::npos);
  // --gpu auto (any case), or no --gpu: the measured CPU is the device.
  for (std::string gpu : {"auto", "AUTO", ""}) {
    std::vector<std::string> args{"roofline",       "llama-3.1-8b", "--device-profile",
                                  profile.string(), "--format",     "csv"};
    if (!gpu.empty()) {
      args.insert(args.end(), {"--gpu", gpu});
    }
    Run cpu = invoke(args);
    CHECK(cpu.code == 0);
    CHECK(cpu.out.find("llama-3.1-8b,cpu,1,decode") != std::string::npos);
    CHECK(cpu.err.find("takes the ceilings") == std::string::npos);
  }
  // A measured CPU is one device: a deployment over several is refused, not priced with no
  // interconnect.
  for (std::string several : {"--tp", "--pp"}) {
    CHECK_THROWS_WITH(
        invoke({"capacity", "llama-3.1-8b", "--device-profile", profile.string(), several, "2"}),
        Catch::Contains("the device profile measured a CPU, one device"));
  }
  // With --measure on a machine without a GPU, before the probes run.
  if (!kvcalc::measure::cuda_device_present()) {
    CHECK_THROWS_WITH(invoke({"roofline", "llama-3.1-8b", "--measure", "--tp", "2"}),
                      Catch::Contains("the device profile measured a CPU, one device"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "measure: --backend cuda is a clear usage error without a usable GPU, auto's pick with one",
    "[cli][measure]") {
  if (kvcalc::measure::cuda_device_present()) {
    // A GPU is visible, so the build has CUDA: cuda is accepted and auto chooses it.
    CHECK(kvcalc::measure::cuda_backend_built());
    CHECK(kvcalc::measure::make_measure_backend("cuda")->name() == "cuda");
    CHECK(kvcalc::measure::make_measure_backend("auto")->name() == "cuda");
    return;
  }
  std::string want = kvcalc::measure::cuda_backend_built()
                         ? "no CUDA device is visible"
                         : "this kvcalc was built without CUDA support";
  try {
    (void)invoke({"measure", "--backend", "cuda"});
    FAIL("--backend cuda ran without a GPU");
  } catch (const kvcalc::InputError& e) {
    std::string message = e.what();
    CHECK(message.find("--backend cuda: " + want) != std::string::npos);
    CHECK(message.find("use --backend cpu") != std::string::npos);
  }
  // auto falls back to the CPU.
  CHECK(kvcalc::measure::make_measure_backend("auto")->name() == "cpu");
}

/// The first data row's value in column `name` of a CSV document.
std::string csv_field(const std::string& csv, const std::string& name) {
  auto split = [](const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream in(line);
    for (std::string f; std::getline(in, f, ',');) {
      fields.push_back(f);
    }
    return fields;
  };
  std::stringstream lines(csv);
  std::string header;
  std::string row;
  std::getline(lines, header);
  std::getline(lines, row);
  std::vector<std::string> names = split(header);
  std::vector<std::string> values = split(row);
  auto it = std::find(names.begin(), names.end(), name);
  REQUIRE(it != names.end());
  auto index = static_cast<std::size_t>(it - names.begin());
  REQUIRE(index < values.size());
  return values[index];
}

TEST_CASE("capacity's decode step at full load is the roofline's step at that batch",
          "[cli][capacity]") {
  std::string profile = std::string(KVCALC_SOURCE_DIR) + "/tests/data/profiles/h200-example.yaml";
  Run cap = invoke({"capacity", "llama-3.1-8b", "--gpu", "h200", "--context", "8k",
                    "--device-profile", profile, "--format", "csv"});
  REQUIRE(cap.code == 0);
  std::string sequences = csv_field(cap.out, "max_sequences");
  double step = std::stod(csv_field(cap.out, "decode_step_s"));
  Run roof = invoke({"roofline", "llama-3.1-8b", "--gpu", "h200", "--batch", sequences, "--context",
                     "8k", "--device-profile", profile, "--format", "csv"});
  REQUIRE(roof.code == 0);
  CHECK(std::stod(csv_field(roof.out, "time_s")) == Approx(step).epsilon(1e-12));
  CHECK(std::stod(sequences) > 1);
}

TEST_CASE("simulate writes a per-step timeline and an SVG of occupancy and throughput",
          "[cli][sim]") {
  auto dir = temp_dir();
  auto csv = dir / "timeline.csv";
  auto svg = dir / "timeline.svg";
  Run r = invoke({"simulate", "llama-3.1-8b", "deepseek-v2-lite", "--gpu", "h100", "--arrival",
                  "burst", "--requests", "20", "--prompt-tokens", "500", "--output-tokens", "20",
                  "--timeline", csv.string(), "--plot", svg.string(), "--format", "json"});
  REQUIRE(r.code == 0);
  CHECK(r.err.find("wrote " + csv.string()) != std::string::npos);
  std::string timeline = slurp(csv);
  CHECK(timeline.starts_with("model,gpu,tp,rate_per_s,step,start_s,duration_s,running,waiting,"
                             "decode_tokens,prefill_tokens,kv_blocks_used,kv_occupancy,"
                             "preemptions,completed\n"));
  CHECK(timeline.find("\nllama-3.1-8b,h100-sxm,1,,1,0,") != std::string::npos);
  CHECK(timeline.find("\ndeepseek-v2-lite,h100-sxm,1,,1,0,") != std::string::npos);
  std::string plot = slurp(svg);
  CHECK(plot.starts_with("<svg"));
  CHECK(plot.find("KV-cache occupancy over time") != std::string::npos);
  CHECK(plot.find("Throughput over time") != std::string::npos);
  CHECK(plot.find("deepseek-v2-lite") != std::string::npos);
  CHECK(r.out.find("\"requests_completed\": 20") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the bash completion and the man page come from the option definitions",
          "[cli][install]") {
  Run completion = invoke({"completion", "bash"});
  REQUIRE(completion.code == 0);
  for (const char* command : {"footprint", "compare", "capacity", "roofline", "simulate", "measure",
                              "plan", "gpus", "models", "import"}) {
    CHECK(completion.out.find(std::string("    ") + command + ")\n") != std::string::npos);
  }
  CHECK(completion.out.find("--device-profile") != std::string::npos);
  CHECK(completion.out.find("compgen -W \"table md json csv\"") != std::string::npos);
  CHECK(completion.out.find(" deepseek-v3 ") != std::string::npos); // models for MODEL
  CHECK(completion.out.find(" h200 ") != std::string::npos);        // GPUs for --gpu
  CHECK(completion.out.find("complete -F _kvcalc kvcalc") != std::string::npos);
  Run man = invoke({"man"});
  REQUIRE(man.code == 0);
  CHECK(man.out.starts_with(".\\\" Generated by `kvcalc man`"));
  CHECK(man.out.find(".SS \"kvcalc simulate MODEL... [options]\"") != std::string::npos);
  CHECK(man.out.find(".B \\-\\-format \\fItable|md|json|csv\\fR") != std::string::npos);
  CHECK(man.out.find(".SH EXIT STATUS") != std::string::npos);
  Run zsh = invoke({"completion", "zsh"});
  CHECK(zsh.out.starts_with("#compdef kvcalc"));
  CHECK(zsh.out.find("'--engine[Budget rules") != std::string::npos);
  CHECK(zsh.out.find("]:value:(plain vllm sglang trtllm)'") != std::string::npos);
  CHECK(zsh.out.find("'(-o --output)'{-o,--output}") != std::string::npos);
  Run fish = invoke({"completion", "fish"});
  CHECK(fish.out.find("-l engine -x -a 'plain vllm sglang trtllm'") != std::string::npos);
  CHECK_THROWS_AS(invoke({"completion", "tcsh"}), kvcalc::InputError);
}

TEST_CASE("docs/cli.md's option tables are the commands' own definitions", "[cli][docs]") {
  Run man = invoke({"man", "--markdown"});
  REQUIRE(man.code == 0);
  // One section per command: "### `kvcalc NAME`" and its tables.
  std::map<std::string, std::string> sections;
  const std::string heading = "### `kvcalc ";
  for (std::size_t at = man.out.find(heading); at != std::string::npos;) {
    std::size_t name_end = man.out.find('`', at + heading.size());
    std::string name = man.out.substr(at + heading.size(), name_end - at - heading.size());
    std::size_t next = man.out.find(heading, name_end);
    std::size_t body = man.out.find('\n', name_end) + 1;
    std::string text =
        man.out.substr(body, (next == std::string::npos ? man.out.size() : next) - body);
    while (!text.empty() && text.front() == '\n') {
      text.erase(0, 1);
    }
    while (!text.empty() && text.back() == '\n') {
      text.pop_back();
    }
    sections[name] = text;
    at = next;
  }
  REQUIRE(sections.size() == 12);
  const std::filesystem::path path = std::filesystem::path(KVCALC_SOURCE_DIR) / "docs/cli.md";
  std::string doc = slurp(path);
  std::string wanted = doc;
  for (const auto& [name, text] : sections) {
    INFO(name);
    const std::string open = "<!-- options: " + name + " -->\n";
    const std::string close = "<!-- end options -->";
    std::size_t start = wanted.find(open);
    REQUIRE(start != std::string::npos); // every command has its block
    std::size_t end = wanted.find(close, start);
    REQUIRE(end != std::string::npos);
    wanted.replace(start + open.size(), end - start - open.size(), text + "\n");
  }
  if (std::getenv("KVCALC_UPDATE_GOLDEN") != nullptr && wanted != doc) {
    std::ofstream(path, std::ios::binary) << wanted;
    doc = wanted;
  }
  CHECK(doc == wanted); // regenerate with KVCALC_UPDATE_GOLDEN=1
}

namespace {

/// A run that may fail: the exit code an error maps to, or the command's.
Run attempt(const std::vector<std::string>& args) {
  try {
    return invoke(args);
  } catch (const Error& e) {
    return {static_cast<int>(e.code()), "", e.what()};
  }
}

/// How one option is exercised: its value(s), and what the base command line needs for the
/// option to matter (appended to both runs).
struct Probe {
  std::vector<std::string> values;
  std::vector<std::string> context = {};
};

} // namespace

namespace {

/// A file in the test's own folder.
using Files = std::function<std::string(const char*)>;

/// Each command's base run, which every probe of its options extends.
std::map<std::string, std::vector<std::string>> base_runs(const std::string& src) {
  return {{"footprint", {"footprint", "deepseek-v3", "nemotron-h-8b"}},
          {"compare", {"compare", "deepseek-v3", "nemotron-h-8b", "llama-3.1-8b"}},
          {"capacity",
           {"capacity", "deepseek-v3", "nemotron-h-8b", "--gpu", "h200", "--tp", "8", "--context",
            "8k"}},
          {"roofline", {"roofline", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--batch", "1,8"}},
          {"simulate",
           {"simulate", "deepseek-v2-lite", "nemotron-h-8b", "--gpu", "h100", "--requests", "40"}},
          {"measure", {"measure", "--backend", "fake"}},
          {"plan", {"plan", src + "/tests/plans/passing.yaml"}},
          {"gpus", {"gpus"}},
          {"models", {"models"}},
          {"import", {"import", src + "/tests/data/hf/llama-3.1-8b.json"}},
          {"completion", {"completion", "bash"}},
          {"man", {"man"}}};
}

/// Options with the same meaning everywhere; a command-specific entry wins (specific_probes).
std::map<std::string, Probe> common_probes(const Files& file, const std::string& src) {
  return {
      {"--context", {{"64k"}}},
      {"--kv-dtype", {{"fp8"}}},
      {"--kv-scale", {{"token-head"}, {"--kv-dtype", "fp8"}}},
      {"--kv-scale-dtype", {{"fp16"}, {"--kv-dtype", "fp8", "--kv-scale", "token-head"}}},
      {"--mla-cache", {{"expanded"}}},
      {"--mamba-cache-dtype", {{"fp32"}}},
      {"--mamba-ssm-cache-dtype", {{"bf16"}}},
      {"--block-size", {{"256"}}},
      {"--explain", {{}}},
      {"--format", {{"csv"}}},
      {"--units", {{"si"}}},
      {"--output", {{file("result.txt")}}},
      {"--gpu", {{"b200"}}},
      {"--gpu-file", {{file("missing-catalog.yaml")}}},
      {"--gpus", {{"16"}}},
      {"--nodes", {{"2"}}},
      {"--gpus-per-node", {{"4"}, {"--nodes", "4"}}},
      {"--redundant-experts", {{"32"}, {"--ep", "8"}}},
      {"--tp", {{"2"}}},
      {"--pp", {{"2"}}},
      {"--ep", {{"4"}}},
      {"--dcp", {{"2"}}},
      {"--dp-attention", {{}}},
      {"--dp", {{"2"}}},
      {"--weight-dtype", {{"bf16"}}},
      {"--mtp", {{}}},
      {"--engine", {{"sglang"}}},
      {"--gpu-memory-utilization", {{"0.8"}}},
      {"--mem-fraction-static", {{"0.8"}, {"--engine", "sglang"}}},
      {"--free-gpu-memory-fraction", {{"0.8"}, {"--engine", "trtllm"}}},
      {"--max-batched-tokens", {{"65536"}}},
      {"--max-seqs", {{"2048"}}},
      {"--reserve", {{"10GiB"}}},
      {"--non-kv-memory", {{"100GiB"}}},
      {"--kv-cache-memory", {{"10GiB"}}},
      {"--mamba-cache-mode", {{"align"}}},
      {"--max-model-len", {{"2k"}}},
      {"--num-gpu-blocks-override", {{"1000"}}},
      {"--device-profile", {{src + "/tests/data/profiles/h200-example.yaml"}}},
      {"--efficiency", {{"bw=0.5"}}},
      {"--plot", {{file("plot.svg")}}},
      {"--save-profile", {{file("saved-profile.yaml")}}},
      {"--query", {{"2"}}},
      {"--batch", {{"32"}}},
  };
}

/// Probes of one command's option ("command --option").
std::map<std::string, Probe> specific_probes(const Files& file, const std::string& src) {
  const std::vector<std::string> compare_gpu{"--gpu", "h200", "--tp", "8"};
  const std::vector<std::string> burst{"--kv-cache-memory", "1GiB", "--arrival", "burst"};
  return {
      {"compare --baseline", {{"llama-3.1-8b"}}},
      {"compare --gpu", {{"h200"}}},
      {"compare --gpu-file", {{file("missing-catalog.yaml")}, compare_gpu}},
      {"compare --gpus", {{"16"}, compare_gpu}},
      {"compare --tp", {{"4"}, {"--gpu", "h200"}}},
      {"compare --pp", {{"2"}, compare_gpu}},
      {"compare --ep", {{"3"}, compare_gpu}},
      {"compare --dcp", {{"2"}, compare_gpu}},
      {"compare --dp-attention", {{}, compare_gpu}},
      {"compare --dp", {{"2"}, compare_gpu}},
      {"compare --weight-dtype", {{"bf16"}, compare_gpu}},
      {"compare --mtp", {{}, compare_gpu}},
      {"compare --engine", {{"sglang"}, compare_gpu}},
      {"compare --gpu-memory-utilization", {{"0.8"}, compare_gpu}},
      {"compare --mem-fraction-static", {{"0.8"}, {"--gpu", "h200", "--engine", "sglang"}}},
      {"compare --free-gpu-memory-fraction", {{"0.8"}, {"--gpu", "h200", "--engine", "trtllm"}}},
      {"compare --max-batched-tokens", {{"65536"}, compare_gpu}},
      {"compare --max-seqs", {{"2048"}, compare_gpu}},
      {"compare --reserve", {{"10GiB"}, compare_gpu}},
      {"compare --non-kv-memory", {{"100GiB"}, compare_gpu}},
      {"compare --kv-cache-memory", {{"10GiB"}, compare_gpu}},
      {"compare --mamba-cache-mode", {{"align"}, compare_gpu}},
      {"compare --max-model-len", {{"2k"}, {"--gpu", "h200", "--context", "1k"}}},
      {"compare --num-gpu-blocks-override", {{"1000"}, compare_gpu}},
      {"compare --nodes", {{"2"}, compare_gpu}},
      {"compare --gpus-per-node", {{"4"}, {"--gpu", "h200", "--tp", "8", "--nodes", "4"}}},
      {"compare --redundant-experts", {{"32"}, {"--gpu", "h200", "--tp", "8", "--ep", "8"}}},
      {"capacity --max-context-at", {{"4"}}},
      {"simulate --max-model-len", {{"1k"}}},
      {"simulate --slo", {{"ttft_p99=2s"}}},
      {"simulate --slo-search", {{"batch"}, {"--slo", "ttft_p99=2s", "--output-tokens", "8"}}},
      {"capacity --gpus", {{"16"}}},
      {"roofline --prompt", {{"8k"}, {"--phase", "prefill"}}},
      {"roofline --phase", {{"prefill"}}},
      {"roofline --mla", {{"naive"}}},
      {"roofline --naive-kv", {{"materialized"}, {"--mla", "naive"}}},
      {"roofline --mla-crossover", {{}}},
      {"roofline --measure",
       {{}, {"--device-profile", src + "/tests/data/profiles/h200-example.yaml"}}},
      {"capacity --measure",
       {{}, {"--device-profile", src + "/tests/data/profiles/h200-example.yaml"}}},
      {"simulate --measure",
       {{}, {"--device-profile", src + "/tests/data/profiles/h200-example.yaml"}}},
      {"roofline --no-comm", {{}}},
      {"roofline --ops", {{}}},
      {"roofline --pp", {{"2"}}},
      {"roofline --mamba-cache-dtype", {{"fp32"}, {"nemotron-h-8b"}}},
      {"roofline --mamba-ssm-cache-dtype", {{"bf16"}, {"nemotron-h-8b"}}},
      {"roofline --units", {{"si"}, {"--ops"}}},
      {"roofline --ep", {{"4"}}},
      {"roofline --gpus", {{"16"}, {"--ep", "16"}}},
      {"roofline --nodes", {{"2"}, {"--ep", "16"}}},
      {"roofline --gpus-per-node", {{"4"}, {"--nodes", "2", "--ep", "16"}}},
      {"roofline --batch-per-gpu", {{"4"}}},
      {"roofline --mtp", {{"1"}}},
      {"roofline --accept", {{"0.5"}, {"--mtp", "1"}}},
      {"roofline --overlap", {{"two-batch"}, {"--dp-attention"}}},
      {"roofline --expert-imbalance", {{"2"}}},
      {"roofline --dispatch-dtype", {{"bf16"}, {"--dp-attention"}}},
      {"simulate --workload", {{src + "/docs/examples/chat.yaml"}}},
      {"simulate --trace", {{src + "/tests/data/traces/requests.csv"}}},
      {"simulate --arrival", {{"constant"}}},
      {"simulate --rate", {{"5"}}},
      {"simulate --prompt-tokens", {{"200"}}},
      {"simulate --output-tokens", {{"20"}}},
      {"simulate --duration", {{"1"}}},
      {"simulate --requests", {{"10"}}},
      {"simulate --concurrency", {{"4"}}},
      {"simulate --ceilings", {{"datasheet"}}},
      {"simulate --seed", {{"7"}}},
      {"simulate --preemption", {{"swap"}, burst}},
      {"simulate --swap-bandwidth",
       {{"5GB"},
        [&] {
          auto c = burst;
          c.insert(c.end(), {"--preemption", "swap"});
          return c;
        }()}},
      {"simulate --no-prefix-sharing", {{}, {"--workload", src + "/docs/examples/chat.yaml"}}},
      {"simulate --mla", {{"naive"}}},
      {"simulate --gpus", {{"2"}}},
      {"simulate --max-seqs", {{"2"}}},
      {"simulate --max-batched-tokens", {{"512"}}},
      {"simulate --timeline", {{file("timeline.csv")}}},
      {"simulate --tp", {{"2"}}},
      {"simulate --dcp", {{"2"}, {"--tp", "2"}}},
      {"simulate --ep", {{"3"}, {"--tp", "2"}}},
      {"simulate --dp", {{"2"}, {"--tp", "2"}}},
      {"simulate --nodes", {{"1"}, {"--gpus-per-node", "2"}}},
      {"simulate --gpus-per-node", {{"2"}, {"--nodes", "1"}}},
      {"simulate --redundant-experts", {{"2"}}},
      {"simulate --prefill", {{"1x1"}, {"--decode", "1x1"}}},
      {"simulate --decode", {{"1x2"}, {"--prefill", "1x1"}}},
      {"simulate --overlap", {{"two-batch"}, {"--tp", "2", "--ep", "2", "--dp-attention"}}},
      {"simulate --expert-imbalance", {{"2"}, {"--tp", "2", "--ep", "2", "--dp-attention"}}},
      {"simulate --weight-dtype", {{"fp8"}}},
      {"simulate --free-gpu-memory-fraction", {{"0.8"}, {"--engine", "trtllm", "--max-seqs", "8"}}},
      {"measure --backend", {{"cuda"}}},
      {"measure --heads", {{"4"}}},
      {"measure --batch", {{"3"}}},
      {"measure --context", {{"8k"}}},
      {"measure --query", {{"2"}}},
      {"measure --quick", {{}}},
      {"measure --profile", {{file("profile.yaml")}}},
      {"plan --report", {{file("report.md")}}},
      {"import --name", {{"my-llama"}}},
      {"man --markdown", {{}}},
  };
}

} // namespace

TEST_CASE("every option of every command changes the result or is refused", "[cli][options]") {
  auto dir = temp_dir();
  const std::string src = KVCALC_SOURCE_DIR;
  Files file = [&](const char* name) { return (dir / name).string(); };
  const auto bases = base_runs(src);
  const auto common = common_probes(file, src);
  const auto specific = specific_probes(file, src);

  Run man = invoke({"man", "--markdown"});
  std::string command;
  std::vector<std::string> untested;
  std::istringstream lines(man.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("### `kvcalc ")) {
      command = line.substr(12, line.size() - 13);
      continue;
    }
    if (!line.starts_with("| `-")) {
      continue;
    }
    // "| `-o`, `--output` | …": the long spelling.
    std::string names = line.substr(2, line.find(" |", 2) - 2);
    std::size_t tick = names.rfind("`--");
    std::string option = names.substr(tick + 1, names.find('`', tick + 1) - tick - 1);
    INFO(command << " " << option);
    auto it = specific.find(command + " " + option);
    const Probe* probe = it != specific.end() ? &it->second : nullptr;
    if (!probe) {
      auto c = common.find(option);
      probe = c != common.end() ? &c->second : nullptr;
    }
    if (!probe) {
      untested.push_back(command + " " + option);
      continue;
    }
    std::vector<std::string> base = bases.at(command);
    base.insert(base.end(), probe->context.begin(), probe->context.end());
    bool changed = false;
    for (const char* format : {"table", "json"}) {
      std::vector<std::string> without = base;
      std::vector<std::string> with = base;
      with.push_back(option);
      with.insert(with.end(), probe->values.begin(), probe->values.end());
      bool formats = command != "import" && command != "completion" && command != "man";
      if (formats && option != "--format") {
        without.insert(without.end(), {"--format", format});
        with.insert(with.end(), {"--format", format});
      }
      Run a = attempt(without);
      Run b = attempt(with);
      changed = changed || a.code != b.code || a.out != b.out || a.err != b.err;
    }
    CHECK(changed);
  }
  CHECK(untested.empty()); // every option has a probe: add one with a new option
  for (const auto& u : untested) {
    WARN("no probe for " << u);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("progress: n/N on a terminal once the work has run a second, else nothing",
          "[cli][progress]") {
  double now = 0;
  std::ostringstream seen;
  kvcalc::cli::Progress on(seen, 3, true, [&] { return now; });
  on.step("first"); // under a second: quiet
  now = 1.5;
  on.step("second");
  on.step("third");
  CHECK(seen.str() == "kvcalc: [2/3] second\nkvcalc: [3/3] third\n");
  std::ostringstream piped;
  kvcalc::cli::Progress off(piped, 2, false, [&] { return now; });
  off.step("one");
  off.step("two");
  CHECK(piped.str().empty());
}

TEST_CASE("capacity and the MLA crossover draw their plots", "[cli][plot]") {
  auto dir = temp_dir();
  std::string capacity = (dir / "capacity.svg").string();
  Run a = invoke({"capacity", "llama-3.1-70b", "deepseek-v3", "--gpu", "h200", "--gpus", "8",
                  "--tp", "8", "--context", "32k", "--plot", capacity});
  REQUIRE(a.code == 0);
  std::string svg = slurp(capacity);
  CHECK(svg.find("Sequences that fit against context") != std::string::npos);
  CHECK(svg.find("deepseek-v3 on h200, tp 8") != std::string::npos);
  CHECK(svg.find(">100k<") != std::string::npos); // context ticks read as tokens, not 1e+05
  std::string crossover = (dir / "crossover.svg").string();
  Run b = invoke({"roofline", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--mla-crossover",
                  "--context", "4k", "--plot", crossover});
  REQUIRE(b.code == 0);
  svg = slurp(crossover);
  CHECK(svg.find("absorbed: deepseek-v3 on h200,") != std::string::npos);
  CHECK(svg.find("naive: deepseek-v3 on h200,") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a piped trace and a piped model are read like files, once", "[cli][sim][pipe]") {
  auto dir = temp_dir() / "pipes";
  std::filesystem::create_directories(dir);
  std::string trace =
      slurp(std::filesystem::path(KVCALC_SOURCE_DIR) / "tests/data/traces/requests.csv");
  std::string fifo = (dir / "trace").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A pipe can be read once: both models replay what it held.
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << trace; });
  Run r = invoke({"simulate", "llama-3.1-8b", "llama-3.1-70b", "--gpu", "h100", "--gpus", "8",
                  "--tp", "8", "--trace", fifo, "--format", "csv"});
  writer.join();
  REQUIRE(r.code == 0);
  CHECK(r.out.find("\nllama-3.1-8b,h100-sxm,8,8,vllm,,,282404,16,40,40,") != std::string::npos);
  CHECK(r.out.find("\nllama-3.1-70b,h100-sxm,8,8,vllm,") != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 3); // the header and two full runs
  std::string model = (dir / "model").string();
  REQUIRE(::mkfifo(model.c_str(), 0600) == 0);
  std::thread feeder([&] {
    std::ofstream(model, std::ios::binary)
        << slurp(std::filesystem::path(KVCALC_SOURCE_DIR) / "models/llama-3.1-8b.yaml");
  });
  Run m = invoke({"footprint", model, "--context", "4k"});
  feeder.join();
  CHECK(m.code == 0);
  CHECK(m.out.find("131,072 B") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a sweep's exit code is its worst outcome; one in which nothing ran fails as its first "
          "combination would",
          "[cli][sweep]") {
  using kvcalc::cli::Outcome;
  using kvcalc::cli::SweepOutcomes;
  SweepOutcomes all_ok;
  all_ok.add(Outcome::ok);
  all_ok.add(Outcome::ok);
  CHECK(all_ok.exit_code() == 0);
  CHECK_NOTHROW(all_ok.throw_if_none_ran());

  SweepOutcomes unfit;
  unfit.add(Outcome::ok);
  unfit.add(kvcalc::DoesNotFit("too big"));
  CHECK(unfit.exit_code() == 4);
  CHECK(kvcalc::cli::outcome_of(kvcalc::DoesNotFit("x")) == Outcome::does_not_fit);

  // A combination that cannot run outweighs one that does not fit, whatever the order.
  SweepOutcomes mixed;
  mixed.add(Outcome::does_not_fit);
  mixed.add(kvcalc::InputError("tp 3 does not split 32 heads"));
  mixed.add(Outcome::ok);
  CHECK(mixed.exit_code() == 2);
  CHECK_NOTHROW(mixed.throw_if_none_ran());

  SweepOutcomes none;
  none.add(kvcalc::InputError("first"));
  none.add(kvcalc::InputError("second"));
  try {
    none.throw_if_none_ran();
    FAIL("a sweep in which nothing ran must fail");
  } catch (const kvcalc::Error& e) {
    CHECK(std::string(e.what()) == "first");
    CHECK(e.code() == kvcalc::ExitCode::bad_input);
  }

  // Priced but too big has its figures and the command prints them (capacity); stopped before
  // it was priced by a DoesNotFit has none, and a sweep of only those fails (simulate).
  SweepOutcomes priced_unfit;
  priced_unfit.add(Outcome::does_not_fit);
  CHECK_NOTHROW(priced_unfit.throw_if_none_ran());
  CHECK(priced_unfit.exit_code() == 4);
  SweepOutcomes stopped_unfit;
  stopped_unfit.add(kvcalc::DoesNotFit("no room"));
  CHECK_THROWS_AS(stopped_unfit.throw_if_none_ran(), kvcalc::Error);
  CHECK(stopped_unfit.exit_code() == 4);

  // Only a combination's own errors become rows; an internal error stops the command.
  CHECK(kvcalc::cli::attempt([] { throw kvcalc::InputError("n/a"); }).has_value());
  CHECK_FALSE(kvcalc::cli::attempt([] {}).has_value());
  CHECK_THROWS_AS(kvcalc::cli::attempt([] { throw kvcalc::Error("internal"); }), kvcalc::Error);
}
