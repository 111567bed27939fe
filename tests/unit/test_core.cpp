#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/dtype.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

using namespace kvcalc;

TEST_CASE("token counts take binary k and M suffixes", "[core][units]") {
  CHECK(parse_count("4096", "--context") == 4096);
  CHECK(parse_count("4k", "--context") == 4096);
  CHECK(parse_count("4K", "--context") == 4096);
  CHECK(parse_count("128k", "--context") == 131072);
  CHECK(parse_count("1M", "--context") == 1048576);
  CHECK(parse_count("1.5k", "--context") == 1536);
  CHECK(parse_count(" 32k ", "--context") == 32768);
  CHECK(parse_count_list("4k,32k,128k", "--context") == std::vector<u64>{4096, 32768, 131072});
}

TEST_CASE("bad token counts are input errors that say what is expected", "[core][units]") {
  for (const char* bad : {"", "0", "-4k", "4x", "k", "1.0001k", "4k,", "99999999999999999999",
                          "18014398509481984M"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_count_list(bad, "--context"), InputError);
  }
  CHECK_THROWS_WITH(parse_count("-1", "--context"), Catch::Contains("--context '-1'") &&
                                                        Catch::Contains("negative") &&
                                                        Catch::Contains("128k (= 131,072)"));
  // Never a wrap, a base or a sign: what strtoull would take as 1, 8 or 2.
  for (const char* bad :
       {"-18446744073709551615", "0x2", "+4", "4e1", "0b10", "18446744073709551616"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_count(bad, "--tp"), InputError);
  }
  CHECK(parse_count("010", "--tp") == 10); // decimal, as the file readers read it, never octal
}

TEST_CASE("digit grouping", "[core][units]") {
  CHECK(group_digits(0) == "0");
  CHECK(group_digits(999) == "999");
  CHECK(group_digits(1000) == "1,000");
  CHECK(group_digits(70272) == "70,272");
  CHECK(group_digits(2621440) == "2,621,440");
  CHECK(group_digits(18446744073709551615ULL) == "18,446,744,073,709,551,615");
}

TEST_CASE("checked arithmetic refuses to wrap", "[core][checked]") {
  CHECK(checked_mul(1ULL << 32, 1ULL << 31) == 1ULL << 63);
  CHECK_THROWS_AS(checked_mul(1ULL << 32, 1ULL << 32), OverflowError);
  CHECK_THROWS_AS(checked_add(UINT64_MAX, 1), OverflowError);
  CHECK(ceil_div(UINT64_MAX, 2) == (UINT64_MAX / 2) + 1);
  CHECK(ceil_div(4096, 16) == 256);
  CHECK(ceil_div(4097, 16) == 257);
}

TEST_CASE("dtypes: bits, packed storage, aliases", "[core][dtype]") {
  CHECK(dtype_bits(DType::bf16) == 16);
  CHECK(dtype_bits(DType::nvfp4) == 4);
  CHECK(dtype_storage_bytes(DType::int4, 3) == 2); // 12 bits round up to 2 bytes
  CHECK(dtype_storage_bytes(DType::fp32, 576) == 2304);
  CHECK(parse_dtype("fp8") == DType::fp8_e4m3);
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK(parse_dtype("FP8-E5M2") == DType::fp8_e5m2);
  CHECK(parse_dtype("float32") == DType::fp32);
  CHECK_THROWS_WITH(parse_dtype("bf61", "--kv-dtype"),
                    Catch::Contains("unknown --kv-dtype 'bf61'") &&
                        Catch::Contains("did you mean 'bf16'?"));
  // The aliases users type are candidates: fp9 is one edit from fp8 (fp8_e4m3), two from fp32.
  CHECK_THROWS_WITH(parse_dtype("fp9", "--kv-dtype"),
                    Catch::Contains("did you mean 'fp8' (fp8_e4m3)"));
  CHECK_THROWS_WITH(parse_dtype("Float61", "--kv-dtype"), Catch::Contains("'float16' (fp16)"));
}

TEST_CASE("did-you-mean finds near misses only", "[core][spell]") {
  std::vector<std::string> keys{"kv_heads", "heads", "head_dim", "kv_lora_rank"};
  CHECK(closest_match("num_kv_head", keys) == std::nullopt);
  CHECK(closest_match("kv_head", keys) == "kv_heads");
  CHECK(closest_match("head_dims", keys) == "head_dim");
  CHECK(closest_match("vocabulary", keys) == std::nullopt);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("names fold ASCII case only", "[core][spell]") {
  CHECK(ascii_lower("NVIDIA H200-SXM_141GB") == "nvidia h200-sxm_141gb");
  CHECK(ascii_lower("") == "");
  // UTF-8 bytes pass through untouched: "Ä" stays two bytes, unlowered.
  CHECK(ascii_lower("\xC3\x84"
                    "Bc") == "\xC3\x84"
                             "bc");
  CHECK(iequals("AUTO", "auto"));
  CHECK(iequals("DeepSeek-V3", "deepseek-v3"));
  CHECK_FALSE(iequals("auto", "autos"));
  CHECK_FALSE(iequals("h200", "h100"));
  // The neighbours of the letter ranges are not letters.
  CHECK(ascii_lower("@[`{") == "@[`{");
  CHECK_FALSE(iequals("@[", "`{"));
}

TEST_CASE("byte sizes take IEC and SI units, exactly", "[core][units]") {
  CHECK(parse_bytes("4096", "--reserve") == 4096);
  CHECK(parse_bytes("3.81GiB", "--kv-cache-memory") == 4090956349ULL); // 381 x 2^30 / 100, floored
  CHECK(parse_bytes("80GB", "--reserve") == 80000000000ULL);
  CHECK(parse_bytes("512 MiB", "--reserve") == 536870912ULL);
  CHECK(parse_bytes("1.5kB", "--reserve") == 1500);
  CHECK(parse_bytes("2TiB", "--reserve") == 2ULL << 40);
  for (const char* bad :
       {"", "GiB", "-1GiB", "3.81GiBs", "1.2.3GB", "1.1234567GiB", "99999999999TiB"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_bytes(bad, "--reserve"), InputError);
  }
  CHECK_THROWS_WITH(parse_bytes("3x", "--reserve"),
                    Catch::Contains("invalid --reserve '3x': unknown unit 'x'"));
}

TEST_CASE("fractions are checked against their range", "[core][units]") {
  CHECK(parse_fraction("0.9", "--gpu-memory-utilization", 0, 1) == Approx(0.9));
  CHECK_THROWS_WITH(parse_fraction("1.5", "--gpu-memory-utilization", 0, 1),
                    Catch::Contains("expected a number from 0 to 1"));
  CHECK_THROWS_AS(parse_fraction("nan", "--x", 0, 1), InputError);
  CHECK_THROWS_AS(parse_fraction("0.5x", "--x", 0, 1), InputError);
}

namespace {

/// A fresh folder under the system's temporary one, removed with the object.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& name)
      : dir(std::filesystem::temp_directory_path() /
            ("kvcalc-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  [[nodiscard]] std::string file(const std::string& name, const std::string& text) const {
    std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  [[nodiscard]] std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir),
                                                  std::filesystem::directory_iterator()));
  }
};

/// A file's text, read without noting it as an input.
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

TEST_CASE("an output is written beside its target and renamed over it when complete",
          "[core][file]") {
  Scratch s("output");
  std::string target = s.file("report.json", "old");
  ::chmod(target.c_str(), 0640);
  {
    OutputFile out(target, "-o");
    out.stream() << "new";
    CHECK(slurp(target) == "old"); // untouched until commit
    CHECK(s.entries() == 2);       // the target and its temporary
  }
  CHECK(slurp(target) == "old"); // destroyed without commit: the old file stays
  CHECK(s.entries() == 1);       // and the temporary is gone
  write_text_file(target, "new", "-o");
  CHECK(slurp(target) == "new");
  struct stat st {};
  REQUIRE(::stat(target.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640); // the replaced file's mode is kept
  // Through a link, the file it names is written and the link stays a link.
  std::filesystem::create_symlink(target, s.dir / "link.json");
  write_text_file((s.dir / "link.json").string(), "linked", "-o");
  CHECK(std::filesystem::is_symlink(s.dir / "link.json"));
  CHECK(slurp(target) == "linked");
  write_text_file(target, " more", "--report", WriteMode::append);
  CHECK(slurp(target) == "linked more");
  // A pipe, and what /dev names, are written in place: never replaced by a file.
  std::string fifo = (s.dir / "pipe").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  write_text_file(fifo, "through", "-o");
  reader.join();
  CHECK(got == "through");
  CHECK(std::filesystem::is_fifo(fifo));
  write_text_file("/dev/null", "nothing", "-o");
  CHECK(std::filesystem::is_character_file("/dev/null"));
  // `-o /dev/stdout` into a pipe: /proc/self/fd/N links to "pipe:[…]", which is no path.
  int ends[2];
  REQUIRE(::pipe(ends) == 0);
  write_text_file("/proc/self/fd/" + std::to_string(ends[1]), "piped", "-o");
  ::close(ends[1]);
  char buffer[16] = {};
  CHECK(::read(ends[0], buffer, sizeof buffer) == 5);
  ::close(ends[0]);
  CHECK(std::string(buffer) == "piped");
}

TEST_CASE("no output replaces a file the run read, by any name", "[core][file]") {
  Scratch s("inputs");
  std::string trace = s.file("trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n");
  std::filesystem::create_symlink(trace, s.dir / "alias.csv");
  (void)read_text_file((s.dir / "alias.csv").string());
  CHECK_THROWS_WITH(OutputFile(trace, "--timeline"),
                    Catch::Contains("--timeline would write") &&
                        Catch::Contains("which this run reads as") && Catch::Contains("alias.csv"));
  CHECK_THROWS_AS(write_text_file(trace, "x", "-o", WriteMode::append), InputError);
  CHECK(slurp(trace) == "arrival_s,prompt_tokens,output_tokens\n0,1,1\n");
  // An input read after the output was opened is caught when it is committed.
  std::string late = s.file("late.yaml", "a: 1\n");
  OutputFile out(late, "--profile");
  out.stream() << "b: 2\n";
  (void)read_text_file(late);
  CHECK_THROWS_WITH(out.commit(), Catch::Contains("--profile would write"));
  CHECK(slurp(late) == "a: 1\n");
}

TEST_CASE("inputs are files or pipes of bounded size, never folders", "[core][file]") {
  Scratch s("reads");
  CHECK_THROWS_WITH(read_text_file(s.dir.string()), Catch::Contains("is a folder, not a file"));
  CHECK_THROWS_WITH(read_text_file((s.dir / "missing").string()), Catch::Contains("no such file"));
  // A regular file over the limit is refused before it is read (a sparse file: no disk used).
  std::string big = s.file("big.json", "");
  std::filesystem::resize_file(big, k_max_input_bytes + 1);
  CHECK_THROWS_WITH(read_text_file(big), Catch::Contains("more than the 16 MiB"));
  // A device with no end is read to the limit, not forever.
  CHECK_THROWS_WITH(read_text_file("/dev/zero"), Catch::Contains("more than the 16 MiB"));
  // A pipe is read whole.
  std::string fifo = (s.dir / "pipe").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::thread writer([&] { std::ofstream(fifo) << "through a pipe"; });
  CHECK(read_text_file(fifo) == "through a pipe");
  writer.join();
}

TEST_CASE("text echoed to a terminal carries no control characters", "[core][spell]") {
  CHECK(printable("unknown key '\x1b[31mevil'") == "unknown key '\\x1b[31mevil'");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("lines\nand\ttabs, µs and ≤ stay") == "lines\nand\ttabs, µs and ≤ stay");
}
