// Runs one golden CLI case: a file with the command line, the expected exit code, stdout and
// stderr. With KVCALC_UPDATE_GOLDEN=1 it rewrites the case with what the binary printed.
//
// `golden_runner --readme README.md` instead checks the README's examples: each
// `<!-- golden: tests/golden/NAME.case -->` line is followed by a fenced block that must hold
// "$ kvcalc ARGS", then the case's stdout and stderr. The cases are checked against the binary
// by their own tests, so the README cannot go stale; KVCALC_UPDATE_GOLDEN=1 rewrites the blocks.
//
// Case format (tests/golden/README.md):
//   # free text
//   args: footprint deepseek-v3 --context 4k
//   exit: 0
//   --- stdout
//   ...
//   --- stderr
//   ...
// `args:`, `exit:`, `--- stdout` and `--- stderr` are mandatory, once each, in that order for the
// two sections (either may be empty); a case without one is refused, never read as empty.

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <poll.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct Case {
  std::string header; // comment lines, kept on update
  std::string args;
  int exit_code = 0;
  std::string out;
  std::string err;
};

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// The exit code of an `exit:` line's value: a number from 0 to 255, spaces around it allowed.
int parse_exit_code(const std::string& text, const std::string& where) {
  std::size_t first = text.find_first_not_of(' ');
  std::size_t last = text.find_last_not_of(' ');
  int code = -1;
  if (first != std::string::npos) {
    const char* begin = text.data() + first;
    const char* end = text.data() + last + 1;
    auto [ptr, ec] = std::from_chars(begin, end, code);
    if (ec != std::errc() || ptr != end) {
      code = -1;
    }
  }
  if (code < 0 || code > 255) {
    throw std::runtime_error(where + ": 'exit:' needs an exit code from 0 to 255, not '" + text +
                             "'");
  }
  return code;
}

Case read_case(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  Case c;
  bool has_args = false;
  bool has_exit = false;
  bool has_out = false;
  bool has_err = false;
  std::string line;
  std::string* section = nullptr;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number);
    if (line == "--- stdout" || line == "--- stderr") {
      bool out = line == "--- stdout";
      if (out ? has_out : has_err) {
        throw std::runtime_error(where + ": a second '" + line + "' header");
      }
      if (out && has_err) {
        throw std::runtime_error(where + ": '--- stdout' must come before '--- stderr'");
      }
      (out ? has_out : has_err) = true;
      section = out ? &c.out : &c.err;
    } else if (section != nullptr) {
      *section += line + '\n';
    } else if (line.rfind("args:", 0) == 0) {
      if (has_args) {
        throw std::runtime_error(where + ": a second 'args:' line");
      }
      has_args = true;
      c.args = line.substr(5);
    } else if (line.rfind("exit:", 0) == 0) {
      if (has_exit) {
        throw std::runtime_error(where + ": a second 'exit:' line");
      }
      has_exit = true;
      c.exit_code = parse_exit_code(line.substr(5), where);
    } else {
      c.header += line + '\n';
    }
  }
  std::vector<std::string> missing;
  for (auto [present, what] :
       {std::pair{has_args, "an 'args:' line"}, std::pair{has_exit, "an 'exit:' line"},
        std::pair{has_out, "a '--- stdout' header"}, std::pair{has_err, "a '--- stderr' header"}}) {
    if (!present) {
      missing.emplace_back(what);
    }
  }
  if (!missing.empty()) {
    std::string list = missing.front();
    for (std::size_t i = 1; i < missing.size(); ++i) {
      list += (i + 1 == missing.size() ? " and " : ", ") + missing[i];
    }
    throw std::runtime_error(path + ": the case lacks " + list +
                             " (every case has args:, exit:, then '--- stdout' and '--- stderr', "
                             "either section possibly empty: tests/golden/README.md)");
  }
  return c;
}

/// Splits on spaces; single or double quotes group words.
std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char ch : s) {
    if (quote != 0) {
      if (ch == quote) {
        quote = 0;
      } else {
        word += ch;
      }
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
      in_word = true;
    } else if (ch == ' ') {
      if (in_word) {
        out.push_back(word);
        word.clear();
        in_word = false;
      }
    } else {
      word += ch;
      in_word = true;
    }
  }
  if (in_word) {
    out.push_back(word);
  }
  return out;
}

Result run(const std::string& binary, const std::vector<std::string>& args) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
    throw std::runtime_error("pipe failed");
  }
  pid_t pid = fork();
  if (pid < 0) {
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    int null_in = open("/dev/null", O_RDONLY);
    dup2(null_in, 0);
    setenv("NO_COLOR", "1", 1);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Result r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buffer[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw std::runtime_error("poll failed");
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP)) != 0) {
        ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
        if (n > 0) {
          sinks[i]->append(buffer, static_cast<std::size_t>(n));
        } else {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
        }
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

void show_difference(const std::string& what, const std::string& expected,
                     const std::string& actual) {
  std::istringstream e(expected);
  std::istringstream a(actual);
  std::string el;
  std::string al;
  int line = 1;
  while (true) {
    bool has_e = static_cast<bool>(std::getline(e, el));
    bool has_a = static_cast<bool>(std::getline(a, al));
    if (!has_e && !has_a) {
      break;
    }
    if (!has_e || !has_a || el != al) {
      std::cerr << what << " differs at line " << line
                << ":\n  expected: " << (has_e ? el : "<end>")
                << "\n  actual:   " << (has_a ? al : "<end>") << '\n';
      break;
    }
    ++line;
  }
  std::cerr << "--- actual " << what << " ---\n" << actual << "--- end ---\n";
}

bool updating() {
  const char* update = std::getenv("KVCALC_UPDATE_GOLDEN");
  return update != nullptr && std::string(update) == "1";
}

/// What a README example block holds for a case: the command, then what it printed.
std::string example_block(const Case& c) {
  return "$ kvcalc" + c.args + "\n" + c.out + c.err;
}

int check_readme(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  const std::string marker = "<!-- golden: ";
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  std::string rewritten;
  int stale = 0;
  int examples = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    rewritten += lines[i] + '\n';
    if (lines[i].rfind(marker, 0) != 0) {
      continue;
    }
    std::string case_path = lines[i].substr(marker.size());
    case_path = case_path.substr(0, case_path.find(" -->"));
    if (i + 1 >= lines.size() || lines[i + 1].rfind("```", 0) != 0) {
      throw std::runtime_error(path + ":" + std::to_string(i + 2) +
                               ": a fenced block must follow " + lines[i]);
    }
    rewritten += lines[++i] + '\n';
    std::string block;
    std::size_t first = i + 1;
    while (++i < lines.size() && lines[i] != "```") {
      block += lines[i] + '\n';
    }
    if (i >= lines.size()) {
      throw std::runtime_error(path + ":" + std::to_string(first) +
                               ": the fenced block never ends");
    }
    std::string want = example_block(read_case(case_path));
    ++examples;
    if (block != want) {
      ++stale;
      if (!updating()) {
        std::cerr << path << ":" << first << ": the example of " << case_path
                  << " is not what the case holds\n";
        show_difference("example", want, block);
      }
    }
    rewritten += want + "```\n";
  }
  if (updating()) {
    std::ofstream out(path);
    out << rewritten;
    std::cout << "updated " << stale << " of " << examples << " examples in " << path << '\n';
    return 0;
  }
  if (examples == 0) {
    std::cerr << path << ": no examples marked with " << marker << "…\n";
    return 1;
  }
  if (stale > 0) {
    std::cerr << "(regenerate with KVCALC_UPDATE_GOLDEN=1 once the cases are current)\n";
  }
  return stale == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--readme") {
    try {
      return check_readme(argv[2]);
    } catch (const std::exception& e) {
      std::cerr << "golden_runner: " << e.what() << '\n';
      return 2;
    }
  }
  if (argc != 3) {
    std::cerr << "usage: golden_runner KVCALC_BINARY CASE_FILE | golden_runner --readme FILE\n";
    return 2;
  }
  try {
    std::string binary = argv[1];
    std::string path = argv[2];
    Case c = read_case(path);
    Result r = run(binary, split_args(c.args));
    if (updating()) {
      std::ofstream out(path);
      out << c.header << "args:" << c.args << "\nexit: " << r.exit_code << "\n--- stdout\n"
          << r.out << "--- stderr\n"
          << r.err;
      std::cout << "updated " << path << '\n';
      return 0;
    }
    bool ok = true;
    if (r.exit_code != c.exit_code) {
      std::cerr << "exit code: expected " << c.exit_code << ", got " << r.exit_code << '\n';
      ok = false;
    }
    if (r.out != c.out) {
      show_difference("stdout", c.out, r.out);
      ok = false;
    }
    if (r.err != c.err) {
      show_difference("stderr", c.err, r.err);
      ok = false;
    }
    if (!ok) {
      std::cerr << "case: " << path << "\nargs:" << c.args
                << "\n(regenerate with KVCALC_UPDATE_GOLDEN=1 if the change is intended)\n";
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "golden_runner: " << e.what() << '\n';
    return 2;
  }
}
