// peak_memory COMMAND [ARG ...]: runs COMMAND with its output thrown away and prints
// "peak_kib=N exit=E": the largest resident set of the finished child as the kernel accounts it
// (wait4's ru_maxrss, KiB), and its exit status. The flat-memory check
// (check_flat_memory.cmake) compares two sweeps with it.

#include <cstdio>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: peak_memory COMMAND [ARG ...]\n");
    return 2;
  }
  pid_t child = fork();
  if (child < 0) {
    std::perror("peak_memory: fork");
    return 1;
  }
  if (child == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
    }
    execvp(argv[1], argv + 1);
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (wait4(child, &status, 0, &usage) < 0) {
    std::perror("peak_memory: wait4");
    return 1;
  }
  std::printf("peak_kib=%ld exit=%d\n", usage.ru_maxrss,
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return 0;
}
