// flashattn-compare --json: every row with its problem, plus the library version and
// what each backend reported, so a result file stands on its own.
#pragma once

#include <string>
#include <vector>

#include "compare/row.hpp"

namespace compare {

// Throws std::runtime_error when the file cannot be written.
void write_json(const std::string& path, const std::vector<Row>& rows);

}  // namespace compare
