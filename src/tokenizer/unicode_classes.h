// Unicode classes as the reference tokenizers library's regex engine sees them (general categories
// and White_Space), so that a Split regex matches what the reference matches whatever Unicode
// version the system's PCRE2 knows. The data is generated: src/tokenizer/generated/unicode_classes.cpp.
#pragma once
#include <span>
#include <string_view>

namespace tf::unicode_classes {

struct CodePointRange {
  char32_t first, last;  // inclusive
};

struct UnicodeClass {
  std::string_view name;  // "L", "Lu", ..., as in \p{L}
  std::span<const CodePointRange> ranges;  // sorted, disjoint, never adjacent
};

extern const char* const kReference;  // the library and version the tables were probed from

std::span<const UnicodeClass> general_categories();
std::span<const CodePointRange> white_space();

}  // namespace tf::unicode_classes
