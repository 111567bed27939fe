#pragma once
// Catch2's session, compiled once for every test binary (catch_session.cpp): each binary's main
// runs it.

/// Runs every test case selected by the command line; returns the exit code.
int run_catch_session(int argc, char* argv[]);
