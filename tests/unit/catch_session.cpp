// Catch2's implementation, compiled once for every test binary (unit, freed-memory, device).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

int run_catch_session(int argc, char* argv[]) {
  return Catch::Session().run(argc, argv);
}
