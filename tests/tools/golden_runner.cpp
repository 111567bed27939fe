// Runs one golden CLI case: a file with the command line, the expected exit code, stdout and
// stderr. With KVCALC_UPDATE_GOLDEN=1 it rewrites the case with what the binary printed.
//
// Case format (tests/golden/README.md):
//   # free text
//   args: footprint deepseek-v3 --context 4k
//   exit: 0
//   --- stdout
//   ...
//   --- stderr
//   ...

#include <cerrno>
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

Case read_case(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  Case c;
  std::string line;
  std::string* section = nullptr;
  while (std::getline(in, line)) {
    if (line == "--- stdout") {
      section = &c.out;
    } else if (line == "--- stderr") {
      section = &c.err;
    } else if (section != nullptr) {
      *section += line + '\n';
    } else if (line.rfind("args:", 0) == 0) {
      c.args = line.substr(5);
    } else if (line.rfind("exit:", 0) == 0) {
      c.exit_code = std::stoi(line.substr(5));
    } else {
      c.header += line + '\n';
    }
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

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: golden_runner KVCALC_BINARY CASE_FILE\n";
    return 2;
  }
  try {
    std::string binary = argv[1];
    std::string path = argv[2];
    Case c = read_case(path);
    Result r = run(binary, split_args(c.args));
    const char* update = std::getenv("KVCALC_UPDATE_GOLDEN");
    if (update != nullptr && std::string(update) == "1") {
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
