#pragma once
/// Whole-file reads and writes with the errors users see.

#include <string>

namespace kvcalc {

/// Reads a file whole; a missing or unreadable file is an InputError naming it.
[[nodiscard]] std::string read_text_file(const std::string& path);

/// Writes `text` to `path` (replacing it), or appends it; an unwritable path (a missing folder,
/// a full disk) is an Error naming it and why.
void write_text_file(const std::string& path, const std::string& text, bool append = false);

} // namespace kvcalc
