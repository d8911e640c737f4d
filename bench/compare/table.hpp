// The console table of flashattn-compare.
#pragma once

#include <cstdio>
#include <vector>

#include "compare/row.hpp"

namespace compare {

// Columns sized to their contents; a seqlen column is added when rows differ in it.
void print_table(std::FILE* out, const std::vector<Row>& rows);

}  // namespace compare
